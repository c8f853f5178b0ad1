// The exchange wire format (docs/exchange.md): converting a float range of
// the arena to a chunk payload (fp32 or bf16, little-endian; int8 with
// block scales, worker/exchange/int8_codec.h), splitting a
// transfer's range into chunks of at most `chunk_bytes` payload bytes,
// building the v1::ChunkHeader every chunk carries, checking a received
// chunk against what the receiver expects, naming what was wrong, and the
// acknowledgement a receiver returns for a committed transfer (every
// transport runs the same MakeAck / CheckAck pair).
//
// The fast bf16 conversions sit beside plain-loop references
// (FloatToBf16Reference / Bf16ToFloatReference) that the tests compare them
// against bit for bit.
//
// Thread safety: pure functions on their arguments; thread-safe.
#ifndef GASLOC_WORKER_EXCHANGE_WIRE_CODEC_H_
#define GASLOC_WORKER_EXCHANGE_WIRE_CODEC_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gasloc/v1/job.pb.h"
#include "gasloc/v1/peer.pb.h"
#include "worker/exchange/peer_transport.h"

namespace gasloc {

// Bytes one element takes on the wire: FP32 (and UNSPECIFIED, which means
// FP32) 4, BF16 2, INT8 1 (plus a scale per block: PayloadBytes). Unknown
// values: INVALID_ARGUMENT.
absl::StatusOr<uint32_t> BytesPerElement(v1::WireEncoding encoding);
// The payload bytes of `elements` elements (INT8's block scales included).
absl::StatusOr<uint64_t> PayloadBytes(v1::WireEncoding encoding,
                                      uint64_t elements);

// "FP32", "BF16", ... for messages.
std::string EncodingName(v1::WireEncoding encoding);
std::string PhaseName(v1::ExchangePhase phase);
// "job 4 round 12 GOSSIP step 0", for messages.
std::string DescribeKey(const TransferKey& key);

// --- bf16 (round to nearest even; NaN stays NaN, quiet) ------------------
uint16_t FloatToBf16(float value);
float Bf16ToFloat(uint16_t bits);
// Plain-loop references, computed differently (by comparing the two
// neighbouring bf16 values in double precision), for tests.
uint16_t FloatToBf16Reference(float value);
float Bf16ToFloatReference(uint16_t bits);

// Appends the payload of `values` in `encoding` to `*out` (resized to hold
// exactly PayloadBytes more; INT8 blocks counted from values[0]).
absl::Status EncodePayload(std::span<const float> values,
                           v1::WireEncoding encoding, std::string* out);
// Decodes `payload` into `out` (payload.size() must be PayloadBytes of
// out.size()). Fails with INVALID_ARGUMENT naming the first element
// that is not finite (NaN or +-Inf), or for INT8 the block whose scale or
// code is not valid (DecodeInt8); `out` may then be partly written.
// `first_index` is only used in that message (the arena index of out[0]).
absl::Status DecodePayload(absl::string_view payload,
                           v1::WireEncoding encoding, std::span<float> out,
                           uint64_t first_index = 0);

// A payload as a transport received it: its bytes are the concatenation
// of the pieces (gRPC's slices; one piece for a contiguous payload). A
// piece may end inside an element.
using PayloadPieces = std::span<const absl::string_view>;

// DecodePayload that also checks the payload's CRC-32C against
// `expected_crc` in the same pass (block by block, each block read from
// memory once, for the CRC and the conversion): INVALID_ARGUMENT "bad
// checksum on chunk at offset <first_index>" before any non-finite value
// is reported. `out` may be written when it fails.
absl::Status DecodeCheckedPayload(absl::string_view payload,
                                  v1::WireEncoding encoding,
                                  std::span<float> out, uint64_t first_index,
                                  uint32_t expected_crc);
// The same over a payload in pieces, decoded straight from them (FP32 and
// BF16: no contiguous copy; an element split between two pieces is
// assembled from both. INT8 payloads in more than one piece are joined
// into one buffer first).
absl::Status DecodeCheckedPayload(PayloadPieces payload,
                                  v1::WireEncoding encoding,
                                  std::span<float> out, uint64_t first_index,
                                  uint32_t expected_crc);

// One chunk of a transfer: elements [offset, offset + length).
struct ChunkSpan {
  uint64_t offset = 0;
  uint32_t length = 0;
};

// Splits [range_begin, range_end) into consecutive chunks of at most
// chunk_bytes / BytesPerElement(encoding) elements (at least 1); INT8:
// whole blocks of kInt8BlockElements whose payload fits chunk_bytes (at
// least one block), so its blocks start at range_begin + a multiple of
// kInt8BlockElements whatever chunk_bytes is. An empty
// range gives one chunk of length 0 (so every transfer has a last chunk).
absl::StatusOr<std::vector<ChunkSpan>> PlanChunks(uint64_t range_begin,
                                                  uint64_t range_end,
                                                  v1::WireEncoding encoding,
                                                  uint32_t chunk_bytes);

// What a sender stamps on every chunk of one transfer.
struct ChunkContext {
  TransferKey key;
  uint64_t sender_id = 0;
  uint64_t range_begin = 0;
  uint64_t range_end = 0;
  v1::WireEncoding encoding = v1::WIRE_ENCODING_FP32;
  uint64_t arena_elements = 0;
};

// Fills `*chunk` with the header, payload (arena[span]) and checksum of one
// chunk; `last` marks the final chunk of the transfer. `arena` is the whole
// arena (arena.size() == context.arena_elements).
absl::Status EncodeChunk(const ChunkContext& context,
                         std::span<const float> arena, const ChunkSpan& span,
                         bool last, v1::ExchangeChunk* chunk);

// What a receiver expects of every chunk of one transfer.
struct ChunkExpectation {
  TransferKey key;
  uint64_t sender_id = 0;    // the only sender accepted
  uint64_t receiver_id = 0;  // the local worker (for messages)
  uint64_t range_begin = 0;
  uint64_t range_end = 0;
  uint64_t arena_elements = 0;
};

// ValidateChunk without the CRC-32C: the header against `expect` and the
// payload's size against the header (for DecodeChunkPayload, which checks
// the CRC while it decodes).
absl::Status ValidateChunkHeader(const v1::ExchangeChunk& chunk,
                                 const ChunkExpectation& expect);
// The same for a chunk whose payload travels apart from its header
// (`payload_bytes` long).
absl::Status ValidateChunkHeader(const v1::ChunkHeader& header,
                                 uint64_t payload_bytes,
                                 const ChunkExpectation& expect);

// Decodes the payload of a chunk that ValidateChunkHeader accepted into
// `out` (arena[offset, offset + length) of the receive buffer), checking
// its CRC-32C in the same pass (DecodeCheckedPayload).
absl::Status DecodeChunkPayload(const v1::ExchangeChunk& chunk,
                                std::span<float> out);
absl::Status DecodeChunkPayload(const v1::ChunkHeader& header,
                                PayloadPieces payload, std::span<float> out);

// Checks the header of `chunk` against `expect` and its payload against the
// header (size and CRC-32C); does not decode. Codes:
//   FAILED_PRECONDITION  wrong job, round, phase or step; a sender that is
//                        not the expected peer
//   INVALID_ARGUMENT     range or arena size differs from the expectation,
//                        offset/length outside the range or the arena,
//                        payload size != length * bytes per element, bad
//                        checksum, unknown encoding
absl::Status ValidateChunk(const v1::ExchangeChunk& chunk,
                           const ChunkExpectation& expect);

// Validates `chunk` and decodes its payload into arena[offset, offset +
// length) of `buffer` (the whole-arena-shaped scratch buffer); also
// rejects non-finite values (INVALID_ARGUMENT).
absl::Status ValidateAndDecodeChunk(const v1::ExchangeChunk& chunk,
                                    const ChunkExpectation& expect,
                                    std::span<float> buffer);

// --- Acknowledgement (docs/exchange.md, "Acknowledgement") ---------------
// What the receiver `receiver_id` writes back on the stream once the
// transfer whose last chunk had header `last` committed: the header echoes
// job, round, phase, step, range, encoding and arena size, with sender_id
// = the receiver, offset = range_end, last = true, and no payload.
v1::ExchangeChunk MakeAck(const v1::ChunkHeader& last, uint64_t receiver_id);
// OK if `ack` acknowledges the transfer of `key` sent to `receiver_id`;
// otherwise UNAVAILABLE saying what is wrong with it (the sender then
// reports the transfer as failed even if the stream ended well).
absl::Status CheckAck(const v1::ExchangeChunk& ack, const TransferKey& key,
                      uint64_t receiver_id);

}  // namespace gasloc

#endif  // GASLOC_WORKER_EXCHANGE_WIRE_CODEC_H_
