// The gasloc-worker daemon's control loop: register with the coordinator,
// heartbeat with progress, long-poll for assignments, run each job round by
// round through a RoundRunner, report every round, checkpoint when the
// round runner says a round is due for it, and go back to idle when the
// job ends. Shutdown() (SIGTERM) abandons the current round at the next
// inner-step boundary, leaves the coordinator and makes Run() return.
//
// No gRPC: the coordinator is a CoordinatorLink (server/ has the gRPC one,
// tests a fake), the peers a PeerTransport, the trainer an InnerTrainer
// from the TrainerFactory. Every wait (the heartbeat period, the back-off
// after a failed call) is on options.clock, so tests drive the daemon with
// a FakeClock; HeartbeatOnce() and PollOnce() are the two loops' bodies,
// which tests may also call one at a time.
//
// Failures never end the daemon: a coordinator that is down is retried
// (round reports too, with back-off, until accepted), a coordinator that
// forgot this worker (NOT_FOUND: its lease expired, or the coordinator lost
// its database) is registered with again and the job the worker held is
// dropped (it is no member of it any more; a new database may even give a
// new job the same id), a job the coordinator no longer knows is dropped,
// and a job that cannot be set up (its corpus is missing, its spec is
// invalid) or a round that fails is logged as an error naming the job,
// counted in the metrics, kept in last_error(), reported to the
// coordinator (ReportRound with the failure outcome and the error), and
// the daemon asks for the next round.
//
// Thread safety: Run() on one thread; Shutdown(), SnapshotModel() (the
// model-serving callback) and the accessors from any thread. The heartbeat
// thread reads the progress under mu_. HeartbeatOnce() and PollOnce() are
// for tests that do not call Run().
#ifndef GASLOC_WORKER_DAEMON_WORKER_DAEMON_H_
#define GASLOC_WORKER_DAEMON_WORKER_DAEMON_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "gasloc/v1/coordinator.pb.h"
#include "worker/daemon/coordinator_link.h"
#include "worker/daemon/state_directory.h"
#include "worker/exchange/model_fetch.h"
#include "worker/exchange/peer_transport.h"
#include "worker/round/inner_trainer.h"
#include "worker/round/round_runner.h"
#include "worker/round/worker_metrics.h"

namespace gasloc {

struct WorkerDaemonOptions {
  v1::WorkerInfo info;          // address = what peers dial
  int threads = 0;              // compute threads (0 = all cores)
  // The worker's state directory (--data_dir): a job's relative
  // checkpoint.directory resolves under it.
  std::string data_dir = ".";
  // Where a job's files may be (worker/daemon/path_confinement.h): its
  // data.corpus_path and model.init_from must resolve inside corpus_root
  // (--corpus_root), its
  // checkpoint.directory (a relative one under data_dir) inside
  // checkpoint_root (--checkpoint_root, else --data_dir). Empty = anywhere.
  std::string corpus_root;
  std::string checkpoint_root;
  // The worker's stable name (LoadOrCreateWorkerName: kept in data_dir, the
  // same across restarts), which names its checkpoints, so a restarted
  // worker (a new worker id) finds its own. Empty = "w<worker id>".
  std::string name;
  // Checkpoints kept per job: the latest and, on every write, the
  // previous ones as <path>.1 .. <path>.<n-1> (newest first). A load tries
  // them in that order. At least 1.
  int checkpoints_kept = 2;
  absl::Duration assignment_wait = absl::Seconds(10);
  absl::Duration retry_backoff = absl::Milliseconds(500);
  // Longest back-off between retries of a round report.
  absl::Duration max_retry_backoff = absl::Seconds(8);
  WorkerMetrics* metrics = nullptr;  // not owned; null = no metrics
  // The clock of every wait and duration (not owned). The transport's
  // mailbox must use the same one.
  const Clock* clock = &RealClock::Get();
};

// A worker's share of the job's training data: data rank `rank` of
// `num_workers` disjoint draws (worker/train/data.h).
struct DataShard {
  int rank = 0;
  int num_workers = 1;
};

// The one place a worker's data rank is decided: the coordinator's rank
// among the epoch's members, of as many shards as the ring lists (the
// all-reduce algorithms) or as the job has workers (gossip); never fewer
// shards than rank + 1.
DataShard DataShardOf(const v1::Assignment& assignment);

// Creates the trainer of a job (the real one wraps worker/train's Trainer)
// for data shard `shard`. An error (a missing corpus, say) is reported as
// the job's set-up failure.
using TrainerFactory = std::function<absl::StatusOr<std::unique_ptr<InnerTrainer>>(
    const v1::JobSpec& spec, DataShard shard, int threads)>;

// Pulls a running job's model (parameters, outer state, inner optimizer
// state and the member's next round) from a member (Peer.FetchModel).
// `model_elements` is the joiner's own model size (its parameter arena):
// the announced sizes are checked against it before any allocation.
using ModelFetcher = std::function<absl::StatusOr<FetchedModel>(
    const v1::PeerAssignment& source, uint64_t job_id, uint64_t self_id,
    uint64_t model_elements)>;

// The daemon's policy for a fetch from another member: each gets
// kModelFetchTimeout from the time it starts (on `clock`). `fetch` is the
// transport's call (server/ has the gRPC one) with that deadline.
inline constexpr absl::Duration kModelFetchTimeout = absl::Minutes(5);
using DeadlineModelFetcher = std::function<absl::StatusOr<FetchedModel>(
    const v1::PeerAssignment& source, uint64_t job_id, uint64_t self_id,
    uint64_t model_elements, absl::Time deadline)>;
ModelFetcher WithFetchDeadline(DeadlineModelFetcher fetch, const Clock& clock,
                               absl::Duration timeout = kModelFetchTimeout);

// Keeps the previous checkpoints of a job before a new one replaces
// `kept[0]` (the latest; kept[i] = <path>.i, CheckpointCandidates): shifts
// each to the next name, the oldest falling off, and hard-links the latest
// as <path>.1. Nothing when kept[0] does not exist or one is kept.
void RotateCheckpoints(const std::vector<std::string>& kept);

class WorkerDaemon {
 public:
  WorkerDaemon(WorkerDaemonOptions options, CoordinatorLink* coordinator,
               PeerTransport* transport, TrainerFactory trainer_factory,
               ModelFetcher model_fetcher);
  ~WorkerDaemon();

