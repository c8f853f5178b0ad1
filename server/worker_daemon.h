// The gasloc-worker daemon's control loop: register with the coordinator,
// heartbeat with progress, long-poll for assignments, run each job round by
// round through a RoundRunner, report every round, checkpoint on the job's
// interval, and go back to idle when the job ends. Shutdown() (SIGTERM)
// abandons the current round at the next inner-step boundary, leaves the
// coordinator and makes Run() return.
//
// Thread safety: Run() on one thread; Shutdown() and the model-serving
// callback (ServeModel) from any thread. The heartbeat thread reads the
// progress under mu_.
#ifndef GASLOC_SERVER_WORKER_DAEMON_H_
#define GASLOC_SERVER_WORKER_DAEMON_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gasloc/v1/coordinator.pb.h"
#include "server/coordinator_client.h"
#include "worker/exchange/model_fetch.h"
#include "worker/exchange/peer_transport.h"
#include "worker/round/inner_trainer.h"
#include "worker/round/round_runner.h"
#include "worker/round/worker_metrics.h"

namespace gasloc {

struct WorkerDaemonOptions {
  v1::WorkerInfo info;          // address = what peers dial
  int threads = 0;              // compute threads (0 = all cores)
  std::string data_dir = ".";   // fallback checkpoint directory
  absl::Duration assignment_wait = absl::Seconds(10);
  absl::Duration retry_backoff = absl::Milliseconds(500);
  WorkerMetrics* metrics = nullptr;  // not owned; null = no metrics
};

// Creates the trainer of a job (the real one wraps worker/train's Trainer):
// data rank `rank` of `num_workers`.
using TrainerFactory = std::function<absl::StatusOr<std::unique_ptr<InnerTrainer>>(
    const v1::JobSpec& spec, int rank, int num_workers, int threads)>;

// Pulls a running job's model (parameters, outer state, inner optimizer
// state and the member's next round) from a member (Peer.FetchModel).
using ModelFetcher = std::function<absl::StatusOr<FetchedModel>(
    const v1::PeerAssignment& source, uint64_t job_id, uint64_t self_id)>;

class WorkerDaemon {
 public:
  WorkerDaemon(WorkerDaemonOptions options, CoordinatorClient* coordinator,
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

  // A copy of the current model of `job_id` (params and y_{t-1}) taken
  // between rounds, for a joining worker's FetchModel; FAILED_PRECONDITION
  // if this worker holds no model of that job.
  absl::StatusOr<ModelSnapshot> SnapshotModel(uint64_t job_id);

  uint64_t worker_id() const { return worker_id_.load(); }
  // Called with the worker id after every (re-)registration, before the id
  // is used (the mailbox needs it to check chunks).
  void SetIdentityListener(std::function<void(uint64_t)> listener) {
    identity_listener_ = std::move(listener);
  }

 private:
  struct Job;
  void HeartbeatLoop();
  absl::Status RunAssignment(const v1::Assignment& assignment);
  absl::StatusOr<Job*> PrepareJob(const v1::Assignment& assignment);
  void DropJob(const std::string& why);
  std::string CheckpointPath(const Job& job) const;
  // Saves the job's checkpoint to `path` (logs a failure; records the
  // duration in the metrics).
  void WriteCheckpoint(Job& job, const std::string& path);
  void SetProgress(const RoundProgress& progress);

  const WorkerDaemonOptions options_;
  CoordinatorClient* const coordinator_;
  PeerTransport* const transport_;
  const TrainerFactory trainer_factory_;
  const ModelFetcher model_fetcher_;

  std::function<void(uint64_t)> identity_listener_;
  std::atomic<uint64_t> worker_id_{0};
  std::atomic<bool> stopping_{false};
  absl::Notification stopped_;
  std::thread heartbeat_thread_;

  // The job being run; replaced only by Run()'s thread while holding
  // job_mu_, which a round also holds while it runs (so ServeModel sees a
  // consistent model between rounds).
  absl::Mutex job_mu_;
  std::unique_ptr<Job> job_ ABSL_GUARDED_BY(job_mu_);
  RoundRunner* runner_for_cancel_ ABSL_GUARDED_BY(mu_) = nullptr;

  absl::Mutex mu_;
  v1::WorkerProgress progress_ ABSL_GUARDED_BY(mu_);
  bool abandon_requested_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gasloc

#endif  // GASLOC_SERVER_WORKER_DAEMON_H_
