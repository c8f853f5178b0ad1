// WorkerDaemon: the control loop. Registration, heartbeats, the
// assignment poll, running and reporting a round, dropping a job. Set-up is
// job_setup.cc, checkpoints daemon_checkpoints.cc, serving the model
// model_serving.cc, the state directory state_directory.cc.
#include "worker/daemon/worker_daemon.h"

#include <algorithm>
#include <new>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/link_bandwidth.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace gasloc {

DataShard DataShardOf(const v1::Assignment& assignment) {
  // Rank among the epoch's members: the ring lists them all for the
  // all-reduce algorithms; gossip jobs stride by the job's worker count.
  DataShard shard;
  shard.rank = static_cast<int>(assignment.rank());
  const int members =
      assignment.ring_order_size() > 0
          ? assignment.ring_order_size()
          : static_cast<int>(std::max<uint32_t>(assignment.num_workers(), 1));
  shard.num_workers = std::max(members, shard.rank + 1);
  return shard;
}

WorkerDaemon::WorkerDaemon(WorkerDaemonOptions options,
                           CoordinatorLink* coordinator,
                           PeerTransport* transport,
                           TrainerFactory trainer_factory,
                           ModelFetcher model_fetcher)
    : options_(std::move(options)),
      clock_(*options_.clock),
      coordinator_(coordinator),
      transport_(transport),
      trainer_factory_(std::move(trainer_factory)),
      model_fetcher_(std::move(model_fetcher)) {}

WorkerDaemon::~WorkerDaemon() {
  Shutdown("daemon destroyed");
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
}

bool WorkerDaemon::WaitForShutdown(absl::Duration d) {
  const absl::Time deadline = clock_.Now() + d;
  absl::MutexLock lock(&stop_mu_);
  while (!stopping_ && clock_.Now() < deadline)
    clock_.WaitWithDeadline(&stop_cv_, &stop_mu_, deadline);
  return stopping_;
}

absl::StatusOr<uint64_t> WorkerDaemon::Register() {
  while (!stopping_) {
    v1::WorkerInfo info = options_.info;
    if (info.name().empty()) info.set_name(options_.name);
    auto response = coordinator_->Register(info);
    if (response.ok()) {
      if (identity_listener_) identity_listener_(response->worker_id());
      worker_id_ = response->worker_id();
      ++registrations_;
      GASLOC_LOG(INFO) << "registered as worker " << worker_id_.load()
                       << " (lease " << response->lease_ms() << " ms), peers "
                       << "dial " << options_.info.address();
      return worker_id_.load();
    }
    if (response.status().code() != absl::StatusCode::kUnavailable &&
        response.status().code() != absl::StatusCode::kDeadlineExceeded)
      return Annotate(response.status(), "RegisterWorker");
    GASLOC_LOG(WARNING) << "coordinator unavailable, retrying registration: "
                        << response.status();
    WaitForShutdown(options_.retry_backoff);
  }
  return absl::CancelledError("shutting down before registration");
}

void WorkerDaemon::Shutdown(const std::string& reason) {
  if (stopping_.exchange(true)) return;
  GASLOC_LOG(INFO) << "shutting down: " << reason;
  {
    absl::MutexLock lock(&mu_);
    if (runner_for_cancel_ != nullptr) runner_for_cancel_->Cancel();
  }
  coordinator_->CancelWaits();
  absl::MutexLock lock(&stop_mu_);
  stop_cv_.SignalAll();
}

absl::Status WorkerDaemon::last_error() const {
  absl::MutexLock lock(&mu_);
  return last_error_;
}

uint64_t WorkerDaemon::job_id() const {
  absl::MutexLock lock(&mu_);
  return progress_.job_id();
}

void WorkerDaemon::SetProgress(const RoundProgress& progress) {
  if (progress.step_tokens > 0 && options_.metrics != nullptr)
    options_.metrics->RecordStep(progress.step_seconds, progress.step_tokens,
                                 progress.round_mean_loss,
                                 progress.tokens_per_second);
  absl::MutexLock lock(&mu_);
  if (progress.activity == v1::WORKER_ACTIVITY_EXCHANGING &&
      progress_.activity() != v1::WORKER_ACTIVITY_EXCHANGING) {
    GASLOC_LOG(INFO) << "job " << progress_.job_id() << " round "
                     << progress.round << ": exchanging";
  }
  progress_.set_round(progress.round);
  progress_.set_inner_step(progress.inner_step);
  progress_.set_train_loss(progress.train_loss);
  if (progress.steps_per_second > 0) {
    progress_.set_steps_per_second(static_cast<float>(progress.steps_per_second));
    progress_.set_tokens_per_second(
        static_cast<float>(progress.tokens_per_second));
  }
  progress_.set_activity(progress.activity);
}

