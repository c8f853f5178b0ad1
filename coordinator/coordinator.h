// The coordinator's state machine: worker membership (registration, leases,
// graceful leave), jobs (PENDING -> RUNNING -> FINISHED / FAILED / STOPPED),
// lazily planned rounds (epoch, gossip schedule, per-worker budgets) and the
// event log that WatchJob streams. No gRPC: server/coordinator_service.cc
// translates RPCs into these calls, so everything here is tested with a
// FakeClock and an in-memory SQLite database (docs/coordinator.md).
//
// Decisions are made by pure functions (round_planner.h, schedule.h
// PlanSchedule and RoundWeights, budget.h PlanBudgets) from the time read
// once per call from the injected Clock; this class gathers their inputs,
// applies the result, persists it and wakes waiters. Its code is split by
// concern: coordinator.cc (lifecycle, transactions, jobs, watching),
// coordinator_workers.cc (membership calls, leases, binding workers to
// jobs), coordinator_planning.cc (the next round: stop, epoch, budgets),
// coordinator_assignments.cc (GetAssignment), coordinator_reports.cc
// (ReportRound), coordinator_failures.cc (failed rounds, dropped members),
// coordinator_checkpoints.cc (checkpoint sets, ResumeJob, restoring after a
// restart); the worker registry itself is membership.h. The private
// declarations below are grouped by the file that defines them.
//
// Memory and disk agree: every mutating call runs in one Transaction
// (transaction.h). If it fails to commit, the database is rolled back and
// the in-memory state is rebuilt from it (the same Load as a restart,
// keeping leases, heartbeats, progress and the events of committed calls),
// so a failed call leaves no trace and its retry is applied. Commits are
// made durable by group commit (group_sync.h): the calls that change
// state or answer workers return only once every commit before them is on
// disk, synced with the mutex released, one sync for many calls.
//
// Thread safety: every public method is thread-safe (one mutex guards all
// state; SQLite writes happen under it, one transaction per call).
// GetAssignment and WaitJobEvents block on a condition variable while they
// wait (GetAssignment on the injected Clock, so tests drive it with a
// FakeClock; WaitJobEvents on real time); everything else returns at once.
#ifndef GASLOC_COORDINATOR_COORDINATOR_H_
#define GASLOC_COORDINATOR_COORDINATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/budget.h"
#include "coordinator/coordinator_metrics.h"
#include "coordinator/group_sync.h"
#include "coordinator/job_events.h"
#include "coordinator/job_retention.h"
#include "coordinator/membership.h"
#include "coordinator/replica_check.h"
#include "coordinator/round_planner.h"
#include "coordinator/schedule.h"
#include "coordinator/store.h"
#include "coordinator/transaction.h"
#include "gasloc/v1/coordinator.pb.h"

