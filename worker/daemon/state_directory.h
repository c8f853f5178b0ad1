// The worker's state directory (--data_dir): one worker per directory (a
// lock held for the process's life) and the worker's stable name kept in
// it, which names its checkpoints so a restarted worker finds its own.
//
// Thread safety: free functions; call them once at start-up.
#ifndef GASLOC_WORKER_DAEMON_STATE_DIRECTORY_H_
#define GASLOC_WORKER_DAEMON_STATE_DIRECTORY_H_

#include <string>

#include "absl/status/statusor.h"

namespace gasloc {

// The worker's stable name, kept in `<data_dir>/worker_name`: read if the
// file is there, else made (16 random hex digits after "w-") and written
// atomically and durably (common/atomic_file.h). UNAVAILABLE if the
// directory cannot be created or written.
absl::StatusOr<std::string> LoadOrCreateWorkerName(const std::string& data_dir);

// Creates `data_dir`, locks `<data_dir>/worker.lock` for the life of the
// process (the descriptor is left open) and returns the worker's name
// (LoadOrCreateWorkerName). UNAVAILABLE when another worker holds the
// lock, or as LoadOrCreateWorkerName.
absl::StatusOr<std::string> ClaimStateDirectory(const std::string& data_dir);

}  // namespace gasloc

#endif  // GASLOC_WORKER_DAEMON_STATE_DIRECTORY_H_