absl::Duration WorkerDaemon::HeartbeatOnce() {
  constexpr absl::Duration kRetry = absl::Seconds(1);
  v1::HeartbeatRequest request;
  request.set_worker_id(worker_id_.load());
  request.set_name(options_.name);
  {
    absl::MutexLock lock(&mu_);
    *request.mutable_progress() = progress_;
  }
  auto response = coordinator_->Heartbeat(request);
  if (!response.ok()) {
    if (response.status().code() == absl::StatusCode::kNotFound) {
      GASLOC_LOG(WARNING) << "coordinator no longer knows worker "
                          << worker_id_.load() << " ("
                          << response.status().message()
                          << "); re-registering";
      auto id = Register();
      if (!id.ok()) GASLOC_LOG(ERROR) << "re-registration: " << id.status();
    } else {
      GASLOC_LOG(WARNING) << "heartbeat failed: " << response.status();
    }
    return kRetry;
  }
  if (response->abandon_job()) {
    absl::MutexLock lock(&mu_);
    if (runner_for_cancel_ != nullptr) {
      GASLOC_LOG(INFO) << "coordinator asked to abandon the current job";
      abandon_requested_ = true;
      runner_for_cancel_->Cancel();
    }
  }
  return absl::Milliseconds(std::max<uint32_t>(200, response->lease_ms() / 3));
}

void WorkerDaemon::DropJob(const std::string& why, KeepModel keep) {
  if (job_ == nullptr) return;
  GASLOC_LOG(INFO) << "job " << job_->job_id << " dropped: " << why;
  // Keeps the rounds run since the last checkpoint (none: nothing to
  // write, and rewriting it would push an older one out of those kept).
  const std::string path = CheckpointPath(*job_);
  if (!path.empty() && job_->last_round >= 0 &&
      job_->runner->next_round() != job_->checkpointed_next_round)
    WriteCheckpoint(*job_, path);
  {
    absl::MutexLock lock(&mu_);
    runner_for_cancel_ = nullptr;
    progress_.Clear();
    progress_.set_activity(v1::WORKER_ACTIVITY_IDLE);
  }
  std::shared_ptr<const ServedModel> kept;
  if (keep == KeepModel::kForExport) {
    kept = CopyParameters(*job_);
    GASLOC_LOG(INFO) << "job " << job_->job_id << ": its final model (before "
                     << "round " << kept->round << ") is kept for exports "
                     << "until this worker takes another job";
  }
  job_.reset();
  absl::MutexLock lock(&served_mu_);
  served_ = std::move(kept);
}

absl::Status WorkerDaemon::RunAssignment(const v1::Assignment& assignment,
                                         v1::RoundOutcome* outcome) {
  absl::MutexLock job_lock(&job_mu_);
  *outcome = v1::ROUND_OUTCOME_SETUP_FAILED;
  absl::StatusOr<Job*> prepared = absl::InternalError("not prepared");
  try {
    prepared = PrepareJob(assignment);
  } catch (const std::bad_alloc&) {
    // What the memory estimate (CheckJobFitsWorker) missed: the job fails
    // on this worker, the daemon lives on.
    prepared = absl::ResourceExhaustedError(
        "out of memory while allocating the model (std::bad_alloc)");
  }
  if (!prepared.ok()) {
    // Nothing of the job was kept (heartbeats say idle); the next
    // assignment tries again.
    if (job_ == nullptr) {
      absl::MutexLock lock(&mu_);
      progress_.Clear();
      progress_.set_activity(v1::WORKER_ACTIVITY_IDLE);
    }
    return Annotate(prepared.status(), "cannot set up the job");
  }
  Job* job = *prepared;
  *outcome = v1::ROUND_OUTCOME_FAILED;
  {
    absl::MutexLock lock(&mu_);
    runner_for_cancel_ = job->runner.get();
    abandon_requested_ = false;
  }
  GASLOC_LOG(INFO) << "job " << job->job_id << " round " << assignment.round()
                   << " (epoch " << assignment.epoch() << "): H="
                   << assignment.local_steps() << " ("
                   << assignment.budget_reason() << "), "
                   << assignment.peers_size() << " peer(s), "
                   << assignment.ring_order_size() << " in ring";
  if (options_.metrics != nullptr)
    options_.metrics->RecordRoundStart(assignment.local_steps());
  const absl::Time round_start = clock_.Now();
  absl::StatusOr<v1::ReportRoundRequest> report =
      absl::InternalError("not run");
  try {
    report = job->runner->RunRound(assignment);
  } catch (const std::bad_alloc&) {
    // The job's state may be half-updated: drop it without a checkpoint.
    job->last_round = -1;
    DropJob("out of memory during a round");
    return absl::ResourceExhaustedError(
        "out of memory during the round (std::bad_alloc); job dropped");
  }
  if (!report.ok()) {
    bool abandoned;
    {
      absl::MutexLock lock(&mu_);
      abandoned = abandon_requested_;
    }
    if (abandoned) {
      // The round was cancelled and rolled back: the model is the last
      // completed round's, kept for an export of the stopped job.
      DropJob("stopped by the coordinator", KeepModel::kForExport);
      return absl::OkStatus();
    }
    return report.status();
  }
  const uint64_t checkpoint_next_round =
      FinishRound(*job, assignment, *report, round_start);
  *outcome = v1::ROUND_OUTCOME_COMPLETED;
  v1::ReportRoundRequest completed = *report;
  completed.set_outcome(v1::ROUND_OUTCOME_COMPLETED);
  completed.set_checkpoint_next_round(checkpoint_next_round);
  if (IsUnknownJob(SendReport(completed)))
    DropJob("the coordinator does not know the job (its state was lost)");
  return absl::OkStatus();
}

