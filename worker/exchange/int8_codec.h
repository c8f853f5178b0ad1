// The INT8 wire encoding (docs/exchange.md, "INT8"): a float range cut
// into blocks of kInt8BlockElements values, counted from the range's first
// element; each block travels as its scale (float32, little-endian) then
// one int8 per value. A block's scale s is its max-abs / 127 rounded to
// the nearest float with 8 significant bits (a bfloat16 value; ties to
// even), clamped to [2^-126, 2^121]; a value x travels as
// q = round-half-even(x / s) clamped to [-127, 127] and decodes to q * s.
// A block whose codes are all 0 (all-zero, or all below 2^-127) has
// scale 0.
//
// Why 8 significant bits: q * s (7 bits times 8) is then exact (no
// rounding on decode, on any CPU, FMA or not), and encoding the decoded
// values again gives back the same bytes: s is within a factor 1 +- 2^-8
// of max-abs / 127, so the largest code is exactly 127 (max-abs / s lies
// in [126.506, 127.498]) and the decoded block's max-abs / 127 is s
// again. A ring all-reduce forwards decoded values and
// re-encodes them at every hop; this is what makes every replica end with
// bit-identical values (ring_all_reduce.h). A power-of-two scale has the
// same two properties but a step up to 2x coarser: on a DiLoCo outer
// momentum (the cluster test's model) its error was 1.44x this one's.
//
// Why blocks: one scale for a whole 1 MiB chunk lets one large value (a
// LayerNorm gain's update beside a weight matrix's) set the step for a
// million others. A 256-value block costs 4 bytes of scale: 1.0156 bytes
// a value, 3.94x fewer than FP32.
//
// Each fast function sits beside a plain-loop reference computed another
// way (QuantizeInt8Reference), which the tests compare it against.
//
// Thread safety: pure functions on their arguments; thread-safe.
#ifndef GASLOC_WORKER_EXCHANGE_INT8_CODEC_H_
#define GASLOC_WORKER_EXCHANGE_INT8_CODEC_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gasloc {

inline constexpr uint32_t kInt8BlockElements = 256;
inline constexpr uint32_t kInt8ScaleBytes = 4;
// The scale's range. 2^-126 is the smallest normal float: with no
// denormal scale, every decoded value is 0 or normal, so a thread that
// flushes denormals (FTZ / DAZ) decodes and re-encodes the same values as
// one that does not (values below 2^-127 travel as 0). 2^121 is the
// largest 8-bit float whose 127 times is finite.
inline constexpr int kInt8MinScaleExponent = -126;
inline constexpr int kInt8MaxScaleExponent = 121;

// Payload bytes of `elements` values: one byte each plus a scale per
// (started) block.
uint64_t Int8PayloadBytes(uint64_t elements);

// The most elements whose payload fits `chunk_bytes`, a whole number of
// blocks (at least one block, whatever chunk_bytes).
uint64_t Int8ElementsPerChunk(uint32_t chunk_bytes);

// The scale of one block (see the header; 0 when its codes are all 0);
// `block` must be finite.
float Int8BlockScale(std::span<const float> block);

// Appends the payload of `values` to `*out`. INVALID_ARGUMENT naming the
// first element that is not finite (INT8 has no code for it); `*out` is
// then unchanged.
absl::Status EncodeInt8(std::span<const float> values, std::string* out);

// Decodes `payload` (exactly Int8PayloadBytes(out.size()) bytes) into
// `out`. INVALID_ARGUMENT, naming the block by its arena elements
// (first_index = the arena index of out[0]), for a scale that is NaN,
// infinite, negative, zero under a non-zero value, with more than 8
// significant bits, or outside [2^-126, 2^121] (a denormal scale included), and
// for the value -128 (not a code); `out` may then be partly written.
absl::Status DecodeInt8(absl::string_view payload, std::span<float> out,
                        uint64_t first_index = 0);

// Replaces `values` by what a receiver decodes from EncodeInt8(values)
// (blocks counted from values[0]), without building the payload. Values
// must be finite.
void RoundToInt8(std::span<float> values);

// The plain-loop reference of EncodeInt8's numbers: for each block its
// scale, for each value its code. Computed in double, by searching the
// exponent upwards and comparing the two neighbouring 8-bit scales, and
// the two neighbouring codes, by distance.
// (A reference, not a fast path: allocates.)
struct Int8Reference {
  std::vector<float> scales;
  std::vector<int8_t> codes;
};
Int8Reference QuantizeInt8Reference(std::span<const float> values);

}  // namespace gasloc

#endif  // GASLOC_WORKER_EXCHANGE_INT8_CODEC_H_