namespace gasloc::coordinator {

// How often a waiting GetAssignment re-checks with no change (leases
// expire without a call) and polls its `cancelled` callback.
inline constexpr absl::Duration kLongPollRecheck = absl::Milliseconds(500);

struct CoordinatorOptions {
  // Worker lease: a worker not heard from for this long is dead.
  absl::Duration lease = absl::Seconds(10);
  // Weight of a new sample in the s_i / b_i moving averages.
  double ema_weight = 0.3;
  // Budget changes kept in JobStatus.budget_changes (newest last).
  int max_budget_changes = 32;
  // Worker failures kept in JobStatus.failures (newest last).
  int max_failures = 32;
  // Planned rounds kept (in memory and in SQLite) per job.
  uint64_t rounds_kept = 64;
  // A RUNNING job with no live member for this long FAILS.
  absl::Duration orphan_timeout = absl::Seconds(120);
  // GetAssignment's wait when the request says 0.
  absl::Duration default_wait = absl::Seconds(10);
  // Events kept per job for WatchJob.
  size_t events_kept = 256;
  // Ended jobs kept (by age and count), coordinator/job_retention.h.
  JobRetention retention;
  // Not owned; null = no metrics (docs/metrics.md).
  CoordinatorMetrics* metrics = nullptr;
};

// What the scrape-time gauges show (CoordinatorGauges in
// coordinator_metrics.h), read in one short critical section.
struct CoordinatorGaugeState {
  using Worker = Membership::Age;
  // A member's budget in its latest planned round and its latest wait.
  struct MemberBudget {
    uint64_t worker_id = 0;
    uint32_t local_steps = 0;
    double wait_fraction = 0;
  };
  struct Job {
    uint64_t job_id = 0;
    uint64_t epoch = 0;
    uint32_t members = 0;
    std::vector<MemberBudget> budgets;  // by worker id
  };
  std::vector<Worker> live_workers;               // by id
  std::map<v1::JobState, uint32_t> jobs_by_state;  // every state, 0 included
  std::vector<Job> active_jobs;                    // PENDING and RUNNING
};

// Where a job's model can be fetched from (gaslocctl job export): its
// members that may still hold it, in member order, and why the others
// cannot serve it.
struct ModelSources {
  struct Member {
    uint64_t worker_id = 0;
    std::string address;  // its Peer service
  };
  std::vector<Member> members;
  std::vector<std::string> unavailable;  // "worker 7 is dead (...)"
};

class Coordinator {
 public:
  // `store` may be null (state in memory only). Loads the store's state: a
  // restarted coordinator resumes its RUNNING jobs and gives every worker
  // that was alive a fresh lease starting now.
  static absl::StatusOr<std::unique_ptr<Coordinator>> Create(
      CoordinatorOptions options, std::unique_ptr<Store> store,
      const Clock* clock);
  ~Coordinator();

  absl::StatusOr<v1::RegisterWorkerResponse> RegisterWorker(
      const v1::RegisterWorkerRequest& request);
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request);
  absl::Status LeaveWorker(const v1::LeaveWorkerRequest& request);
  v1::ListWorkersResponse ListWorkers(const v1::ListWorkersRequest& request);

  absl::StatusOr<v1::JobStatus> StartJob(const v1::JobSpec& spec);
  absl::StatusOr<v1::JobStatus> GetJob(uint64_t job_id);
  // GetJob's epoch and worker_ids alone: the service adds the members'
  // identities to assignments, and GetJob's per-worker budgets (a formatted
  // reason each) made that O(workers) strings per assignment, O(workers^2)
  // a round.
  struct JobMembers {
    uint64_t epoch = 0;
    std::vector<uint64_t> worker_ids;
  };
  absl::StatusOr<JobMembers> GetJobMembers(uint64_t job_id);
  v1::ListJobsResponse ListJobs();
  absl::StatusOr<v1::JobStatus> StopJob(uint64_t job_id,
                                        const std::string& reason);
  // A STOPPED or FAILED job back to PENDING (RUNNING once min_workers are
  // idle), its next round after the last one planned; new members load
  // the latest complete checkpoint set (Assignment.resume_from).
  // FAILED_PRECONDITION, naming why, for a FINISHED / PENDING / RUNNING
  // job and for a job that completed rounds but has no complete checkpoint
  // set. A job that never completed a round restarts from round 0.
  absl::StatusOr<v1::JobStatus> ResumeJob(uint64_t job_id,
                                          const std::string& reason);
  // The members of `job_id` (running or ended: the last epoch's) that may
  // hold its model, or only `worker_id` when it is not 0. NOT_FOUND for an
  // unknown job or a worker that is not a member; FAILED_PRECONDITION for
  // a job without members yet; UNAVAILABLE, naming each member's reason,
  // when none is alive and free of another job (coordinator_export.cc).
  absl::StatusOr<ModelSources> ModelSourcesOf(uint64_t job_id,
                                              uint64_t worker_id);

  // Long-poll: returns the worker's next assignment at once when there is
  // one, else waits (condition variable, on the clock) up to
  // request.wait_ms of the clock and returns ASSIGNMENT_KIND_NONE. It
  // re-checks when a call changed something and every kLongPollRecheck
  // (leases). `cancelled`, if given, is polled at least that often while
  // waiting; when it returns true the call returns NONE early.
  absl::StatusOr<v1::Assignment> GetAssignment(
      const v1::GetAssignmentRequest& request,
      const std::function<bool()>& cancelled = nullptr);
  absl::Status ReportRound(const v1::ReportRoundRequest& request);

