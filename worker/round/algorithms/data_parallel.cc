// Data-parallel SGD: every round is one inner step whose gradients are
// averaged over the ring before the AdamW step, so every replica (its
// AdamW moments included) stays bit-identical. No outer update.
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/round/ring_algorithm.h"

namespace gasloc {
namespace {

class DataParallel : public OuterAlgorithm {
 public:
  explicit DataParallel(const OuterContext& context)
      : context_(context),
        feedback_(context.buffers->theta_start,
                  context.spec->exchange().encoding()) {}

  // One step's gradients, not applied.
  absl::Status Prepare(OuterRound& round) override {
    const v1::Assignment& assignment = *round.assignment;
    if (assignment.local_steps() != 1)
      return absl::InvalidArgumentError(absl::StrCat(
          "data-parallel rounds have exactly 1 inner step, got local_steps ",
          assignment.local_steps()));
    const absl::Time start = context_.clock->Now();
    ASSIGN_OR_RETURN(InnerStepResult step, context_.trainer->ComputeGradients());
    const double seconds = absl::ToDoubleSeconds(context_.clock->Now() - start);
    round.report->set_inner_steps(1);
    round.report->set_tokens(step.tokens);
    round.report->set_train_loss(step.loss);
    round.report->set_compute_seconds(seconds);
    round.steps->Progress(
        {.round = assignment.round(),
         .inner_step = 1,
         .train_loss = step.loss,
         .steps_per_second = seconds > 0 ? 1 / seconds : 0,
         .tokens_per_second = seconds > 0 ? step.tokens / seconds : 0,
         .activity = v1::WORKER_ACTIVITY_TRAINING,
         .step_seconds = seconds,
         .step_tokens = step.tokens,
         .round_mean_loss = step.loss});
    return absl::OkStatus();
  }

  // The gradients averaged over the ring, then the AdamW step (the
  // trainer's parameters are the model). A failed ring takes no step.
  absl::StatusOr<ExchangeResult> Exchange(OuterRound& round,
                                          FloatArena& /*model*/) override {
    int rank = -1;
    const std::vector<RingMember> ring =
        RingOf(*round.assignment, context_.transport->self_id(), &rank);
    if (rank >= 0 && ring.size() > 1) {
      FloatArena& grads = context_.trainer->grads();
      context_.buffers->y.CopyFrom(grads);  // keep the local gradient
      ExchangeResult result = RingExchange(
          context_, round, ring, rank, grads.flat(),
          context_.buffers->scratch.flat(), &feedback_);
      if (result.resync) return result;
    }
    // On a horizon the step's cosine follows the round's progress; the
    // warmup (and, without one, the cosine) follows the step count.
    if (round.assignment->has_schedule())
      context_.trainer->SetSchedulePoint(
          {context_.trainer->optimizer_step(),
           round.assignment->schedule_progress_begin()});
    RETURN_IF_ERROR(context_.trainer->ApplyGradients());
    return ExchangeResult{};
  }

  std::optional<uint32_t> ReplicaChecksum() const override {
    return gasloc::ReplicaChecksum(
        context_.trainer->params().flat(), context_.buffers->momentum.flat(),
        context_.trainer->optimizer_m(), context_.trainer->optimizer_v());
  }

 private:
  OuterContext context_;
  ErrorFeedback feedback_;  // INT8: the gradients' rounding carried over
};

}  // namespace

std::unique_ptr<OuterAlgorithm> MakeDataParallel(const OuterContext& context) {
  return std::make_unique<DataParallel>(context);
}

}  // namespace gasloc
