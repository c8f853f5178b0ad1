// The safetensors file format (Hugging Face's standard for model weights),
// written and read without a JSON or safetensors library:
//
//   u64 little-endian N | N bytes of JSON header | the tensors' bytes
//
// The header is one JSON object: per tensor name
// {"dtype": "F32", "shape": [r, c], "data_offsets": [begin, end]} (byte
// offsets into the data that follows the header, end exclusive), plus an
// optional "__metadata__" object of string values. The data is the tensors'
// row-major little-endian values, in header order, with no gaps.
//
// EncodeSafetensors builds a file's bytes; ParseSafetensors checks one and
// returns views into the caller's bytes. A malformed file is DATA_LOSS with
// a message naming the first problem (and the tensor, where there is one):
// too short for the length word, a header length past the end of the
// file, a header that is not a JSON object of the shape above, an unknown
// dtype, a shape whose element count does not fit, data_offsets whose span
// differs from dtype size x elements, offsets out of range, overlapping or
// leaving a gap, or data past the last tensor. Values are not inspected
// here (NaN is the importer's check: export.h).
//
// Pure functions over their arguments; thread-safe.
#ifndef GASLOC_WORKER_TRAIN_SAFETENSORS_H_
#define GASLOC_WORKER_TRAIN_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gasloc {

// Longest header ParseSafetensors accepts (the reference implementation's
// limit): a larger length word is a damaged file, refused before reading.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100 << 20;

// The dtypes of the format. Export writes F32 and BF16; the parser knows
// every dtype's size so it can check any file's offsets.
enum class SafetensorsDtype {
  kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU64, kU32, kU16, kU8,
  kBool
};
absl::string_view SafetensorsDtypeName(SafetensorsDtype dtype);
size_t SafetensorsDtypeBytes(SafetensorsDtype dtype);

// One tensor to write: `data` holds exactly dtype bytes x elements.
struct SafetensorsTensor {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  std::string data;
};

// The file's bytes: header (tensors in the given order, then
// "__metadata__"; padded with spaces to a multiple of 8 bytes, as the
// reference writer does) and data.
std::string EncodeSafetensors(const std::vector<SafetensorsTensor>& tensors,
                              const std::map<std::string, std::string>& metadata);

// A tensor of a parsed file; `data` points into the parsed bytes.
struct SafetensorsView {
  std::string name;
  SafetensorsDtype dtype = SafetensorsDtype::kF32;
  std::vector<int64_t> shape;
  absl::string_view data;
};

struct SafetensorsFile {
  std::vector<SafetensorsView> tensors;  // in data order
  std::map<std::string, std::string> metadata;
  // The tensor called `name`, or null.
  const SafetensorsView* Find(absl::string_view name) const;
};

// Checks `bytes` as a safetensors file (above). The views stay valid while
// `bytes` does.
absl::StatusOr<SafetensorsFile> ParseSafetensors(absl::string_view bytes);

}  // namespace gasloc

#endif  // GASLOC_WORKER_TRAIN_SAFETENSORS_H_