  // Registers (retrying while the coordinator is unavailable) and returns
  // the worker id. Called by Run(); exposed so main() can build the
  // transport's identity first.
  absl::StatusOr<uint64_t> Register();
  // The control loop; returns when Shutdown() was called.
  absl::Status Run();
  void Shutdown(const std::string& reason);

  // One heartbeat (re-registering if the coordinator forgot this worker,
  // relaying abandon_job); returns when the next one is due.
  absl::Duration HeartbeatOnce();
  // One GetAssignment and what it asks for: run a round and report it,
  // drop the job (STOP), or nothing (NONE); backs off after an error.
  void PollOnce();

  // A copy of the current model of `job_id` (params and outer state) taken
  // between rounds, for a joining worker's FetchModel; FAILED_PRECONDITION
  // if this worker holds no model of that job. All-reduce jobs serve the
  // copy kept after the last round at once (even while a round runs), so
  // a member re-synchronising never waits on this worker's round.
  // Re-synchronisation uses the model fetcher too: after a failed ring
  // all-reduce the round runner fetches from a ring member that completed
  // the round, and an Assignment.resync_source is fetched before the
  // round. Once a job ended (a STOP assignment), its final parameters are
  // kept and served (no outer state, no moments) until this worker takes
  // another job or restarts: `gaslocctl job export` fetches them through
  // the coordinator.
  absl::StatusOr<ModelSnapshot> SnapshotModel(uint64_t job_id);

  // The model as the last round of an all-reduce job left it (one model
  // copy of parameters, outer state and AdamW moments), so a member that
  // re-synchronises is served without waiting for job_mu_; also the copy
  // SnapshotModel takes of a gossip job's model between rounds.
  struct ServedModel {
    uint64_t job_id = 0;
    uint64_t round = 0;  // the next round the model expects
    std::vector<float> params, outer, m, v;
    uint64_t optimizer_step = 0;
  };

  // This worker's id: set by every (re-)registration, read by everyone
  // else (the mailbox learns it through the identity listener).
  uint64_t worker_id() const { return worker_id_.load(); }
  // Called with the worker id after every (re-)registration, before the id
  // is used (the mailbox needs it to check chunks).
  void SetIdentityListener(std::function<void(uint64_t)> listener) {
    identity_listener_ = std::move(listener);
  }
  // The last job set-up or round error (OK if none yet).
  absl::Status last_error() const;
  // The job this worker holds (0 = idle).
  uint64_t job_id() const;

 private:
  struct Job {
    uint64_t job_id = 0;
    v1::JobSpec spec;
    DataShard shard;
    int threads = 0;
    std::unique_ptr<InnerTrainer> trainer;
    std::unique_ptr<RoundRunner> runner;
    int64_t last_round = -1;  // last round completed (reported)
    // Next round of the model in the newest checkpoint written; 0 = none.
    uint64_t checkpointed_next_round = 0;
  };

