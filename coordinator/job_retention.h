// Which ended jobs the coordinator forgets: a FINISHED, FAILED or STOPPED
// job (its status, members, epochs, rounds and event log, in memory and in
// SQLite) is kept for `max_age` after it ended, and at most `max_ended`
// ended jobs are kept (the oldest go first). Running and pending jobs are
// never forgotten. Without this, every job ever run would stay, and ListJobs
// would grow until its answer exceeds the clients' message limit.
//
// Pure function of (ended jobs, now, options); thread-safe.
#ifndef GASLOC_COORDINATOR_JOB_RETENTION_H_
#define GASLOC_COORDINATOR_JOB_RETENTION_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace gasloc::coordinator {

struct JobRetention {
  size_t max_ended = 1000;
  absl::Duration max_age = absl::Hours(24 * 30);
};

struct EndedJob {
  uint64_t job_id = 0;
  absl::Time ended;
};

struct ForgottenJob {
  uint64_t job_id = 0;
  std::string reason;  // "ended 31 days ago (limit 30 days)", ...
};

// The jobs of `ended` to forget now, each with why.
std::vector<ForgottenJob> JobsToForget(std::vector<EndedJob> ended,
                                       absl::Time now,
                                       const JobRetention& retention);

}  // namespace gasloc::coordinator

#endif  // GASLOC_COORDINATOR_JOB_RETENTION_H_
