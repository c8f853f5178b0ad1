// Coordinator: checkpoint sets and resuming. A completed round report says
// whether the worker wrote its checkpoint after the round; when every member
// of that round has, the job's checkpoint_set (persisted with the job's
// status) names the round. A whole-cluster restart and ResumeJob resume
// from it: new members get it as Assignment.resume_from (BuildAssignment).
// Also what a restarted coordinator rebuilds of these from the database.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "coordinator/coordinator.h"
#include "coordinator/request_bounds.h"

namespace gasloc::coordinator {

void Coordinator::RecordCheckpoint(JobRec& job,
                                   const v1::ReportRoundRequest& request,
                                   absl::Time now) {
  const uint64_t next = request.checkpoint_next_round();
  if (next == 0) return;
  v1::JobStatus& st = job.stored.status;
  // Sets older than the rounds kept can no longer complete (their epoch is
  // forgotten), nor can one not newer than the set the job has.
  const uint64_t oldest_kept =
      job.rounds.empty() ? 0 : job.rounds.begin()->first;
  const uint64_t newer_than =
      st.has_checkpoint_set() ? st.checkpoint_set().round() + 1 : 0;
  const uint64_t floor = std::max(oldest_kept + 1, newer_than + 1);
  job.checkpoints_written.erase(job.checkpoints_written.begin(),
                                job.checkpoints_written.lower_bound(floor));
  if (next < floor) return;
  std::map<uint64_t, float>& written = job.checkpoints_written[next];
  written[request.worker_id()] = request.val_bpb();
  auto round = job.rounds.find(next - 1);
  if (round == job.rounds.end()) return;
  const EpochRec* epoch = EpochOf(job, round->second.epoch);
  if (epoch == nullptr) return;
  double bpb_sum = 0;
  int bpb_n = 0;
  for (uint64_t id : epoch->members) {
    auto it = written.find(id);
    if (it == written.end()) return;  // a member has not written it (yet)
    if (it->second > 0) {
      bpb_sum += it->second;
      ++bpb_n;
    }
  }
  v1::CheckpointSet* set = st.mutable_checkpoint_set();
  set->Clear();
  set->set_round(next - 1);
  for (uint64_t id : epoch->members) set->add_worker_ids(id);
  set->set_val_bpb(bpb_n > 0 ? static_cast<float>(bpb_sum / bpb_n) : 0.0f);
  set->set_unix_ms(absl::ToUnixMillis(now));
  job.checkpoints_written.erase(job.checkpoints_written.begin(),
                                job.checkpoints_written.upper_bound(next));
  SaveJob(job);
  const std::string what =
      absl::StrCat("checkpoint set of round ", next - 1, " complete (",
                   epoch->members.size(), " member(s), workers ",
                   FormatIdList(epoch->members), ")");
  GASLOC_LOG(INFO) << "job " << st.job_id() << " " << what;
  AddEvent(job, v1::JOB_EVENT_KIND_CHECKPOINT, what, now);
}

absl::StatusOr<v1::JobStatus> Coordinator::ResumeJob(
    uint64_t job_id, const std::string& reason) {
  v1::ResumeJobRequest bounded;
  bounded.set_reason(reason);
  RETURN_IF_ERROR(CheckRequestBounds(bounded));
  return Durably([&]() -> absl::StatusOr<v1::JobStatus> {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(JobRec * job, FindJob(job_id));
    const v1::JobStatus& st = job->stored.status;
    const v1::JobState state = st.state();
    if (state == v1::JOB_STATE_FINISHED)
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job_id, " is FINISHED (", st.message(),
          "): it reached its stop condition; start a new job to train "
          "further"));
    if (state != v1::JOB_STATE_STOPPED && state != v1::JOB_STATE_FAILED)
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " is ", v1::JobState_Name(state),
                       ": only a STOPPED or FAILED job can be resumed"));
    if (st.rounds_completed() > 0 && !st.has_checkpoint_set())
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job_id, " has completed ", st.rounds_completed(),
          " round(s) but has no complete checkpoint set (every member's "
          "checkpoint of one round; spec.checkpoint.directory '",
          st.spec().checkpoint().directory(),
          "'): its workers would start from initial weights; not resumed"));
    return Call([&](absl::Time now) -> absl::StatusOr<v1::JobStatus> {
      ResumeLocked(*job, reason, now);
      TickLocked(now);
      return StatusOf(*job, now);
    });
  });
}

