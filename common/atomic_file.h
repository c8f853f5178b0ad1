// One way to replace a file atomically and durably, for every file whose
// loss or tearing would hurt (checkpoints, the worker's name file).
//
// The rule: the content goes to a fresh temporary beside `path`
// (`<path>.tmp.<16 hex digits>`, created exclusively and never through a
// symbolic link, so a link planted at that name cannot redirect the
// write), is flushed and fsynced, renamed over `path` (rename() replaces a
// link at `path` itself, not its target), and then the folder is fsynced,
// so after a crash `path` holds either the old content or the whole new
// one, and a successful return survives a power loss. A failed write
// removes its temporary; a process killed mid-write leaves one (its
// owner may sweep `<path>.tmp.*`).
//
// Thread safety: a free function; concurrent writes of one path each use
// their own temporary, the last rename wins.
#ifndef GASLOC_COMMON_ATOMIC_FILE_H_
#define GASLOC_COMMON_ATOMIC_FILE_H_

#include <sys/types.h>

#include <cstdio>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace gasloc {

// Writes `path` by the rule above. `write` fills the temporary (an open
// binary FILE*) and returns false on a failed write (errno set). `mode`:
// the new file's permission bits. INTERNAL naming the step, the file and
// strerror on any failure.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::FunctionRef<bool(std::FILE*)> write,
                                 mode_t mode = 0600);

// WriteFileAtomically of `content`.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view content,
                                 mode_t mode = 0600);

}  // namespace gasloc

#endif  // GASLOC_COMMON_ATOMIC_FILE_H_
