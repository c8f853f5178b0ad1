// The seam between a round's life cycle (RoundRunner: inner steps,
// cancellation, rollback, reporting) and the job's outer algorithm (its
// exchange with the round's peers and its outer update). One
// implementation per algorithm, each in its own file, chosen once per job
// through OuterAlgorithmRegistry (outer_algorithm_registry.h):
//
//   algorithm      file (in algorithms/)         shared part
//   GASLoC         gasloc_gossip.cc              gossip_algorithm.h
//   D-PSGD         dpsgd.cc                      gossip_algorithm.h
//   DiLoCo         diloco.cc                     ring_algorithm.h
//     eager (outer.overlap_update)               eager_ring_algorithm.h
//   local SGD      local_sgd.cc                  ring_algorithm.h
//   data-parallel  data_parallel.cc              ring_algorithm.h
//   outer.overlap_exchange wraps any of them: overlapped_exchange.h
//
// A round, as RoundRunner drives it:
//   Prepare   the local phase (default: the round's H_i planned steps)
//   Exchange  exchange and outer update of the model; the new outer state
//             is written aside; an error makes the runner restore the
//             round's start
//   Apply     adopts the outer state written aside, called only once the
//             new parameters passed the finiteness check
// OuterState() is the buffer a joining worker fetches; the checkpoint
// holds every buffer of OuterBuffers that is outer state (y_prev, v).
//
// Thread safety: one round at a time. Exchange touches only its model
// argument, the OuterBuffers, its own members and the transport (never
// the trainer) when RunsBesideInnerSteps() says so, so that
// OverlappedExchange can run it on its own thread beside inner steps.
#ifndef GASLOC_WORKER_ROUND_OUTER_ALGORITHM_H_
#define GASLOC_WORKER_ROUND_OUTER_ALGORITHM_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/arena.h"
#include "common/clock.h"
#include "gasloc/v1/coordinator.pb.h"
#include "gasloc/v1/job.pb.h"
#include "worker/exchange/peer_transport.h"
#include "worker/round/inner_trainer.h"
#include "worker/round/public_copies.h"

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

// Model-shaped buffers, allocated once per job (all with the arena
// layout) and shared by whichever algorithm runs: theta at the round's
// start, y (or the pseudo-gradient g), y_{t-1} (GASLoC's LOCAL and MIXED
// placements, D-PSGD), the momentum v (DiLoCo, local SGD, GASLoC's
// PSEUDO_GRADIENT placement) and a scratch buffer. y_prev and v are the
// outer state: both are checkpointed whatever the algorithm.
struct OuterBuffers {
  explicit OuterBuffers(const FloatArena& params)
      : theta_start(params.shared_layout()),
        y(params.shared_layout()),
        y_prev(params),  // y_{-1} = theta_0 (algorithms.md s.3)
        momentum(params.shared_layout()),
        scratch(params.shared_layout()) {}
  FloatArena theta_start;
  // Set when theta_start already holds the next round's start point and
  // the live parameters are ahead of it: after an overlapped round,
  // theta_start is the mixed point and the parameters add the steps taken
  // beside the exchange, which so enter the next round's pseudo-gradient
  // (OverlappedExchange::Apply; algorithms.md section 5). The runner then
  // keeps theta_start at the round's start instead of copying the
  // parameters; anything that replaces the parameters clears it.
  bool start_carried = false;
  FloatArena y;
  FloatArena y_prev;
  FloatArena momentum;
  FloatArena scratch;
};

// What an algorithm works with for the job's life; every pointer outlives
// the algorithm.
struct OuterContext {
  uint64_t job_id = 0;
  const v1::JobSpec* spec = nullptr;  // defaults applied
  InnerTrainer* trainer = nullptr;
  PeerTransport* transport = nullptr;
  const Clock* clock = nullptr;
  OuterBuffers* buffers = nullptr;
};

// The exchange options of the job's spec, the deadline counted from now.
ExchangeOptions MakeExchangeOptions(const OuterContext& context);

