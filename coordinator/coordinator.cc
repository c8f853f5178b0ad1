// Coordinator: lifecycle (Create, Load), transactions and rollback, jobs
// (start, stop, end, progress), watching, gauges. Membership calls are in
// coordinator_workers.cc, planning, assignments, reports
// and failures in coordinator_{planning,assignments,reports,failures}.cc.
#include "coordinator/coordinator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/error_kind.h"
#include "common/job_size.h"
#include "common/job_spec.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "coordinator/request_bounds.h"

namespace gasloc::coordinator {

// ------------------------------------------------------------- lifecycle

Coordinator::Coordinator(CoordinatorOptions options,
                         std::unique_ptr<Store> store, const Clock* clock)
    : options_(options),
      clock_(clock),
      store_(std::move(store)),
      group_sync_([this] {
        return store_ == nullptr ? absl::OkStatus() : store_->SyncLog();
      }),
      membership_(options.lease) {}

Coordinator::~Coordinator() = default;

absl::StatusOr<std::unique_ptr<Coordinator>> Coordinator::Create(
    CoordinatorOptions options, std::unique_ptr<Store> store,
    const Clock* clock) {
  if (options.lease <= absl::ZeroDuration())
    return absl::InvalidArgumentError("lease must be positive");
  std::unique_ptr<Coordinator> c(
      new Coordinator(options, std::move(store), clock));
  absl::MutexLock lock(&c->mu_);
  const absl::Time now = clock->Now();
  RETURN_IF_ERROR(c->Load(now, /*restart=*/true));
  RETURN_IF_ERROR(c->Call([&](absl::Time now) {
    c->TickLocked(now);
    return absl::OkStatus();
  }));
  return c;
}

absl::Status Coordinator::Load(absl::Time now, bool restart) {
  if (store_ == nullptr) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<StoredWorker> workers, store_->LoadWorkers());
  membership_.Restore(std::move(workers), now);
  if (restart && options_.metrics != nullptr)
    for (size_t i = 0; i < membership_.live_count(); ++i)
      options_.metrics->RecordWorkerJoin("restored");
  ASSIGN_OR_RETURN(std::vector<StoredJob> jobs, store_->LoadJobs());
  for (StoredJob& sj : jobs) {
    const uint64_t id = sj.status.job_id();
    next_job_id_ = std::max(next_job_id_, id + 1);
    JobRec& job = jobs_[id];
    job.stored = std::move(sj);
    // Rounds an ended (or resumed, not yet running) job planned are not
    // kept: its status says where it got to.
    job.next_round = NextRoundOf(job.stored.status);
    if (job.stored.status.state() != v1::JOB_STATE_RUNNING) continue;
    if (restart && options_.metrics != nullptr) options_.metrics->BeginJob(id);
    ASSIGN_OR_RETURN(std::vector<StoredMember> members,
                     store_->LoadMembers(id));
    for (StoredMember& m : members) job.members[m.worker_id] = m;
    ASSIGN_OR_RETURN(std::vector<StoredEpoch> epochs, store_->LoadEpochs(id));
    for (StoredEpoch& e : epochs)
      job.epochs[e.epoch] = {e.epoch, e.first_round, std::move(e.members)};
    ASSIGN_OR_RETURN(std::vector<StoredRound> rounds,
                     store_->LoadRounds(id, 0));
    for (StoredRound& r : rounds) {
      RoundRec rec = MakeRoundRec(job, r.round, r.epoch, r.deadline_unix_ms);
      rec.budgets = std::move(r.budgets);
      if (r.schedule_begin >= 0)
        rec.schedule_progress = ScheduleProgress{r.schedule_begin,
                                                 r.schedule_end};
      job.next_round = std::max(job.next_round, r.round + 1);
      job.rounds[r.round] = std::move(rec);
    }
    ForgetOldRounds(job);
    if (restart)
      GASLOC_LOG(INFO) << "job " << id << " resumed: " << job.next_round
                       << " rounds planned, "
                       << job.stored.status.rounds_completed()
                       << " completed, " << job.members.size() << " members";
  }
  // Bindings: a worker bound to a job that is not running is idle; a live
  // worker bound to a running job without a member row gets one.
  for (auto& [id, w] : membership_.workers()) {
    auto it = jobs_.find(w.stored.job_id);
    const bool bound = w.stored.state == v1::WORKER_STATE_ALIVE &&
                       it != jobs_.end() &&
                       it->second.stored.status.state() ==
                           v1::JOB_STATE_RUNNING;
    if (!bound) {
      membership_.SetJob(w, 0);
    } else if (!it->second.members.count(id)) {
      StoredMember m;
      m.job_id = w.stored.job_id;
      m.worker_id = id;
      it->second.members[id] = m;
    }
  }
  for (auto& [id, job] : jobs_) {
    for (auto it = job.members.begin(); it != job.members.end();) {
      const WorkerRec* w = membership_.Find(it->first);
      if (w == nullptr || w->stored.job_id != id) {
        it = job.members.erase(it);
      } else {
        Contribute(job, it->second, +1);
        ++it;
      }
    }
    RestoreSetupFailures(job);
    RestoreRoundOutcomes(job);
  }
  return absl::OkStatus();
}