  // ------------------------------------------ the loop (worker_daemon.cc)
  // Whether a dropped job's final parameters stay served for exports.
  enum class KeepModel { kNo, kForExport };
  void DropJob(const std::string& why, KeepModel keep = KeepModel::kNo)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(job_mu_);
  void SetProgress(const RoundProgress& progress);
  // Waits `d` on the clock; true (at once) if Shutdown() was called.
  bool WaitForShutdown(absl::Duration d);
  // Runs the assignment's round and reports it; `outcome` says how far it
  // got (SETUP_FAILED, FAILED or COMPLETED) when it returns an error.
  absl::Status RunAssignment(const v1::Assignment& assignment,
                             v1::RoundOutcome* outcome);
  // RunAssignment, and on an error: logged, counted, kept in last_error()
  // and reported to the coordinator as the round's failure. False when
  // Shutdown() was called while the round ran (nothing reported).
  bool RunAndReport(const v1::Assignment& assignment);
  // After a completed round: the served copy, the metrics, the checkpoint
  // when one is due (returns its next round, 0 = none written), progress.
  uint64_t FinishRound(Job& job, const v1::Assignment& assignment,
                       const v1::ReportRoundRequest& report,
                       absl::Time round_start);
  // ReportRound with this worker's current id, retried with back-off
  // (retry_backoff doubling up to max_retry_backoff) while the coordinator
  // is unavailable, until accepted or Shutdown(); any other error is
  // returned (the report is stale: the coordinator forgot the worker or
  // the job).
  absl::Status SendReport(v1::ReportRoundRequest report);
  // ------------------------------------------- set-up (job_setup.cc)
  // The job of the assignment, held in job_ (the one held, or a new one
  // replacing it: NewJob, then LoadJobModel).
  absl::StatusOr<Job*> PrepareJob(const v1::Assignment& assignment)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(job_mu_);
  // A job's spec with its paths confined (path_confinement.h), its trainer
  // and round runner.
  absl::StatusOr<std::unique_ptr<Job>> NewJob(const v1::Assignment& assignment);
  // The new job's model: a member's (Assignment.model_source), else this
  // worker's newest usable checkpoint, else theta_0 in round 0 only
  // (FAILED_PRECONDITION naming why otherwise).
  absl::Status LoadJobModel(Job& job, const v1::Assignment& assignment);

  // --------------------------------- checkpoints (daemon_checkpoints.cc)
  std::string CheckpointPath(const Job& job) const;
  // The job's checkpoints, newest first (the latest, then <path>.1, ...).
  std::vector<std::string> CheckpointCandidates(const Job& job) const;
  // Loads the newest checkpoint of the job that loads (a damaged one is
  // skipped; a failed load leaves the runner untouched); false if none.
  // With `resume_from` (the job's checkpoint set, Assignment.resume_from)
  // the one of the set's round is loaded, not a newer one only some
  // members wrote; without one of that round, the newest usable (logged).
  bool ResumeFromCheckpoint(Job& job, const v1::CheckpointSet* resume_from);
  // Loads the first of the job's checkpoints that loads (with `next_round`:
  // that holds the model for that round); false if none.
  bool LoadFirstUsable(Job& job, std::optional<uint64_t> next_round);
  // Saves the job's checkpoint to `path` after RotateCheckpoints (logs a
  // failure; records the duration in the metrics); true when written.
  bool WriteCheckpoint(Job& job, const std::string& path);

  // ------------------------------------- serving (model_serving.cc)
  // All-reduce jobs: keeps a copy of the model as the round left it
  // (served_), which SnapshotModel serves while the next round runs.
  void KeepServedModel(Job& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(job_mu_);
  // A copy of the job's model (params, outer state, AdamW moments).
  static std::shared_ptr<ServedModel> CopyModel(const Job& job);
  // The parameters alone (an ended job's model kept for exports).
  static std::shared_ptr<ServedModel> CopyParameters(const Job& job);

  const WorkerDaemonOptions options_;
  const Clock& clock_;
  CoordinatorLink* const coordinator_;
  PeerTransport* const transport_;
  const TrainerFactory trainer_factory_;
  const ModelFetcher model_fetcher_;

  std::function<void(uint64_t)> identity_listener_;
  std::atomic<uint64_t> worker_id_{0};
  std::atomic<bool> stopping_{false};
  absl::Mutex stop_mu_;
  absl::CondVar stop_cv_;
  std::thread heartbeat_thread_;

  // Registrations so far (Register, on any thread); bumped after worker_id_
  // changes.
  std::atomic<uint64_t> registrations_{0};
  // What PollOnce asks the coordinator for next, and the registration that
  // state belongs to: after a new registration (the coordinator forgot
  // this worker: its database was lost, or the lease expired and the job
  // released it) the job held is not this worker's any more, and may even
  // share its id with a new job of a new database; PollOnce drops it.
  uint64_t poll_job_id_ = 0;
  int64_t poll_after_round_ = -1;
  uint64_t poll_registration_ = 0;

  // The job being run; replaced only by Run()'s thread while holding
  // job_mu_, which a round also holds while it runs (so ServeModel sees a
  // consistent model between rounds).
  mutable absl::Mutex job_mu_;
  std::unique_ptr<Job> job_ ABSL_GUARDED_BY(job_mu_);

  // The model served to re-synchronising members of an all-reduce job
  // (KeepServedModel), or an ended job's parameters kept for exports.
  mutable absl::Mutex served_mu_;
  std::shared_ptr<const ServedModel> served_ ABSL_GUARDED_BY(served_mu_);

  mutable absl::Mutex mu_;
  RoundRunner* runner_for_cancel_ ABSL_GUARDED_BY(mu_) = nullptr;
  v1::WorkerProgress progress_ ABSL_GUARDED_BY(mu_);
  bool abandon_requested_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status last_error_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_DAEMON_WORKER_DAEMON_H_