uint64_t WorkerDaemon::FinishRound(Job& job, const v1::Assignment& assignment,
                                   const v1::ReportRoundRequest& report,
                                   absl::Time round_start) {
  job.last_round = static_cast<int64_t>(assignment.round());
  if (!IsGossipAlgorithm(job.spec.outer().algorithm())) KeepServedModel(job);
  if (options_.metrics != nullptr)
    options_.metrics->RecordRound(
        report, absl::ToDoubleSeconds(clock_.Now() - round_start),
        job.runner->failure_codes());
  // The report says whether this round's checkpoint was written (the
  // coordinator's checkpoint sets are made of these).
  uint64_t checkpoint_next_round = 0;
  if (RoundDutiesAfter(job.spec, assignment.round()).checkpoint) {
    SetProgress({.round = assignment.round(),
                 .inner_step = assignment.local_steps(),
                 .train_loss = report.train_loss(),
                 .activity = v1::WORKER_ACTIVITY_CHECKPOINTING});
    if (WriteCheckpoint(job, CheckpointPath(job)))
      checkpoint_next_round = job.runner->next_round();
  }
  {
    absl::MutexLock lock(&mu_);
    progress_.set_total_inner_steps(progress_.total_inner_steps() +
                                    report.inner_steps());
    progress_.set_tokens(progress_.tokens() + report.tokens());
    if (report.val_bpb() > 0) progress_.set_val_bpb(report.val_bpb());
    // The one definition of a link figure (common/link_bandwidth.h), over
    // the wire time (the wait for peers is not the link's); an exchange
    // that measured nothing keeps the last figure.
    const double link = LinkBytesPerSecond(
        report.bytes_sent(), report.bytes_received(),
        report.wire_seconds());
    if (link > 0) progress_.set_link_bytes_per_second(static_cast<float>(link));
  }
  GASLOC_LOG(INFO) << "job " << job.job_id << " round " << assignment.round()
                   << " done: loss " << report.train_loss() << ", val bpb "
                   << report.val_bpb() << ", exchange "
                   << report.exchange_seconds() << " s, wire "
                   << report.wire_seconds() << " s, waiting "
                   << report.wait_seconds() << " s, peer distance "
                   << report.peer_distance() << ", "
                   << report.failed_peers_size() << " failed peer(s), sent "
                   << report.bytes_sent() << " B, received "
                   << report.bytes_received() << " B";
  return checkpoint_next_round;
}

absl::Status WorkerDaemon::SendReport(v1::ReportRoundRequest report) {
  absl::Duration backoff = options_.retry_backoff;
  while (!stopping_) {
    // The current id: a re-registration (heartbeat thread) may have
    // changed it since the round ran.
    report.set_worker_id(worker_id_.load());
    absl::Status sent = coordinator_->ReportRound(report);
    if (sent.ok()) return sent;
    const absl::StatusCode code = sent.code();
    if (code != absl::StatusCode::kUnavailable &&
        code != absl::StatusCode::kDeadlineExceeded) {
      // Not retryable: the coordinator forgot this worker or the job, or
      // the worker is no longer a member. The report is stale.
      GASLOC_LOG(WARNING) << "ReportRound for job " << report.job_id()
                          << " round " << report.round()
                          << " not accepted (dropped): " << sent;
      return sent;
    }
    GASLOC_LOG(WARNING) << "ReportRound for job " << report.job_id()
                        << " round " << report.round() << " failed, retrying in "
                        << backoff << ": " << sent;
    WaitForShutdown(backoff);
    backoff = std::min(2 * backoff, options_.max_retry_backoff);
  }
  return absl::CancelledError("shutting down before the report was accepted");
}

