// JSON string literals for the hand-written JSON of the CLIs, the export's
// config.json and the benchmarks' reports. Stateless; thread-safe.
#ifndef GASLOC_COMMON_JSON_STRING_H_
#define GASLOC_COMMON_JSON_STRING_H_

#include <string>

#include "absl/strings/string_view.h"

namespace gasloc {

// Appends the JSON string literal of `s` (UTF-8 passes through; quotes,
// backslashes and control characters are escaped).
void AppendJsonString(absl::string_view s, std::string* out);

}  // namespace gasloc

#endif  // GASLOC_COMMON_JSON_STRING_H_
