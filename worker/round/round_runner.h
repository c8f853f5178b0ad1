// Runs one job's outer rounds on one worker: H_i inner steps, the exchange
// with the round's peers, and the outer update of the job's algorithm
// (GASLoC, D-PSGD, DiLoCo, local SGD, data-parallel: one code path).
// Knows nothing about gRPC or the coordinator: it takes an Assignment and
// returns the ReportRoundRequest to send back.
//
// Safety rules: received state lands in scratch buffers and is used only
// when its transfer committed; a peer that fails is dropped from the
// round's update and listed in the report; local state that turns
// non-finite is an error and the live parameters AND the outer state
// (y_prev, momentum) are left as at the round's start, never published:
// the outer update writes its new outer state aside and CommitOuterState
// adopts it only after the finiteness check.
//
// Decisions made here and nowhere else: whether a round is evaluated and
// whether it is followed by a checkpoint (RoundDutiesAfter).
//
// Time: every duration and exchange deadline is read from the injected
// Clock; the transport's mailbox must run on the same clock (a test moves
// one FakeClock to reach a deadline).
//
// Thread safety: one thread calls RunRound; `cancel` (Cancelled()) may be
// set from any thread to abandon the round between inner steps. With
// outer.overlap_exchange, RunRound runs the gossip exchange on a second
// thread of its own (joined before it returns) that touches only the
// exchange's buffers and the transport, never the trainer.
#ifndef GASLOC_WORKER_ROUND_ROUND_RUNNER_H_
#define GASLOC_WORKER_ROUND_ROUND_RUNNER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "common/arena.h"
#include "common/clock.h"
#include "gasloc/v1/coordinator.pb.h"
#include "gasloc/v1/job.pb.h"
#include "worker/exchange/model_fetch.h"
#include "worker/exchange/peer_transport.h"
#include "worker/round/inner_trainer.h"
#include "worker/round/poison_guard.h"
#include "worker/round/ring_all_reduce.h"

namespace gasloc {

// What a heartbeat reports while a round runs.
struct RoundProgress {
  uint64_t round = 0;
  uint32_t inner_step = 0;
  float train_loss = 0;
  double steps_per_second = 0;
  double tokens_per_second = 0;
  v1::WorkerActivity activity = v1::WORKER_ACTIVITY_TRAINING;
  // Set on the TRAINING progress after each inner step (for metrics): that
  // step's wall time and tokens, and the mean loss of the round's steps so
  // far. step_tokens == 0 on every other progress.
  double step_seconds = 0;
  uint64_t step_tokens = 0;
  double round_mean_loss = 0;
};

// What a finished round of a job is due for, and why.
struct RoundDuties {
  bool evaluate = false;    // measure the validation bpb
  bool checkpoint = false;  // write the worker's checkpoint after it
  std::string reason;       // e.g. "eval every 5 rounds; checkpoint every 10"
};

// The one decision of when to evaluate and when to checkpoint: evaluate
// every data.eval_interval_rounds rounds and always on the job's last
// round (when it stops by round count), so the final bpb is current;
// checkpoint every checkpoint.interval_rounds rounds when the job names a
// checkpoint directory. `spec` has its defaults applied.
RoundDuties RoundDutiesAfter(const v1::JobSpec& spec, uint64_t round);

// This worker's id is the transport's (PeerTransport::self_id(), the id
// the daemon registered with), read where it is needed, never copied here.
// outer.overlap_exchange: a round's inner steps, those taken during the
// exchange included, stop at this many times H. Twice the coordinator's
// bound on a planned H_i (kStretchFactor, coordinator/budget.h): at 4 H the
// one-slow-link sweep's fast workers reached the cap in a quarter of their
// rounds (those with the slow link, whose copies take up to 5 rounds of
// compute) and waited 8-15% of the time; at 8 H, 2% (docs/benchmarks.md).
inline constexpr uint32_t kOverlapStepFactor = 8;

struct RoundRunnerOptions {
  uint64_t job_id = 0;
  v1::JobSpec spec;  // defaults applied
  std::function<void(const RoundProgress&)> on_progress;  // may be empty
};

// Fetches a ring member's model (theta, outer state, optionally AdamW
// state) for re-synchronisation after a failed all-reduce; the worker
// daemon's FetchModel path in production, a fake in tests.
using ResyncFetcher = std::function<absl::StatusOr<FetchedModel>(
    const v1::PeerAssignment& member)>;

// The replica checksum an all-reduce round reports (replica_checksum):
// CRC32C over the parameters, then the outer momentum, then (when given:
// data-parallel, whose AdamW state is replicated too) the inner moments.
// Never 0 (0 = not computed in the report).
uint32_t ReplicaChecksum(std::span<const float> params,
                         std::span<const float> outer,
                         const FloatArena* m = nullptr,
                         const FloatArena* v = nullptr);

class RoundRunner {
 public:
  // `trainer`, `transport` and `clock` must outlive the runner. The outer
  // state starts from the trainer's current parameters (theta_0).
  RoundRunner(RoundRunnerOptions options, InnerTrainer* trainer,
              PeerTransport* transport, const Clock* clock);

