// outer.overlap_exchange, composed onto any algorithm whose exchange
// touches no trainer state (OuterAlgorithm::RunsBesideInnerSteps; the
// registry refuses the others): the exchange mixes a copy of theta at H_i
// on a thread this object owns while the round keeps taking inner steps,
// up to kOverlapStepFactor * H in the round (or the algorithm's own bound,
// OuterAlgorithm::MaxStepsBesideExchange); then theta' = mixed copy +
// the change those steps made. Those steps are the next round's first
// inner steps: at its schedule position, and its pseudo-gradient is taken
// from the mixed point, so the outer optimizer sees them like any other
// (algorithms.md section 5, "Computing through the exchange"). With
// outer.overlap_update MERGE (the all-reduce algorithms) the live model is
// merged with the exchange's result instead, theta' = a theta_now +
// (1 - a) mixed (Streaming DiLoCo); the next round starts from the mixed
// point all the same. An
// algorithm that takes an outer step before its exchange
// (OuterAlgorithm::StepBeforeExchange: DiLoCo's eager updates) takes it
// on the live model first; the copy and the steps beside start from it.
//
// Thread safety: as OuterAlgorithm. The wrapped exchange runs on
// thread_ (one for the job's life, not one per round) and touches only the
// copy, the OuterBuffers and the transport; the round's thread steps the
// trainer meanwhile. Exchange returns only once the wrapped exchange has
// finished, also when a step fails or throws.
#ifndef GASLOC_WORKER_ROUND_OVERLAPPED_EXCHANGE_H_
#define GASLOC_WORKER_ROUND_OVERLAPPED_EXCHANGE_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "worker/round/background_thread.h"
#include "worker/round/outer_algorithm.h"

namespace gasloc {

// A round's inner steps, those taken during the exchange included, stop at
// this many times H. Twice the coordinator's bound on a planned H_i
// (kStretchFactor, coordinator/budget.h): at 4 H the one-slow-link sweep's
// fast workers reached the cap in a quarter of their rounds (those with
// the slow link, whose copies take up to 5 rounds of compute) and waited
// 8-15% of the time; at 8 H, 2% (docs/benchmarks.md).
inline constexpr uint32_t kOverlapStepFactor = 8;

class OverlappedExchange : public OuterAlgorithm {
 public:
  OverlappedExchange(const OuterContext& context,
                     std::unique_ptr<OuterAlgorithm> exchange);

  absl::Status Prepare(OuterRound& round) override {
    return exchange_->Prepare(round);
  }
  // Once the wrapped exchange completed, the round stands: a cancel stops
  // the steps beside it (those taken are kept) and a failed step drops
  // them (the model is the exchange's result), so both ends of an edge
  // agree that the exchange was used. An exchange that failed is
  // returned as it is (the runner restores the round's start).
  absl::StatusOr<ExchangeResult> Exchange(OuterRound& round,
                                          FloatArena& model) override;
  // The wrapped algorithm's Apply, then the next round's start: the mixed
  // point, the parameters being ahead of it by the steps taken beside the
  // exchange (OuterBuffers::start_carried).
  void Apply() override;
  bool KeepsPreviousIterate() const override {
    return exchange_->KeepsPreviousIterate();
  }
  std::optional<uint32_t> ReplicaChecksum() const override {
    return exchange_->ReplicaChecksum();
  }
  uint64_t ModelsRefused() const override { return exchange_->ModelsRefused(); }
  std::optional<EdgeDigests> PublicCopyDigests(uint64_t peer) const override {
    return exchange_->PublicCopyDigests(peer);
  }
  bool RunsBesideInnerSteps() const override { return true; }
  std::optional<uint32_t> MaxStepsBesideExchange(
      uint32_t budget) const override {
    return exchange_->MaxStepsBesideExchange(budget);
  }

 private:
  // The report of the steps taken during the exchange, merged with the
  // exchange's.
  void RecordSteps(OuterRound& round, const InnerStepLoop::Taken& during,
                   uint64_t allowed, double waited) const;

  OuterContext context_;
  std::unique_ptr<OuterAlgorithm> exchange_;
  // outer.overlap_merge_alpha under OVERLAP_UPDATE_MERGE; otherwise the
  // steps beside are carried by difference.
  std::optional<float> merge_alpha_;
  // Allocated at the first round: the model copy the exchange mixes, and
  // theta at H_i (to carry the steps beside by difference; the merge
  // needs no such copy and allocates none).
  std::optional<FloatArena> model_;
  std::optional<FloatArena> base_;
  // Exchange completed a round whose start point Apply is to carry.
  bool start_pending_ = false;
  BackgroundThread thread_;  // last: joined before the buffers go
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_ROUND_OVERLAPPED_EXCHANGE_H_