  // WatchJob: the current status as a SNAPSHOT event and the sequence
  // number to continue from.
  absl::StatusOr<std::pair<v1::JobEvent, uint64_t>> WatchSnapshot(
      uint64_t job_id);
  // Events of `job_id` after `after_seq`, waiting up to `max_wait` for the
  // first one.
  absl::StatusOr<JobEvents> WaitJobEvents(uint64_t job_id, uint64_t after_seq,
                                          absl::Duration max_wait);

  // Expires leases, starts pending jobs, fails orphaned ones. Every call
  // does this too; the server also calls it periodically.
  void Tick();

  // For the metrics: live workers with their heartbeat ages, jobs by state,
  // active jobs' epochs and member counts. Reads only (no Tick).
  CoordinatorGaugeState GaugeState() const;

 private:
  using WorkerRec = Membership::Worker;
  struct EpochRec {
    uint64_t epoch = 0;
    uint64_t first_round = 0;
    std::vector<uint64_t> members;  // sorted
  };
  struct RoundRec {
    uint64_t round = 0;
    uint64_t epoch = 0;
    int64_t deadline_unix_ms = 0;
    RoundSchedule schedule;
    std::vector<Budget> budgets;  // aligned with the epoch's members
    // The round's place on the job's learning-rate horizon, decided at
    // planning (so every member gets the same) and stored with the round;
    // nullopt: the workers follow rounds x H (PlanScheduleProgress).
    std::optional<ScheduleProgress> schedule_progress;
    // All-reduce algorithms: each member's replica report of the round,
    // and the decision once every member reported (memory only: after a
    // restart the next round's reports decide again).
    std::map<uint64_t, ReplicaReport> replicas;
    std::optional<ReplicaDecision> replica_decision;
    // For the stop condition (SettleRounds): whether a member completed the
    // round, the members that reported it failed, and its outcome once
    // decided (memory only: a restart rebuilds them from the members'
    // last reported rounds and status.failures, RestoreRoundOutcomes; the
    // settled count is in StoredJob).
    bool completed = false;
    std::set<uint64_t> failed;
    RoundOutcome outcome = RoundOutcome::kOpen;
  };
  struct JobRec {
    StoredJob stored;
    std::map<uint64_t, StoredMember> members;  // workers bound to the job
    std::map<uint64_t, EpochRec> epochs;
    std::map<uint64_t, RoundRec> rounds;  // the last rounds_kept planned
    uint64_t next_round = 0;              // rounds planned so far
    std::optional<absl::Time> orphaned_since;
    JobEventLog events;
    // Aggregates over `members`, kept incrementally (Contribute) so a
    // report costs O(log n), not O(n): how many members have each
    // progress value max(last reported + 1, first round), and the sums
    // behind the mean loss / val bpb.
    std::map<int64_t, uint32_t> progress_counts;
    double loss_sum = 0, bpb_sum = 0;
    int64_t loss_n = 0, bpb_n = 0;
    // Members whose latest report was a failed set-up, with its error
    // (rebuilt after a restart by RestoreSetupFailures). A job whose every
    // member is here FAILS (ApplyFailure). The rounds each member failed in
    // a row are persisted (StoredMember.consecutive_failures): a count
    // rebuilt from status.failures would lose the failures beyond the
    // max_failures kept, and a coordinator restarting in a loop would then
    // never drop a member that fails every round.
    std::map<uint64_t, std::string> setup_failures;
    // Checkpoints reported but not yet a complete set: by the checkpoints'
    // next round, the members that wrote one and the val bpb they
    // reported with it (memory only: a set completes from the reports of
    // one coordinator's life; the complete set is in the job's status).
    std::map<uint64_t, std::map<uint64_t, float>> checkpoints_written;
  };

