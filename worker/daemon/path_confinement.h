// Confines the paths a job spec names (data.corpus_path, model.init_from,
// checkpoint.directory) to the directories the worker was configured with
// (--corpus_root, --checkpoint_root / --data_dir): a spec is remote
// control, and without this a job could read /etc/shadow as its corpus or
// write checkpoints into /root/.ssh.
//
// The path is resolved first (symbolic links followed, "." and ".."
// removed; for a path that does not exist yet, its longest existing
// prefix), then compared component by component with the resolved root,
// so neither ".." nor a symbolic link leads out.
//
// Pure functions of the file system; thread-safe.
#ifndef GASLOC_WORKER_DAEMON_PATH_CONFINEMENT_H_
#define GASLOC_WORKER_DAEMON_PATH_CONFINEMENT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gasloc {

// `path` resolved (relative paths against `root`) if it lies inside `root`;
// PERMISSION_DENIED naming `field`, the path and the root otherwise, or
// INVALID_ARGUMENT if either cannot be resolved. An empty `root` confines
// nothing: the path is returned resolved (relative to the working
// directory).
absl::StatusOr<std::string> ConfinePath(absl::string_view field,
                                        const std::string& path,
                                        const std::string& root);

}  // namespace gasloc

#endif  // GASLOC_WORKER_DAEMON_PATH_CONFINEMENT_H_
