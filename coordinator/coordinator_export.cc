// Coordinator: which members of a job can serve its model to an export
// (gaslocctl job export, relayed by the Coordinator service's ExportModel).
// A member holds the job's model while the job runs and, once it ended,
// until it takes another job or restarts (worker/daemon/model_serving.cc).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status_macros.h"
#include "coordinator/coordinator.h"

namespace gasloc::coordinator {

absl::StatusOr<ModelSources> Coordinator::ModelSourcesOf(uint64_t job_id,
                                                         uint64_t worker_id) {
  absl::MutexLock lock(&mu_);
  TickForRead(clock_->Now());
  ASSIGN_OR_RETURN(JobRec * job, FindJob(job_id));
  const v1::JobStatus& status = job->stored.status;
  std::vector<uint64_t> ids(status.worker_ids().begin(),
                            status.worker_ids().end());
  if (ids.empty())
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", job_id, " (", v1::JobState_Name(status.state()),
        ") has no members: no round was ever planned, so nobody trained it"));
  if (worker_id != 0) {
    if (std::find(ids.begin(), ids.end(), worker_id) == ids.end())
      return absl::NotFoundError(absl::StrCat(
          "worker ", worker_id, " is not a member of job ", job_id,
          " (members ", absl::StrJoin(ids, ", "), ")"));
    ids = {worker_id};
  }
  ModelSources sources;
  for (uint64_t id : ids) {
    absl::StatusOr<Membership::Worker*> w = membership_.Live(id);
    if (!w.ok()) {
      sources.unavailable.push_back(std::string(w.status().message()));
    } else if ((*w)->stored.job_id != 0 && (*w)->stored.job_id != job_id) {
      sources.unavailable.push_back(absl::StrCat(
          "worker ", id, " has moved on to job ", (*w)->stored.job_id,
          " (a worker keeps only its latest job's model)"));
    } else {
      sources.members.push_back({.worker_id = id,
                                 .address = (*w)->stored.info.address()});
    }
  }
  if (sources.members.empty())
    return absl::UnavailableError(absl::StrCat(
        "no member of job ", job_id, " can serve its model: ",
        absl::StrJoin(sources.unavailable, "; ")));
  return sources;
}

}  // namespace gasloc::coordinator
