// DiLoCo with eager updates (outer.overlap_update OVERLAP_UPDATE_EAGER,
// under outer.overlap_exchange; Kale et al. 2025, arXiv 2502.12996): the
// outer step is taken at H_i, before the ring all-reduce of the round's
// pseudo-gradient ends, with the worker's own fresh pseudo-gradient in
// place of its share of the missing mean:
//
//   ghat_t^i = g_t^i / n_t + (gbar_{t-1} - g_{t-1}^i / n_{t-1})
//
// (the second term, the others' share of the previous round's mean, is
// 0 in the first round and after a round whose ring failed), then the
// Nesterov step from this worker's own round start with its own momentum
// (EagerOuterStep). The all-reduce runs beside the inner steps that
// follow, which start from the eager step's result; its mean only feeds
// the next round's ghat. Each pseudo-gradient so enters every worker's
// update once: its owner's share in its own round, the others' one round
// later. The replicas agree on the all-reduced means gbar_t (bit-identical
// from the ring; ReplicaChecksum covers the last one); each worker's
// parameters, round start and momentum are its own (algorithms.md
// section 5).
//
// Thread safety: as OuterAlgorithm. StepBeforeExchange runs on the
// round's thread before OverlappedExchange starts Exchange on its own
// thread; Exchange touches only the OuterBuffers' y and scratch (the
// ring), own_ and the transport; Apply runs after Exchange has returned.
#ifndef GASLOC_WORKER_ROUND_EAGER_RING_ALGORITHM_H_
#define GASLOC_WORKER_ROUND_EAGER_RING_ALGORITHM_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "common/arena.h"
#include "worker/round/outer_algorithm.h"
#include "worker/round/ring_algorithm.h"
#include "worker/round/ring_all_reduce.h"

namespace gasloc {

class EagerPseudoGradientRing : public PseudoGradientRing {
 public:
  explicit EagerPseudoGradientRing(const OuterContext& context);

  // The eager outer step on the live model: g_t^i into own_ and (for the
  // ring) buffers->y, the new momentum aside in momentum_next_.
  void StepBeforeExchange(OuterRound& round, FloatArena& model) override;
  // The ring all-reduce of g_t^i; then own_ becomes the others' share of
  // its mean for the next round. A round run inline (no ring to wait for)
  // takes the eager step here first. A failed ring drops the round:
  // `model` goes back to the round's start and the runner re-synchronises.
  absl::StatusOr<ExchangeResult> Exchange(OuterRound& round,
                                          FloatArena& model) override;
  // Adopts the momentum and the others' share.
  void Apply() override;
  // Over the round's all-reduced mean; none after a failed ring.
  std::optional<uint32_t> ReplicaChecksum() const override;
  // RunsBesideInnerSteps and MaxStepsBesideExchange: PseudoGradientRing's
  // (at most the round's own H_i beside the all-reduce: a 1-outer-step
  // overlap).

 private:
  // g_t^i from the eager step; after a completed ring, the others' share
  // of its mean, which Apply swaps into share_.
  FloatArena own_;
  // The others' share of round share_round_'s mean, used by the eager step
  // of round share_round_ + 1 only.
  FloatArena share_;
  std::optional<uint64_t> share_round_;
  FloatArena momentum_next_;
  std::vector<RingMember> ring_;  // of the round being exchanged
  int rank_ = -1;
  uint64_t round_ = 0;
  bool stepped_ = false;   // StepBeforeExchange ran for this round
  bool pending_ = false;   // momentum_next_ and own_ (a share) for Apply
  bool mean_ok_ = false;   // buffers->y holds the last round's mean
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_ROUND_EAGER_RING_ALGORITHM_H_
