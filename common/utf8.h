// Well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing
// above U+10FFFF). proto3 `string` fields must hold it: protobuf refuses to
// parse a message whose string field is not UTF-8, so a job spec with such
// a path would be sent by gaslocctl and then fail on the coordinator with
// nothing but "failed to parse". Text that goes into a message from outside
// is checked here first, and the error names the field.
//
// Pure functions; thread-safe.
#ifndef GASLOC_COMMON_UTF8_H_
#define GASLOC_COMMON_UTF8_H_

#include <cstddef>
#include <optional>

#include "absl/strings/string_view.h"

namespace gasloc {

// The offset of the first byte that does not start or continue a
// well-formed UTF-8 sequence; nullopt if all of `text` is well-formed.
std::optional<size_t> FirstInvalidUtf8(absl::string_view text);

}  // namespace gasloc

#endif  // GASLOC_COMMON_UTF8_H_