// --------------------------------------------------------- transactions

void Coordinator::Open(Transaction& txn) {
  txn_ = &txn;
  event_seq_at_open_ = event_seq_;
  wrote_ = false;
}

absl::Status Coordinator::Close(Transaction& txn, absl::Time now) {
  txn_ = nullptr;
  absl::Status committed = txn.Commit();
  if (!committed.ok()) RollBackMemory(now);
  if (committed.ok() && wrote_) group_sync_.Committed();
  // Wake the waiters only when the call changed something they wait for
  // (every such change is written or is an event). A call that changed
  // nothing (an idle long-poll's check) must not wake the others: each
  // wake starts a transaction of its own, and idle polls woke each other
  // in a loop.
  if (wrote_ || event_seq_ != event_seq_at_open_ || !committed.ok()) {
    ++changes_;
    changed_.SignalAll();
    WakePollers();
  }
  return committed;
}

void Coordinator::RollBackMemory(absl::Time now) {
  if (store_ == nullptr) return;  // nothing to fail, nothing to reload
  Membership previous_membership = std::move(membership_);
  std::map<uint64_t, JobRec> previous_jobs = std::move(jobs_);
  const uint64_t previous_next_job_id = next_job_id_;
  membership_ = Membership(options_.lease);
  jobs_.clear();
  next_job_id_ = 1;
  const absl::Status loaded = Load(now, /*restart=*/false);
  if (!loaded.ok()) {
    GASLOC_LOG(ERROR) << "cannot reload the state after a failed write; "
                         "keeping the state in memory: "
                      << loaded;
    membership_ = std::move(previous_membership);
    jobs_ = std::move(previous_jobs);
    next_job_id_ = previous_next_job_id;
    return;
  }
  // What only memory holds: leases, heartbeats, progress, orphan timers and
  // the events of the calls that committed.
  membership_.KeepLeasesOf(previous_membership);
  event_seq_ = event_seq_at_open_;
  for (auto& [id, job] : jobs_) {
    auto old = previous_jobs.find(id);
    if (old == previous_jobs.end()) continue;
    job.orphaned_since = old->second.orphaned_since;
    job.checkpoints_written = std::move(old->second.checkpoints_written);
    job.events = std::move(old->second.events);
    job.events.DropAfter(event_seq_);
  }
}

void Coordinator::TickForRead(absl::Time now) {
  const absl::Status committed = Call([&](absl::Time now) {
    TickLocked(now);
    return absl::OkStatus();
  });
  if (!committed.ok())
    GASLOC_LOG(WARNING) << "tick rolled back, answering from the state "
                           "before it: "
                        << committed;
}

void Coordinator::Write(absl::FunctionRef<absl::Status(Store&)> write) {
  wrote_ = true;
  if (txn_ != nullptr) txn_->Write(write);
}

void Coordinator::SaveWorker(const WorkerRec& w) {
  Write([&](Store& s) { return s.PutWorker(w.stored); });
}

void Coordinator::SaveJob(const JobRec& job) {
  Write([&](Store& s) { return s.PutJob(job.stored); });
}

void Coordinator::SaveMember(const StoredMember& m) {
  Write([&](Store& s) { return s.PutMember(m); });
}