bool WorkerDaemon::RunAndReport(const v1::Assignment& assignment) {
  v1::RoundOutcome outcome = v1::ROUND_OUTCOME_UNSPECIFIED;
  absl::Status ran = RunAssignment(assignment, &outcome);
  if (stopping_) return false;
  if (ran.ok()) return true;
  const absl::Status error = Annotate(
      ran, absl::StrCat("job ", assignment.job_id(), " round ",
                        assignment.round()));
  GASLOC_LOG(ERROR) << error;
  if (options_.metrics != nullptr)
    options_.metrics->RecordRoundError(ran.code());
  {
    absl::MutexLock lock(&mu_);
    last_error_ = error;
  }
  // The coordinator learns every failure with its reason (a job
  // nobody can set up then ends FAILED instead of running empty).
  v1::ReportRoundRequest failure;
  failure.set_job_id(assignment.job_id());
  failure.set_round(assignment.round());
  failure.set_outcome(outcome);
  failure.set_error(std::string(error.message()));
  SendReport(std::move(failure)).IgnoreError();  // logged there
  WaitForShutdown(options_.retry_backoff);
  return true;
}

void WorkerDaemon::PollOnce() {
  const uint64_t registration = registrations_.load();
  if (registration != poll_registration_) {
    if (poll_registration_ != 0 && poll_job_id_ != 0) {
      absl::MutexLock job_lock(&job_mu_);
      DropJob(absl::StrCat(
          "the coordinator registered this worker anew (worker ",
          worker_id_.load(), "): it is no longer a member of job ",
          poll_job_id_, " (its lease expired or its database was lost)"));
      poll_job_id_ = 0;
      poll_after_round_ = -1;
    }
    poll_registration_ = registration;
  }
  v1::GetAssignmentRequest request;
  request.set_worker_id(worker_id_.load());
  request.set_job_id(poll_job_id_);
  request.set_after_round(poll_after_round_);
  request.set_wait_ms(static_cast<uint32_t>(
      absl::ToInt64Milliseconds(options_.assignment_wait)));
  auto assignment = coordinator_->GetAssignment(request);
  if (stopping_) return;
  // Registered anew while asking: the answer may be for a job of the old
  // registration's id; the next poll drops that job and asks afresh.
  if (registrations_.load() != registration) return;
  if (!assignment.ok()) {
    GASLOC_LOG(WARNING) << "GetAssignment: " << assignment.status();
    if (poll_job_id_ != 0 && IsUnknownJob(assignment.status())) {
      // The coordinator lost its state (a new database): the job is gone
      // for good. Drop it and ask for any new work.
      absl::MutexLock job_lock(&job_mu_);
      DropJob(absl::StrCat("the coordinator does not know job ", poll_job_id_,
                           " (", assignment.status().message(), ")"));
      poll_job_id_ = 0;
      poll_after_round_ = -1;
    }
    WaitForShutdown(options_.retry_backoff);
    return;
  }
  switch (assignment->kind()) {
    case v1::ASSIGNMENT_KIND_ROUND: {
      if (!RunAndReport(*assignment)) return;  // shutting down
      poll_job_id_ = assignment->job_id();
      poll_after_round_ = static_cast<int64_t>(assignment->round());
      break;
    }
    case v1::ASSIGNMENT_KIND_STOP: {
      absl::MutexLock job_lock(&job_mu_);
      DropJob(absl::StrCat("job ", assignment->job_id(), " ended: ",
                           assignment->message()),
              KeepModel::kForExport);
      poll_job_id_ = 0;
      poll_after_round_ = -1;
      break;
    }
    default:
      break;  // NONE: nothing new within wait_ms; ask again.
  }
}

absl::Status WorkerDaemon::Run() {
  if (worker_id_.load() == 0) {
    ASSIGN_OR_RETURN(uint64_t id, Register());
    (void)id;
  }
  heartbeat_thread_ = std::thread([this] {
    absl::Duration period = absl::Seconds(1);
    while (!WaitForShutdown(period)) period = HeartbeatOnce();
  });
  while (!stopping_) PollOnce();
  {
    absl::MutexLock job_lock(&job_mu_);
    DropJob("worker shutting down");
  }
  absl::Status left = coordinator_->Leave(worker_id_.load(), "shutdown");
  if (!left.ok()) GASLOC_LOG(WARNING) << "LeaveWorker: " << left;
  if (heartbeat_thread_.joinable()) heartbeat_thread_.join();
  return absl::OkStatus();
}
}  // namespace gasloc
