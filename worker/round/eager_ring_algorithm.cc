#include "worker/round/eager_ring_algorithm.h"

#include <span>
#include <utility>

#include "worker/round/outer_optimizer.h"

namespace gasloc {

EagerPseudoGradientRing::EagerPseudoGradientRing(const OuterContext& context)
    : PseudoGradientRing(context),
      own_(context.buffers->theta_start.shared_layout()),
      share_(context.buffers->theta_start.shared_layout()),
      momentum_next_(context.buffers->theta_start.shared_layout()) {}

void EagerPseudoGradientRing::StepBeforeExchange(OuterRound& round,
                                                 FloatArena& model) {
  OuterBuffers& b = *context_.buffers;
  round_ = round.assignment->round();
  ring_ = RingOrSelf(context_, round, &rank_);
  // The others' share of the previous round's mean, if this worker holds
  // it (none in the first round, after a failed ring or a skipped round).
  const bool shared = share_round_ && *share_round_ + 1 == round_;
  const auto& outer = context_.spec->outer();
  EagerOuterStep(b.theta_start.flat(), model.flat(),
                 shared ? std::span<const float>(share_.flat())
                        : std::span<const float>(),
                 static_cast<int>(ring_.size()), outer.lr(), outer.mu(),
                 b.momentum.flat(), momentum_next_.flat(), own_.flat(),
                 model.flat());
  b.y.CopyFrom(own_);  // what the ring averages
  stepped_ = true;
  pending_ = false;
  mean_ok_ = false;
}

absl::StatusOr<ExchangeResult> EagerPseudoGradientRing::Exchange(
    OuterRound& round, FloatArena& model) {
  if (!stepped_) StepBeforeExchange(round, model);  // an inline round
  stepped_ = false;
  OuterBuffers& b = *context_.buffers;
  // With INT8, the ring's mean carries this worker's residual and every
  // rounding's loss besides own_ / n; the others' share (mean - own_ / n)
  // holds them, so the two halves still apply the whole mean.
  ExchangeResult result = RingExchange(context_, round, ring_, rank_,
                                       b.y.flat(), b.scratch.flat(), &feedback_);
  if (result.resync) {
    // As plain DiLoCo: the round applies nothing, its eager step included.
    model.CopyFrom(b.theta_start);
    return result;
  }
  OthersShare(b.y.flat(), own_.flat(), static_cast<int>(ring_.size()),
              own_.flat());
  pending_ = true;
  mean_ok_ = true;
  return result;
}

void EagerPseudoGradientRing::Apply() {
  if (!pending_) return;
  pending_ = false;
  OuterBuffers& b = *context_.buffers;
  std::swap(b.momentum, momentum_next_);
  std::swap(share_, own_);
  share_round_ = round_;
}

std::optional<uint32_t> EagerPseudoGradientRing::ReplicaChecksum() const {
  if (!mean_ok_) return std::nullopt;
  return gasloc::ReplicaChecksum(context_.buffers->y.flat(), {});
}

}  // namespace gasloc