void Coordinator::Metric(std::function<void(CoordinatorMetrics&)> record) {
  CoordinatorMetrics* metrics = options_.metrics;
  if (metrics == nullptr || txn_ == nullptr) return;
  txn_->OnCommit([metrics, record = std::move(record)] { record(*metrics); });
}

// ----------------------------------------------------------------- jobs

absl::StatusOr<Coordinator::JobRec*> Coordinator::FindJob(uint64_t job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end())
    return WithErrorKind(
        absl::NotFoundError(absl::StrCat("job ", job_id, " not found")),
        kJobNotFound);
  return &it->second;
}

absl::StatusOr<v1::JobStatus> Coordinator::StartJob(const v1::JobSpec& spec) {
  RETURN_IF_ERROR(ValidateJobSpec(spec));
  return Durably([&]() -> absl::StatusOr<v1::JobStatus> {
    absl::MutexLock lock(&mu_);
    return Call([&](absl::Time now) -> absl::StatusOr<v1::JobStatus> {
      RETURN_IF_ERROR(CheckJobFitsSomeWorker(spec));
      return AddJob(spec, now);
    });
  });
}

absl::Status Coordinator::CheckJobFitsSomeWorker(const v1::JobSpec& spec) {
  // Against the live workers' reports; with none registered yet only the
  // absolute caps (ValidateJobSpec) apply, and each worker checks again
  // when the job reaches it (WorkerDaemon::PrepareJob).
  absl::Status last = absl::OkStatus();
  for (const auto& [id, w] : membership_.workers()) {
    if (w.stored.state != v1::WORKER_STATE_ALIVE) continue;
    last = CheckJobFitsWorker(spec, w.stored.info);
    if (last.ok()) return last;
    last = absl::InvalidArgumentError(absl::StrCat(
        last.message(), " (no live worker can run the job; this is worker ",
        id, ")"));
  }
  return last;
}

v1::JobStatus Coordinator::AddJob(const v1::JobSpec& spec, absl::Time now) {
  const uint64_t id = next_job_id_++;
  JobRec& job = jobs_[id];
  v1::JobStatus& st = job.stored.status;
  st.set_job_id(id);
  *st.mutable_spec() = ApplyJobSpecDefaults(spec);
  st.set_state(v1::JOB_STATE_PENDING);
  st.set_created_unix_ms(absl::ToUnixMillis(now));
  st.set_message("pending");
  SaveJob(job);
  GASLOC_LOG(INFO) << "job " << id << " (" << spec.name() << ") accepted";
  AddEvent(job, v1::JOB_EVENT_KIND_STATE, "job accepted (PENDING)", now);
  TickLocked(now);
  return StatusOf(jobs_.at(id), now);
}

absl::StatusOr<v1::JobStatus> Coordinator::GetJob(uint64_t job_id) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  TickForRead(now);
  ASSIGN_OR_RETURN(JobRec * job, FindJob(job_id));
  v1::JobStatus status = StatusOf(*job, now);
  AddWorkerBudgets(*job, &status);
  return status;
}

absl::StatusOr<Coordinator::JobMembers> Coordinator::GetJobMembers(
    uint64_t job_id) {
  absl::MutexLock lock(&mu_);
  ASSIGN_OR_RETURN(const JobRec* job, FindJob(job_id));
  const v1::JobStatus& st = job->stored.status;
  return JobMembers{st.epoch(), {st.worker_ids().begin(),
                                 st.worker_ids().end()}};
}

v1::ListJobsResponse Coordinator::ListJobs() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  TickForRead(now);
  v1::ListJobsResponse response;
  for (const auto& [id, job] : jobs_) *response.add_jobs() = StatusOf(job, now);
  return response;
}

absl::StatusOr<v1::JobStatus> Coordinator::StopJob(uint64_t job_id,
                                                   const std::string& reason) {
  v1::StopJobRequest bounded;
  bounded.set_reason(reason);
  RETURN_IF_ERROR(CheckRequestBounds(bounded));
  return Durably([&]() -> absl::StatusOr<v1::JobStatus> {
    absl::MutexLock lock(&mu_);
    ASSIGN_OR_RETURN(JobRec * job, FindJob(job_id));
    const v1::JobState state = job->stored.status.state();
    if (IsEnded(state))
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job_id, " is already ",
                       v1::JobState_Name(state)));
    return Call([&](absl::Time now) -> absl::StatusOr<v1::JobStatus> {
      EndJob(*job, v1::JOB_STATE_STOPPED,
             absl::StrCat("stopped: ", reason.empty() ? "StopJob" : reason),
             now);
      TickLocked(now);
      return StatusOf(*job, now);
    });
  });
}