// The round runner's inner-step loop (cancellation, progress), as an
// algorithm's local phase and the overlap use it.
class InnerStepLoop {
 public:
  // What a run of inner steps did.
  struct Taken {
    uint32_t taken = 0;
    uint64_t tokens = 0;
    double loss_sum = 0;
    double seconds = 0;
    // The round was cancelled before more() stopped the steps: `taken`
    // steps were applied, the next one was not started.
    bool cancelled = false;
  };
  virtual ~InnerStepLoop() = default;
  // Steps while more(taken) holds, each at schedule point
  // position(taken), with one progress report a step numbered from
  // first_step + 1. A cancelled round stops at the next step boundary
  // with Taken.cancelled set (the steps taken so far are applied and
  // counted); a failed step returns its error.
  virtual absl::StatusOr<Taken> Take(
      uint32_t first_step, absl::FunctionRef<bool(uint32_t taken)> more,
      absl::FunctionRef<SchedulePoint(uint32_t taken)> position) = 0;
  // The round's H_i planned steps, recorded in the report, then the check
  // that the parameters are finite (INTERNAL if not) and the EXCHANGING
  // progress.
  virtual absl::Status TakePlanned() = 0;
  virtual void Progress(const RoundProgress& progress) = 0;
};

// One round as its algorithm sees it.
struct OuterRound {
  const v1::Assignment* assignment = nullptr;
  v1::ReportRoundRequest* report = nullptr;
  // The status code of each peer dropped from the round (aligned with the
  // report's failed_peers).
  std::vector<absl::StatusCode>* failure_codes = nullptr;
  InnerStepLoop* steps = nullptr;
};

// What an exchange leaves the runner to do.
struct ExchangeResult {
  // A failed ring all-reduce: nothing was applied (the model is the
  // round's start) and the replica re-synchronises from a ring member that
  // completed the round, none of these.
  bool resync = false;
  std::vector<uint64_t> failed_peers;
};

class OuterAlgorithm {
 public:
  virtual ~OuterAlgorithm() = default;
  // The round's local phase; theta at the round's start is in
  // buffers->theta_start.
  virtual absl::Status Prepare(OuterRound& round) {
    return round.steps->TakePlanned();
  }
  // Overlapped rounds only (OverlappedExchange), on the round's thread at
  // H_i before the exchange starts beside the inner steps: an outer step
  // taken at once on the live `model` (DiLoCo's eager updates,
  // eager_ring_algorithm.h); the exchange then runs on a copy of its
  // result and the steps beside it start from there. Default: nothing.
  virtual void StepBeforeExchange(OuterRound& /*round*/,
                                  FloatArena& /*model*/) {}
  // The exchange and outer update of `model`: theta after the local phase
  // on entry, the round's result on exit.
  virtual absl::StatusOr<ExchangeResult> Exchange(OuterRound& round,
                                                  FloatArena& model) = 0;
  // Adopts the outer state Exchange wrote aside (none: nothing).
  virtual void Apply() {}
  // True when the outer state is y_{t-1} (gossip under LOCAL or MIXED),
  // false when it is the momentum v.
  virtual bool KeepsPreviousIterate() const { return false; }
  // The checksum the coordinator compares across the replicas of an
  // all-reduce round (ReplicaChecksum in round_runner.h); none for gossip.
  virtual std::optional<uint32_t> ReplicaChecksum() const {
    return std::nullopt;
  }
  // Gossiped models refused by the poisoning guard (poison_guard.h) over
  // the job's life.
  virtual uint64_t ModelsRefused() const { return 0; }
  // Compressed gossip: the digests of the public copies this worker holds
  // for its edge with `peer` (public_copies.h); none without such an edge.
  virtual std::optional<EdgeDigests> PublicCopyDigests(
      uint64_t /*peer*/) const {
    return std::nullopt;
  }
  // Whether Exchange may run beside inner steps (outer.overlap_exchange).
  virtual bool RunsBesideInnerSteps() const { return false; }
  // A bound of the algorithm's own on the inner steps taken beside its
  // exchange in a round of `budget` planned steps, below the overlap's cap
  // (kOverlapStepFactor); once reached the worker waits for the exchange.
  virtual std::optional<uint32_t> MaxStepsBesideExchange(
      uint32_t /*budget*/) const {
    return std::nullopt;
  }
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_ROUND_OUTER_ALGORITHM_H_