  Coordinator(CoordinatorOptions options, std::unique_ptr<Store> store,
              const Clock* clock);
  // Loads the database into the (empty) memory state. `restart`: a new
  // coordinator (fresh leases, "restored" metrics, logs); otherwise a
  // rollback rebuilding the state of the last commit.
  absl::Status Load(absl::Time now, bool restart)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ------------------------------------------ transactions (coordinator.cc)
  // Runs `body(now)`, which makes one call's changes (and returns a Status
  // or StatusOr), in one transaction and commits it. A failed commit rolls
  // back the database and the memory (RollBackMemory) and is returned
  // (UNAVAILABLE) instead of the body's result. Wakes the waiters if the
  // call wrote something, added an event or was rolled back.
  template <typename Body>
  auto Call(Body&& body) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time now = clock_->Now();
    Transaction txn(store_.get());
    Open(txn);
    auto result = body(now);
    absl::Status committed = Close(txn, now);
    if (!committed.ok()) return decltype(result)(std::move(committed));
    return result;
  }
  void Open(Transaction& txn) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Close(Transaction& txn, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `locked` (which takes mu_ for one call and returns a Status or
  // StatusOr), then, with mu_ released, waits until every commit so far is
  // durable: a reply never reports a change a power loss could still undo.
  // A failed sync fails the call (UNAVAILABLE).
  template <typename Locked>
  auto Durably(Locked&& locked) ABSL_LOCKS_EXCLUDED(mu_) {
    auto result = locked();
    absl::Status durable = group_sync_.AwaitDurable();
    if (!durable.ok()) return decltype(result)(std::move(durable));
    return result;
  }
  void RollBackMemory(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Tick in its own transaction, for the calls that only read: a failed
  // write is rolled back (memory too) and the read goes on.
  void TickForRead(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SaveWorker(const WorkerRec& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SaveJob(const JobRec& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SaveMember(const StoredMember& m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Write(absl::FunctionRef<absl::Status(Store&)> write)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a metric once the call's transaction commits.
  void Metric(std::function<void(CoordinatorMetrics&)> record)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---------------------------------- membership (coordinator_workers.cc)
  void TickLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ExpireLeases(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void AssignIdleWorkers(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CheckOrphans(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the ended jobs JobsToForget names (memory and store).
  void ForgetOldJobs(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<v1::HeartbeatResponse> HeartbeatLocked(
      const v1::HeartbeatRequest& request, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status LeaveLocked(const v1::LeaveWorkerRequest& request,
                           absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<v1::RegisterWorkerResponse> RegisterLocked(
      const v1::WorkerInfo& info, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void BindWorker(JobRec& job, WorkerRec& w) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ReleaseWorker(WorkerRec& w, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ------------------------------------------------- jobs (coordinator.cc)
  absl::StatusOr<JobRec*> FindJob(uint64_t job_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // OK if some live worker's reported memory and cores can hold `spec`
  // (CheckJobFitsWorker), or no worker is alive; else INVALID_ARGUMENT
  // naming the fields.
  absl::Status CheckJobFitsSomeWorker(const v1::JobSpec& spec)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::JobStatus AddJob(const v1::JobSpec& spec, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the job (FINISHED / FAILED / STOPPED) and releases its workers.
  void EndJob(JobRec& job, v1::JobState state, const std::string& message,
              absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // EndJob(FAILED) counted in the metric by `reason` (CoordinatorMetrics::
  // RecordJobFailed).
  void FailJob(JobRec& job, const char* reason, const std::string& message,
               absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends the job FINISHED once its stop round is reached by every member;
  // FAILED instead when no round was ever completed and a member failed
  // (a job that trained nothing has not succeeded).
  void MaybeFinish(JobRec& job, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateProgress(JobRec& job, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds (sign = +1) or removes (-1) a member's share of the aggregates;
  // call with -1 before changing the member and +1 after.
  static void Contribute(JobRec& job, const StoredMember& m, int sign);
  void AddEvent(JobRec& job, v1::JobEventKind kind,
                const std::string& description, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::JobStatus StatusOf(const JobRec& job, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ------------------------------------ planning (coordinator_planning.cc)
  // Plans round job.next_round, or decides that the job stops there, or
  // (kWait) that it stops only if the rounds still open succeed: the caller
  // waits for their reports.
  enum class PlanResult { kPlanned, kStopped, kWait };
  PlanResult PlanNextRound(JobRec& job, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The epoch of round job.next_round with members `ids` (sorted): a new
  // one (stored, in the status, a MEMBERSHIP event) when they differ from
  // the previous round's.
  uint64_t AdvanceEpoch(JobRec& job, const std::vector<uint64_t>& ids,
                        absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The members' budgets for a round of `schedule` (budget.h PlanBudgets).
  static BudgetPlan PlanRoundBudgets(const JobRec& job,
                                     const RoundSchedule& schedule,
                                     const std::vector<uint64_t>& ids);
  // Counts, logs and keeps in the status the budget changes of `plan`
  // against the members' current budgets; returns the BUDGET event's text
  // ("" when nothing changed).
  std::string RecordBudgetChanges(JobRec& job,
                                  const std::vector<uint64_t>& ids,
                                  const BudgetPlan& plan)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Applies the planned round `rec` (the members' budgets and first
  // rounds), stores it as job.next_round and forgets old rounds.
  void StoreRound(JobRec& job, RoundRec rec, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Decides the outcome of the planned rounds not settled yet
  // (DecideRoundOutcome) and folds those settled in order into
  // job.stored.rounds_failed / rounds_decided (saved when they move).
  // Returns the rounds that failed (settled or not) and those still open.
  struct RoundTally {
    uint64_t failed = 0;
    uint64_t open = 0;
  };
  RoundTally SettleRounds(JobRec& job, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Forgets the rounds (and epochs) older than the rounds_kept last ones.
  void ForgetOldRounds(JobRec& job) const;
  // Fills status->worker_budgets from the latest planned round (GetJob).
  void AddWorkerBudgets(const JobRec& job, v1::JobStatus* status) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static const EpochRec* EpochOf(const JobRec& job, uint64_t epoch);
  static RoundRec MakeRoundRec(const JobRec& job, uint64_t round,
                               uint64_t epoch, int64_t deadline_unix_ms);

  // ------------------------------ assignments (coordinator_assignments.cc)
  // A GetAssignment long poll waiting for a change. WakePollers (on every
  // call that changed something) wakes it, except an idle worker's poll
  // while the worker is still idle: registrations and reports do not
  // concern it, and waking every idle poll on every write made a burst of
  // N registrations cost O(N^2) re-checks (docs/benchmarks.md,
  // "Coordinator under simulated workers").
  struct PollWaiter {
    uint64_t worker_id = 0;
    bool idle = false;    // in no job when the wait began
    bool woken = false;   // set by WakePollers
    absl::CondVar wake;
  };
  void WakePollers() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether `worker_id` is alive and in no job.
  bool IdleNow(uint64_t worker_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The worker's assignment if one is due now; nullopt = wait.
  absl::StatusOr<std::optional<v1::Assignment>> TryAssign(
      const v1::GetAssignmentRequest& request, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::Assignment BuildAssignment(const JobRec& job, const RoundRec& round,
                                 uint64_t worker_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the job's round lead bound (spec outer.max_round_lead) holds
  // `member` back from round `round` for now (round_planner.h
  // DecideRoundLead); a hold is logged and counted once per round.
  bool HeldByRoundLead(const JobRec& job, StoredMember& member,
                       uint64_t round) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first of `candidates` that is not `worker_id`, is still in the job
  // and is one of the round's `members` (sorted): where a re-syncing or
  // joining member fetches the model from.
  static std::optional<uint64_t> FirstSource(
      const JobRec& job, const std::vector<uint64_t>& candidates,
      const std::vector<uint64_t>& members, uint64_t worker_id);
  // The STOP for a worker, no longer bound, that asks about job `old`:
  // ended, dropped from it, or no longer a member, with the reason.
  v1::Assignment LeftJobAssignment(const JobRec& old,
                                   uint64_t worker_id) const;
  v1::Assignment StopAssignment(const JobRec& job,
                                const std::string& message) const;

  // -------------------------------------- reports (coordinator_reports.cc)
  absl::Status ApplyReport(const v1::ReportRoundRequest& request,
                           absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A completed report's s_i (from its second report, `first_report`
  // false), b_i (and its peers', RaisePeerLinks) and wait fraction.
  void UpdateEstimates(JobRec& job, StoredMember& m,
                       const v1::ReportRoundRequest& request,
                       bool first_report) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Raises each sampled peer's link estimate to the report's sample of it
  // where the sample is faster (a sample is a lower bound on both links).
  void RaisePeerLinks(JobRec& job, const v1::ReportRoundRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records a member's replica report of `round`; once every member of the
  // round's epoch reported, decides (replica_check.h) and counts, logs and
  // records as an event the replicas apart from the majority.
  void NoteReplica(JobRec& job, uint64_t round, uint64_t worker_id,
                   ReplicaReport report, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Decides `rec`'s replica check once every member of its epoch still in
  // the job has reported (or the round's deadline passed); true when
  // decided (or nothing to wait for).
  bool MaybeDecideReplicas(JobRec& job, RoundRec& rec, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ------------------------------------ failures (coordinator_failures.cc)
  // A report whose outcome is a failure: recorded in the job's status
  // (failures, a FAILURE event, the metric) and the member's failures in a
  // row; a set-up failure of every member fails the job with the reason,
  // a member that failed max_consecutive_round_failures rounds in a row
  // is dropped (DropMember).
  void ApplyFailure(JobRec& job, const v1::ReportRoundRequest& request,
                    absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops a member that failed too many rounds in a row (`decision`, its
  // last error `error`): a FAILURE event and a log line naming it, the
  // metric, no rejoining; FAILS the job when the decision says so.
  void DropMember(JobRec& job, uint64_t worker_id,
                  const FailureDecision& decision, const std::string& error,
                  absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // ---------------------------- checkpoints (coordinator_checkpoints.cc)
  // A completed report's checkpoint (checkpoint_next_round > 0): noted,
  // and the job's checkpoint_set replaced when every member of its round
  // has written one (a CHECKPOINT event, logged).
  void RecordCheckpoint(JobRec& job, const v1::ReportRoundRequest& request,
                        absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Back to PENDING from STOPPED / FAILED (ResumeJob, checked there).
  void ResumeLocked(JobRec& job, const std::string& reason, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first round a job has not planned, from its status (a job whose
  // planned rounds are not in memory: ended, or resumed before a restart).
  static uint64_t NextRoundOf(const v1::JobStatus& status);
  // The members whose latest failure (status.failures, since the job last
  // started running) is a set-up failure after their last completed round:
  // a restarted coordinator's setup_failures.
  static void RestoreSetupFailures(JobRec& job);
  // The kept rounds' `completed` and `failed` after a restart or rollback:
  // failed from status.failures (since the job last started running),
  // completed where a member of the round reported a later round and no
  // failure of it.
  static void RestoreRoundOutcomes(JobRec& job);

  const CoordinatorOptions options_;
  const Clock* const clock_;

  mutable absl::Mutex mu_;
  // Signalled when a call wrote or added an event (job event watchers; the
  // long polls have their own, pollers_).
  absl::CondVar changed_;
  // The GetAssignment long polls waiting now (coordinator_assignments.cc).
  std::set<PollWaiter*> pollers_ ABSL_GUARDED_BY(mu_);
  // Signals of changed_ so far: a waiter tells a change from a spurious
  // wake-up (FakeClock's waits return every millisecond).
  uint64_t changes_ ABSL_GUARDED_BY(mu_) = 0;
  // Set once by the constructor; the Store's SyncLog runs outside mu_.
  const std::unique_ptr<Store> store_;
  GroupSync group_sync_;
  // The transaction of the call in progress (null between calls) and the
  // event sequence number when it opened (what a rollback returns to).
  Transaction* txn_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t event_seq_at_open_ ABSL_GUARDED_BY(mu_) = 0;
  // Whether the call in progress wrote anything (Write): Close wakes the
  // waiters only then (or when it added an event).
  bool wrote_ ABSL_GUARDED_BY(mu_) = false;
  Membership membership_ ABSL_GUARDED_BY(mu_);
  std::map<uint64_t, JobRec> jobs_ ABSL_GUARDED_BY(mu_);
  uint64_t next_job_id_ ABSL_GUARDED_BY(mu_) = 1;
  uint64_t event_seq_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace gasloc::coordinator

#endif  // GASLOC_COORDINATOR_COORDINATOR_H_