void Coordinator::ForgetOldJobs(absl::Time now) {
  std::vector<EndedJob> ended;
  for (const auto& [id, job] : jobs_)
    if (IsEnded(job.stored.status.state()))
      ended.push_back({.job_id = id,
                       .ended = absl::FromUnixMillis(
                           job.stored.status.ended_unix_ms())});
  if (ended.size() <= options_.retention.max_ended &&
      (ended.empty() ||
       now - std::min_element(ended.begin(), ended.end(),
                              [](const EndedJob& a, const EndedJob& b) {
                                return a.ended < b.ended;
                              })->ended <=
           options_.retention.max_age))
    return;  // the common case, without sorting
  for (const ForgottenJob& f : JobsToForget(std::move(ended), now,
                                            options_.retention)) {
    GASLOC_LOG(INFO) << "job " << f.job_id << " forgotten: " << f.reason;
    jobs_.erase(f.job_id);
    Write([id = f.job_id](Store& s) { return s.DeleteJob(id); });
  }
}

void Coordinator::EndJob(JobRec& job, v1::JobState state,
                         const std::string& message, absl::Time now) {
  v1::JobStatus& st = job.stored.status;
  const uint64_t job_id = st.job_id();
  if (st.state() == v1::JOB_STATE_RUNNING)
    Metric([job_id](CoordinatorMetrics& m) { m.EndJob(job_id); });
  st.set_state(state);
  st.set_message(message);
  st.set_ended_unix_ms(absl::ToUnixMillis(now));
  std::vector<uint64_t> ids;
  for (const auto& [wid, m] : job.members) ids.push_back(wid);
  for (uint64_t wid : ids) ReleaseWorker(membership_.at(wid), now);
  job.rounds.clear();
  job.epochs.clear();
  const uint64_t planned = job.next_round;
  Write([&](Store& s) { return s.PruneRounds(job_id, planned); });
  SaveJob(job);
  GASLOC_LOG(INFO) << "job " << job_id << " " << v1::JobState_Name(state)
                   << ": " << message;
  AddEvent(job, v1::JOB_EVENT_KIND_STATE,
           absl::StrCat(v1::JobState_Name(state), ": ", message), now);
}

void Coordinator::FailJob(JobRec& job, const char* reason,
                          const std::string& message, absl::Time now) {
  if (job.stored.status.state() == v1::JOB_STATE_RUNNING)
    Metric([reason](CoordinatorMetrics& m) { m.RecordJobFailed(reason); });
  EndJob(job, v1::JOB_STATE_FAILED, message, now);
}

void Coordinator::MaybeFinish(JobRec& job, absl::Time now) {
  if (job.stored.status.state() != v1::JOB_STATE_RUNNING ||
      job.stored.stop_round < 0)
    return;
  for (const auto& [wid, m] : job.members) {
    if (!m.got_stop && m.last_reported_round + 1 < job.stored.stop_round)
      return;
  }
  absl::string_view reason = job.stored.status.message();
  absl::ConsumePrefix(&reason, "finishing: ");
  // Stopped (by max_wall_seconds, or its rounds ran out) without one round
  // completed while its members failed: it trained nothing.
  if (job.stored.status.tokens() == 0 && !job.stored.first_failure.empty()) {
    FailJob(job, "round_failures",
            absl::StrCat("no round completed before the stop (", reason,
                         "); first error: ", job.stored.first_failure),
            now);
    return;
  }
  EndJob(job, v1::JOB_STATE_FINISHED, absl::StrCat("finished: ", reason), now);
}

void Coordinator::Contribute(JobRec& job, const StoredMember& m, int sign) {
  if (m.first_round < 0) return;  // joined, not in a round yet
  const int64_t progress = std::max(m.last_reported_round + 1, m.first_round);
  if (sign > 0) {
    ++job.progress_counts[progress];
  } else {
    auto it = job.progress_counts.find(progress);
    if (it != job.progress_counts.end() && --it->second == 0)
      job.progress_counts.erase(it);
  }
  if (m.last_reported_round >= 0) {
    job.loss_sum += sign * static_cast<double>(m.train_loss);
    job.loss_n += sign;
  }
  if (m.val_bpb > 0) {
    job.bpb_sum += sign * static_cast<double>(m.val_bpb);
    job.bpb_n += sign;
  }
}