  // Runs `assignment` (kind ROUND, this job). Returns the report; an error
  // means the round could not run at all (bad assignment, non-finite local
  // state, cancelled): the parameters are then those at the round's start.
  absl::StatusOr<v1::ReportRoundRequest> RunRound(
      const v1::Assignment& assignment);

  // All-reduce algorithms (DiLoCo, local SGD, data-parallel): a member
  // whose ring all-reduce failed applies NOTHING for the round (theta and
  // the outer state stay at the round's start) and, when a fetcher is set,
  // fetches the model of a ring member that completed the round (one whose
  // model is at next round = this round + 1) and installs it, so the
  // replicas stay bit-identical. Without a fetcher, or when no member
  // completed, it keeps the round's start and next_round() stays at this
  // round (so no other member takes it for one that completed).
  void set_resync_fetcher(ResyncFetcher fetcher) {
    resync_fetcher_ = std::move(fetcher);
  }
  // The same fetcher serves Assignment.resync_source: when set, RunRound
  // first installs that member's model (which must be at this round; else
  // it warns and keeps its own). All-reduce rounds report the replica's
  // checksum (ReplicaChecksum) and whether it is behind (its model is not
  // that of a completed round), which the coordinator compares.
  // Rounds in which this runner re-synchronised from another member.
  uint64_t resyncs() const { return resyncs_; }
  // Gossiped models refused by the poisoning guard (worker/round/
  // poison_guard.h), over this runner's life.
  uint64_t models_refused() const { return models_refused_; }

  // Abandon the current round at the next inner-step boundary.
  void Cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

  // The status code of each peer dropped from the last round (aligned with
  // its report's failed_peers).
  const std::vector<absl::StatusCode>& failure_codes() const {
    return failure_codes_;
  }

  // Outer state, for checkpoints and for serving a joining worker:
  // GASLoC's y_{t-1} and DiLoCo's momentum v.
  FloatArena& previous_iterate() { return y_prev_; }
  FloatArena& momentum() { return momentum_; }
  // The outer buffer this job's algorithm carries between rounds (what a
  // joining worker needs): y_{t-1} for gossip (LOCAL, MIXED placements),
  // the momentum v for the all-reduce algorithms and the PSEUDO_GRADIENT
  // placement.
  FloatArena& outer_state();
  // True when that buffer is y_{t-1} (gossip under LOCAL or MIXED), false
  // when it is the momentum v (all-reduce, PSEUDO_GRADIENT gossip).
  bool KeepsPreviousIterate() const;
  // Rounds completed by this runner (the next round expected is this).
  // RunRound reports an assignment for an earlier round as done with no
  // inner steps (evaluated if due) and leaves the model unchanged.
  uint64_t next_round() const { return next_round_; }
  void set_next_round(uint64_t round) { next_round_ = round; }
  // Adopts a member's model for a worker joining a running job: theta, the
  // outer state, the inner AdamW moments and step (when sent and the
  // trainer keeps them), and the member's next round. FAILED_PRECONDITION
  // naming the part whose size does not match this job's model; nothing
  // is changed then.
  absl::Status InstallFetchedModel(const FetchedModel& model);

  // Saves trainer + outer state + round; Load restores them (all or
  // nothing). `next_round`, when given, is the round the checkpoint must
  // hold the model for (a checkpoint set's round + 1): another one is
  // refused with FAILED_PRECONDITION naming both, changing nothing.
  absl::Status SaveCheckpoint(const std::string& path);
  absl::Status LoadCheckpoint(const std::string& path,
                              std::optional<uint64_t> next_round = {});

