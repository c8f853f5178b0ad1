// Coordinator: failures. A report whose outcome is a failure, the
// member's failures in a row, and dropping a member that failed too many
// (the decisions are round_planner.h DecideFailure).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/log.h"
#include "coordinator/coordinator.h"

namespace gasloc::coordinator {

void Coordinator::ApplyFailure(JobRec& job,
                               const v1::ReportRoundRequest& request,
                               absl::Time now) {
  v1::JobStatus& st = job.stored.status;
  const bool setup = request.outcome() == v1::ROUND_OUTCOME_SETUP_FAILED;
  const uint64_t wid = request.worker_id();
  // A retried report (same worker, round and outcome since the job last
  // started running: a resumed job runs its rounds again) is recorded once.
  for (const v1::WorkerFailure& f : st.failures())
    if (f.worker_id() == wid && f.round() == request.round() &&
        f.outcome() == request.outcome() &&
        f.unix_ms() >= st.started_unix_ms())
      return;
  const std::string error =
      request.error().empty() ? "no reason given" : request.error();
  v1::WorkerFailure* f = st.add_failures();
  f->set_worker_id(wid);
  f->set_round(request.round());
  f->set_outcome(request.outcome());
  f->set_error(error);
  f->set_unix_ms(absl::ToUnixMillis(now));
  const int excess = st.failures_size() - options_.max_failures;
  if (excess > 0) st.mutable_failures()->DeleteSubrange(0, excess);
  const char* kind = setup ? "setup" : "round";
  Metric([kind](CoordinatorMetrics& m) { m.RecordWorkerFailure(kind); });
  const std::string what =
      absl::StrCat("worker ", wid, " round ", request.round(),
                   setup ? ": job set-up failed: " : ": round failed: ", error);
  GASLOC_LOG(WARNING) << "job " << st.job_id() << " " << what;
  AddEvent(job, v1::JOB_EVENT_KIND_FAILURE, what, now);
  if (auto round = job.rounds.find(request.round()); round != job.rounds.end())
    round->second.failed.insert(wid);
  if (job.stored.first_failure.empty())
    job.stored.first_failure =
        absl::StrCat("worker ", wid, " round ", request.round(), ": ", error);
  StoredMember& member = job.members.at(wid);
  ++member.consecutive_failures;
  member.last_finished_round = std::max(
      member.last_finished_round, static_cast<int64_t>(request.round()));
  SaveMember(member);
  SaveJob(job);
  if (setup) {
    job.setup_failures[wid] = error;
  } else {
    job.setup_failures.erase(wid);
  }
  // A job none of whose members could set it up cannot train: it FAILS
  // with the reason rather than planning rounds nobody runs.
  bool every_setup_failed = true;
  for (const auto& [id, m] : job.members)
    every_setup_failed = every_setup_failed && job.setup_failures.count(id) > 0;
  if (every_setup_failed) {
    FailJob(job, "setup",
            absl::StrCat("every worker failed to set up the job (",
                         job.members.size(), " of ", job.members.size(),
                         "); worker ", job.setup_failures.begin()->first, ": ",
                         job.setup_failures.begin()->second),
            now);
    return;
  }
  const FailureDecision decision =
      DecideFailure(st.spec(), member.consecutive_failures, job.members.size());
  if (decision.drop) DropMember(job, wid, decision, error, now);
}

void Coordinator::DropMember(JobRec& job, uint64_t worker_id,
                             const FailureDecision& decision,
                             const std::string& error, absl::Time now) {
  v1::JobStatus& st = job.stored.status;
  const std::string what =
      absl::StrCat("worker ", worker_id, " dropped from the job: it ",
                   decision.Reason(), "; last error: ", error);
  GASLOC_LOG(WARNING) << "job " << st.job_id() << " " << what;
  AddEvent(job, v1::JOB_EVENT_KIND_FAILURE, what, now);
  Metric([](CoordinatorMetrics& m) { m.RecordMemberDropped(); });
  std::vector<uint64_t>& dropped = job.stored.dropped;
  dropped.insert(std::upper_bound(dropped.begin(), dropped.end(), worker_id),
                 worker_id);
  ReleaseWorker(membership_.at(worker_id), now);
  SaveJob(job);
  if (!decision.fail_job || st.state() != v1::JOB_STATE_RUNNING) return;
  FailJob(job, "round_failures",
          absl::StrCat(decision.JobReason(), ": worker ", worker_id,
                       " dropped after it ", decision.Reason(),
                       "; first error: ", job.stored.first_failure),
          now);
}

}  // namespace gasloc::coordinator