void Coordinator::UpdateProgress(JobRec& job, absl::Time now) {
  v1::JobStatus& st = job.stored.status;
  if (!job.progress_counts.empty()) {
    const auto completed =
        static_cast<uint64_t>(job.progress_counts.begin()->first);
    if (completed > st.rounds_completed()) {
      st.set_rounds_completed(completed);
      AddEvent(job, v1::JOB_EVENT_KIND_ROUND,
               absl::StrCat("round ", completed - 1, " completed"), now);
    }
  }
  if (job.loss_n > 0)
    st.set_train_loss(static_cast<float>(job.loss_sum / job.loss_n));
  if (job.bpb_n > 0) st.set_val_bpb(static_cast<float>(job.bpb_sum / job.bpb_n));
}

void Coordinator::AddEvent(JobRec& job, v1::JobEventKind kind,
                           const std::string& description, absl::Time now) {
  job.events.Append(++event_seq_,
                    MakeJobEvent(kind, description, StatusOf(job, now), now),
                    options_.events_kept);
}

v1::JobStatus Coordinator::StatusOf(const JobRec& job, absl::Time now) const {
  v1::JobStatus st = job.stored.status;
  st.set_eta_seconds(EstimateEtaSeconds(st, now));
  return st;
}

// ---------------------------------------------------------------- watch

absl::StatusOr<std::pair<v1::JobEvent, uint64_t>> Coordinator::WatchSnapshot(
    uint64_t job_id) {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  ASSIGN_OR_RETURN(JobRec * job, FindJob(job_id));
  v1::JobEvent event = MakeJobEvent(
      v1::JOB_EVENT_KIND_SNAPSHOT,
      absl::StrCat("job ", job_id, " ",
                   v1::JobState_Name(job->stored.status.state())),
      StatusOf(*job, now), now);
  return std::make_pair(std::move(event), event_seq_);
}

absl::StatusOr<JobEvents> Coordinator::WaitJobEvents(uint64_t job_id,
                                                     uint64_t after_seq,
                                                     absl::Duration max_wait) {
  // Real time, not clock_ (the class comment): a watch's short waits end
  // even when the coordinator runs on a FakeClock.
  const Clock& real = RealClock::Get();
  const absl::Time give_up = real.Now() + max_wait;
  absl::MutexLock lock(&mu_);
  while (true) {
    ASSIGN_OR_RETURN(JobRec * job, FindJob(job_id));
    JobEvents out = job->events.After(after_seq);
    out.ended = IsEnded(job->stored.status.state());
    if (!out.events.empty() || out.ended || real.Now() >= give_up) return out;
    real.WaitWithDeadline(&changed_, &mu_, give_up);
  }
}

// -------------------------------------------------------------- metrics

CoordinatorGaugeState Coordinator::GaugeState() const {
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_->Now();
  CoordinatorGaugeState state;
  for (v1::JobState s : {v1::JOB_STATE_PENDING, v1::JOB_STATE_RUNNING,
                         v1::JOB_STATE_FINISHED, v1::JOB_STATE_FAILED,
                         v1::JOB_STATE_STOPPED})
    state.jobs_by_state[s] = 0;
  state.live_workers = membership_.LiveAges(now);
  for (const auto& [id, job] : jobs_) {
    const v1::JobState s = job.stored.status.state();
    ++state.jobs_by_state[s];
    if (s == v1::JOB_STATE_PENDING || s == v1::JOB_STATE_RUNNING) {
      CoordinatorGaugeState::Job& g = state.active_jobs.emplace_back(
          CoordinatorGaugeState::Job{
              .job_id = id,
              .epoch = job.stored.status.epoch(),
              .members = static_cast<uint32_t>(job.members.size()),
              .budgets = {}});
      for (const auto& [wid, m] : job.members)
        if (m.local_steps > 0)
          g.budgets.push_back({.worker_id = wid,
                               .local_steps = m.local_steps,
                               .wait_fraction = m.wait_fraction});
    }
  }
  return state;
}

}  // namespace gasloc::coordinator
