// Makes text from the network safe to print on a terminal: a stop reason,
// job name or error message with escape sequences must not move the
// cursor, rewrite earlier lines or set the window title of whoever runs
// gaslocctl. Control characters (C0, DEL, and the C1 range as UTF-8) are
// written as visible escapes (\n, \t, \x1b, \u009b); other text, UTF-8
// included, is kept.
//
// Pure functions; thread-safe.
#ifndef GASLOC_COMMON_TERMINAL_TEXT_H_
#define GASLOC_COMMON_TERMINAL_TEXT_H_

#include <string>

#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace gasloc {

// `text` with every control character escaped; a backslash is doubled so
// that an escape cannot be forged.
std::string EscapeForTerminal(absl::string_view text);

// Applies EscapeForTerminal to every string field of `message`, nested
// messages and repeated fields included (bytes fields are left alone).
void EscapeStringFields(google::protobuf::Message* message);

}  // namespace gasloc

#endif  // GASLOC_COMMON_TERMINAL_TEXT_H_