void Coordinator::ResumeLocked(JobRec& job, const std::string& reason,
                               absl::Time now) {
  v1::JobStatus& st = job.stored.status;
  const bool trained = st.rounds_completed() > 0;
  const std::string from =
      trained ? absl::StrCat("from the checkpoint set of round ",
                             st.checkpoint_set().round())
              : std::string("from round 0 (no round completed)");
  // A trained job continues after its last planned round (its new members
  // load the set); one that never completed a round starts again.
  job.next_round = trained ? std::max(job.next_round, NextRoundOf(st)) : 0;
  if (!trained) st.set_round_planned(0);
  job.stored.stop_round = -1;
  // Rounds before the resume are settled; an untrained job's failed rounds
  // are forgotten with the rounds themselves. Dropped workers may take
  // part again (the operator resumed it, presumably with the cause fixed).
  job.stored.rounds_decided = job.next_round;
  if (!trained) job.stored.rounds_failed = 0;
  job.stored.first_failure.clear();
  job.stored.dropped.clear();
  job.setup_failures.clear();
  job.checkpoints_written.clear();
  st.set_state(v1::JOB_STATE_PENDING);
  st.set_ended_unix_ms(0);
  st.set_message(absl::StrCat("resumed ", from, ": ",
                              reason.empty() ? "ResumeJob" : reason));
  SaveJob(job);
  GASLOC_LOG(INFO) << "job " << st.job_id() << " " << st.message()
                   << "; next round " << job.next_round;
  AddEvent(job, v1::JOB_EVENT_KIND_STATE,
           absl::StrCat("PENDING: ", st.message()), now);
}

uint64_t Coordinator::NextRoundOf(const v1::JobStatus& status) {
  if (status.round_planned() == 0 && status.rounds_completed() == 0) return 0;
  return std::max(status.round_planned() + 1, status.rounds_completed());
}

void Coordinator::RestoreSetupFailures(JobRec& job) {
  // Newest failure of each member since the job last started running (a
  // resumed job's older failures are history).
  const v1::JobStatus& st = job.stored.status;
  std::map<uint64_t, const v1::WorkerFailure*> latest;
  for (const v1::WorkerFailure& f : st.failures())
    if (f.unix_ms() >= st.started_unix_ms()) latest[f.worker_id()] = &f;
  for (const auto& [id, m] : job.members) {
    auto it = latest.find(id);
    if (it == latest.end()) continue;
    const v1::WorkerFailure& f = *it->second;
    if (f.outcome() == v1::ROUND_OUTCOME_SETUP_FAILED &&
        static_cast<int64_t>(f.round()) > m.last_reported_round)
      job.setup_failures[id] = f.error();
  }
}

void Coordinator::RestoreRoundOutcomes(JobRec& job) {
  const v1::JobStatus& st = job.stored.status;
  for (const v1::WorkerFailure& f : st.failures()) {
    if (f.unix_ms() < st.started_unix_ms()) continue;
    auto it = job.rounds.find(f.round());
    if (it != job.rounds.end()) it->second.failed.insert(f.worker_id());
  }
  for (auto& [round, rec] : job.rounds) {
    const auto r = static_cast<int64_t>(round);
    for (const auto& [id, m] : job.members)
      if (m.first_round >= 0 && m.first_round <= r &&
          m.last_reported_round >= r && !rec.failed.count(id))
        rec.completed = true;
  }
}

}  // namespace gasloc::coordinator