 private:
  // What a run of inner steps did.
  struct InnerSteps {
    uint32_t taken = 0;
    uint64_t tokens = 0;
    double loss_sum = 0;
    double seconds = 0;
  };
  // The inner-step loop of every algorithm but data-parallel: steps while
  // more(taken) holds, each at schedule position position(taken), with one
  // Progress report a step numbered from first_step + 1. A cancelled
  // round stops with CANCELLED; a failed step returns its error.
  absl::StatusOr<InnerSteps> TakeInnerSteps(
      uint64_t round, uint32_t first_step,
      absl::FunctionRef<bool(uint32_t taken)> more,
      absl::FunctionRef<uint64_t(uint32_t taken)> position);
  // A round's H_i planned steps, recorded in `report`.
  absl::Status RunInnerSteps(uint32_t steps, uint64_t round,
                             v1::ReportRoundRequest* report);
  // Sets report->val_bpb when `assignment`'s round is due for evaluation.
  absl::Status EvaluateIfDue(const v1::Assignment& assignment,
                             v1::ReportRoundRequest* report);
  absl::Status DataParallelStep(const v1::Assignment& assignment,
                                v1::ReportRoundRequest* report);
  // The gossip exchange and outer update of `params` (theta at H_i on
  // entry, the round's result on exit). Touches no trainer state, so it
  // can run beside inner steps (GossipExchangeOverlapped).
  void GossipExchange(const v1::Assignment& assignment,
                      v1::ReportRoundRequest* report, FloatArena& params);
  // outer.overlap_exchange: GossipExchange on a copy of the model on a
  // second thread while this one keeps taking inner steps (up to
  // kOverlapStepFactor * H in the round), then theta' = mixed copy + the
  // change those steps made. An error of such a step is returned (the
  // caller restores the round's start).
  absl::Status GossipExchangeOverlapped(const v1::Assignment& assignment,
                                        v1::ReportRoundRequest* report);
  // Phase 2 of a gossip exchange: with each peer, swap whether we
  // committed each other's y. Returns per peer slot OK (use the edge) or
  // why it is dropped; both ends of an edge reach the same decision
  // unless a peer fails between the two phases.
  std::vector<absl::Status> ConfirmGossipEdges(
      const v1::Assignment& assignment,
      const std::vector<absl::Status>& received,
      const std::vector<absl::Status>& sent, v1::ReportRoundRequest* report);
  void AllReduceExchange(const v1::Assignment& assignment,
                         v1::ReportRoundRequest* report);
  // A failed ring all-reduce: its peers and reason go into the report.
  void RecordRingFailures(const RingAllReduceResult& result,
                          v1::ReportRoundRequest* report);
  // After a failed all-reduce: fetch and install the model of a ring
  // member that completed `assignment`'s round. Returns true on success.
  bool ResyncAfterRingFailure(const v1::Assignment& assignment,
                              const std::vector<uint64_t>& failed_peers,
                              v1::ReportRoundRequest* report);
  // Before the round: fetch and install the model of
  // assignment.resync_source() (the coordinator found this replica apart
  // from the majority); on failure logs it and keeps the own model.
  void ResyncFromSource(const v1::Assignment& assignment,
                        v1::ReportRoundRequest* report);
  // Adopts the outer state the round's update wrote aside (pending_outer_);
  // called only once the new parameters passed the finiteness check.
  void CommitOuterState();
  ExchangeOptions MakeExchangeOptions() const;
  void Progress(const RoundProgress& progress) const;

  RoundRunnerOptions options_;
  InnerTrainer* trainer_;
  PeerTransport* transport_;
  const Clock* clock_;
  std::atomic<bool> cancelled_{false};
  uint64_t next_round_ = 0;
  std::vector<absl::StatusCode> failure_codes_;

  // Model-shaped buffers, allocated once per job.
  FloatArena theta_start_;
  FloatArena y_;
  FloatArena y_prev_;
  FloatArena momentum_;
  FloatArena scratch_;
  std::vector<FloatArena> received_;  // one per gossip peer slot
  // outer.overlap_exchange only (allocated at its first round): the model
  // copy the exchange mixes and theta at H_i.
  std::optional<FloatArena> overlap_model_;
  std::optional<FloatArena> overlap_base_;
  // What CommitOuterState adopts: y_prev <- y_ (gossip) or momentum <-
  // scratch_ (all-reduce, PSEUDO_GRADIENT gossip), or nothing.
  enum class PendingOuter { kNone, kPrevIterateFromY, kMomentumFromScratch };
  PendingOuter pending_outer_ = PendingOuter::kNone;
  // Set by a failed ring all-reduce of the current round (its failed
  // peers); the round then applies nothing and tries to re-synchronise.
  bool ring_failed_ = false;
  std::vector<uint64_t> ring_failed_peers_;
  ResyncFetcher resync_fetcher_;
  uint64_t resyncs_ = 0;
  PoisonGuard poison_guard_;
  uint64_t models_refused_ = 0;
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_ROUND_ROUND_RUNNER_H_
