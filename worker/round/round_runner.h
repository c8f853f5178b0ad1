// Runs one job's outer rounds on one worker: the round's life cycle (inner
// steps, cancellation, rollback to the round's start, re-synchronisation,
// evaluation, the report), around the job's outer algorithm (its exchange
// and outer update: outer_algorithm.h, one file per algorithm, chosen once
// through OuterAlgorithmRegistry). Knows nothing about gRPC or the
// coordinator: it takes an Assignment and returns the ReportRoundRequest
// to send back.
//
// Safety rules: received state lands in scratch buffers and is used only
// when its transfer committed; a peer that fails is dropped from the
// round's update and listed in the report; local state that turns
// non-finite is an error and the live parameters AND the outer state
// (y_prev, momentum) are left as at the round's start, never published:
// the outer update writes its new outer state aside and
// OuterAlgorithm::Apply adopts it only after the finiteness check.
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
// outer.overlap_exchange, the exchange runs on a thread the algorithm owns
// (OverlappedExchange, finished before RunRound returns) that touches only
// the exchange's buffers and the transport, never the trainer.
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
#include "worker/round/outer_algorithm.h"
#include "worker/round/outer_algorithm_registry.h"
#include "worker/round/overlapped_exchange.h"  // kOverlapStepFactor
#include "worker/round/ring_algorithm.h"       // ReplicaChecksum

namespace gasloc {

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
struct RoundRunnerOptions {
  uint64_t job_id = 0;
  v1::JobSpec spec;  // defaults applied
  std::function<void(const RoundProgress&)> on_progress;  // may be empty
  // Where the job's outer algorithm comes from; null: the default registry
  // (every algorithm of this tree). Must outlive the constructor.
  const OuterAlgorithmRegistry* algorithms = nullptr;
};

// Fetches a ring member's model (theta, outer state, optionally AdamW
// state) for re-synchronisation after a failed all-reduce; the worker
// daemon's FetchModel path in production, a fake in tests.
using ResyncFetcher = std::function<absl::StatusOr<FetchedModel>(
    const v1::PeerAssignment& member)>;

class RoundRunner : private InnerStepLoop {
 public:
  // `trainer`, `transport` and `clock` must outlive the runner. The outer
  // state starts from the trainer's current parameters (theta_0).
  RoundRunner(RoundRunnerOptions options, InnerTrainer* trainer,
              PeerTransport* transport, const Clock* clock);

  // Runs `assignment` (kind ROUND, this job). Returns the report; an error
  // means the round could not run at all (bad assignment, non-finite local
  // state, cancelled, no registered algorithm for the job): the parameters
  // are then those at the round's start.
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
  uint64_t models_refused() const {
    return algorithm_.ok() ? (*algorithm_)->ModelsRefused() : 0;
  }
  // Compressed gossip: the digests of this worker's public copies for its
  // edge with `peer` (worker/round/public_copies.h); none if not held.
  std::optional<EdgeDigests> public_copy_digests(uint64_t peer) const {
    return algorithm_.ok() ? (*algorithm_)->PublicCopyDigests(peer)
                           : std::nullopt;
  }

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
  FloatArena& previous_iterate() { return buffers_.y_prev; }
  FloatArena& momentum() { return buffers_.momentum; }
  // The outer buffer this job's algorithm carries between rounds (what a
  // joining worker needs): y_{t-1} for gossip (LOCAL, MIXED placements),
  // the momentum v for the all-reduce algorithms and the PSEUDO_GRADIENT
  // placement.
  FloatArena& outer_state();
  // What the replicas of an all-reduce job agree on after a round (the
  // model a re-synchronising member fetches): the parameters, or, after an
  // overlapped round, the next round's start (ReplicatedParameters).
  const FloatArena& replicated_params() const;
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
  // InnerStepLoop, for the algorithm of the round in flight (round_).
  absl::StatusOr<Taken> Take(
      uint32_t first_step, absl::FunctionRef<bool(uint32_t taken)> more,
      absl::FunctionRef<SchedulePoint(uint32_t taken)> position) override;
  absl::Status TakePlanned() override;
  void Progress(const RoundProgress& progress) override;

  // The algorithm's local phase and exchange; an error leaves the caller
  // to restore the round's start.
  absl::StatusOr<ExchangeResult> RunAlgorithm(OuterRound& round);
  // After a successful exchange: the finiteness check, the outer state
  // adopted, the re-sync a failed ring asks for, evaluation and the
  // replica checksum.
  absl::Status FinishRound(const v1::Assignment& assignment,
                           const ExchangeResult& exchanged,
                           v1::ReportRoundRequest* report);
  // Sets report->val_bpb when `assignment`'s round is due for evaluation.
  absl::Status EvaluateIfDue(const v1::Assignment& assignment,
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

  RoundRunnerOptions options_;
  InnerTrainer* trainer_;
  PeerTransport* transport_;
  const Clock* clock_;
  std::atomic<bool> cancelled_{false};
  uint64_t next_round_ = 0;
  std::vector<absl::StatusCode> failure_codes_;
  OuterBuffers buffers_;
  // The job's algorithm (an error: none registered; RunRound returns it).
  absl::StatusOr<std::unique_ptr<OuterAlgorithm>> algorithm_;
  OuterRound* round_ = nullptr;  // the round in flight, for InnerStepLoop
  ResyncFetcher resync_fetcher_;
  uint64_t resyncs_ = 0;
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_ROUND_ROUND_RUNNER_H_
