// What the all-reduce algorithms share: the round's ring, one ring
// all-reduce with its traffic and failure recorded (RingExchange), the
// replica checksum, and the pseudo-gradient ring of DiLoCo (algorithms/diloco.cc) and
// local SGD (algorithms/local_sgd.cc). Data-parallel (algorithms/data_parallel.cc) averages
// gradients over the same ring; DiLoCo's eager variant is
// eager_ring_algorithm.h.
//
// A failed ring applies nothing (theta and the outer state stay at the
// round's start) and asks the runner to re-synchronise the replica
// (ExchangeResult::resync); applying our own update would part this
// replica from the others for good.
//
// Thread safety: as OuterAlgorithm.
#ifndef GASLOC_WORKER_ROUND_RING_ALGORITHM_H_
#define GASLOC_WORKER_ROUND_RING_ALGORITHM_H_

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/arena.h"
#include "worker/round/error_feedback.h"
#include "worker/round/outer_algorithm.h"
#include "worker/round/ring_all_reduce.h"

namespace gasloc {

// The replica checksum an all-reduce round reports (replica_checksum):
// CRC32C over the parameters, then the outer momentum, then (when given:
// data-parallel, whose AdamW state is replicated too) the inner moments.
// Never 0 (0 = not computed in the report).
uint32_t ReplicaChecksum(std::span<const float> params,
                         std::span<const float> outer,
                         const FloatArena* m = nullptr,
                         const FloatArena* v = nullptr);

// What the replicas of an all-reduce job hold in common after a round:
// the parameters, or, after an overlapped round (buffers.start_carried),
// the next round's start, which the parameters are ahead of by the steps
// taken beside the exchange.
const FloatArena& ReplicatedParameters(const OuterBuffers& buffers,
                                       const FloatArena& params);

// The round's ring in order; *rank = this worker's position, -1 if absent.
std::vector<RingMember> RingOf(const v1::Assignment& assignment,
                               uint64_t self_id, int* rank);

// The ring this worker all-reduces over in `round`: RingOf, or, when it is
// not in the round's ring order (a malformed assignment), itself alone,
// the reason in the report.
std::vector<RingMember> RingOrSelf(const OuterContext& context,
                                   OuterRound& round, int* rank);

// The mean of `data` over `ring` in place (`scratch` is the model's size),
// its traffic and timing in the report. A failure is recorded (failed
// peers with their codes, the reason) and returned as a re-sync. With an
// active `feedback` (INT8), `data` first takes on the residual and the
// ring leaves the new one there; a failed ring resets it.
ExchangeResult RingExchange(const OuterContext& context, OuterRound& round,
                            const std::vector<RingMember>& ring, int rank,
                            std::span<float> data, std::span<float> scratch,
                            ErrorFeedback* feedback = nullptr);

// DiLoCo's exchange and update: the pseudo-gradient g = theta_start -
// theta averaged over the ring, then NesterovOuterStep with outer.lr and
// outer.mu (local SGD: lr = 1, mu = 0, its spec's defaults). Its exchange
// reads theta_start and the model it is given and writes only the
// buffers and that model, so it may run beside inner steps
// (outer.overlap_exchange: DiLoCo with overlapped communication,
// algorithms.md section 5); the replicas then agree on the round's
// result, theta_start of the next round, and each worker's parameters are
// ahead of it by its own steps taken beside the all-reduce.
class PseudoGradientRing : public OuterAlgorithm {
 public:
  explicit PseudoGradientRing(const OuterContext& context)
      : context_(context),
        feedback_(context.buffers->theta_start,
                  context.spec->exchange().encoding()) {}

  absl::StatusOr<ExchangeResult> Exchange(OuterRound& round,
                                          FloatArena& model) override;
  void Apply() override;
  // Over the replicated point (ReplicatedParameters) and the momentum.
  std::optional<uint32_t> ReplicaChecksum() const override;
  bool RunsBesideInnerSteps() const override { return true; }
  // At most the round's own H_i steps beside the all-reduce: the next
  // round's pseudo-gradient sums those steps, taken on from theta_{H_i}
  // before the outer step reached them, and its own H_i steps from the
  // round's result. With more, the stale part dominates and the Nesterov
  // momentum acts on a delayed pseudo-gradient: the validation bpb of
  // ClusterTest.DilocoWithOverlappedCommunicationKeepsItsReplicasInStep
  // rose in 10 of 12 runs with up to 31 steps beside H_i = 8, in none of
  // 10 with at most H_i (Streaming DiLoCo likewise overlaps tau < H).
  std::optional<uint32_t> MaxStepsBesideExchange(
      uint32_t budget) const override {
    return budget;
  }

 protected:
  OuterContext context_;
  ErrorFeedback feedback_;  // INT8 only

 private:
  bool pending_ = false;  // v_t is in buffers->scratch, for Apply
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_ROUND_RING_ALGORITHM_H_
