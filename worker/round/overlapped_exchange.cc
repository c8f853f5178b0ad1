#include "worker/round/overlapped_exchange.h"

#include <algorithm>
#include <atomic>
#include <future>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "worker/round/outer_optimizer.h"

namespace gasloc {

OverlappedExchange::OverlappedExchange(const OuterContext& context,
                                       std::unique_ptr<OuterAlgorithm> exchange)
    : context_(context), exchange_(std::move(exchange)) {
  if (context_.spec->outer().overlap_update() == v1::OVERLAP_UPDATE_MERGE)
    merge_alpha_ = context_.spec->outer().overlap_merge_alpha();
}

absl::StatusOr<ExchangeResult> OverlappedExchange::Exchange(OuterRound& round,
                                                            FloatArena& model) {
  start_pending_ = false;  // a round that was not applied carries nothing
  // No peer and no ring to wait for: nothing to compute beside.
  if (round.assignment->peers_size() == 0 &&
      round.assignment->ring_order_size() <= 1)
    return exchange_->Exchange(round, model);
  if (!model_) {
    model_.emplace(model.shared_layout());
    if (!merge_alpha_) base_.emplace(model.shared_layout());
  }
  // An eager algorithm's outer step, before the steps beside the exchange.
  exchange_->StepBeforeExchange(round, model);
  model_->CopyFrom(model);  // theta at H_i: what the exchange mixes
  if (base_) base_->CopyFrom(model);
  v1::ReportRoundRequest exchanged;
  OuterRound beside = round;
  beside.report = &exchanged;
  std::atomic<bool> exchange_done{false};
  absl::StatusOr<ExchangeResult> result;
  std::future<void> done = thread_.Run([&] {
    absl::Cleanup mark = [&exchange_done] { exchange_done = true; };
    result = exchange_->Exchange(beside, *model_);
  });
  // The exchange uses this frame: wait for it however this one ends.
  absl::Cleanup wait = [&done] {
    if (done.valid()) done.wait();
  };
  // Inner steps while the exchange runs, up to kOverlapStepFactor * H in
  // the round or the algorithm's own bound (DiLoCo: H_i). They are the
  // next round's first steps (their change enters its pseudo-gradient,
  // Apply), so they take the schedule position of the next round's start
  // (on a horizon, the round's planned end).
  const uint64_t round_number = round.assignment->round();
  const uint32_t nominal = context_.spec->outer().local_steps();
  const uint32_t budget = round.assignment->local_steps();
  const uint64_t cap = static_cast<uint64_t>(kOverlapStepFactor) * nominal;
  uint64_t allowed = cap > budget ? cap - budget : 0;
  if (const std::optional<uint32_t> own =
          exchange_->MaxStepsBesideExchange(budget))
    allowed = std::min<uint64_t>(allowed, *own);
  const SchedulePoint next_start{
      ScheduleStep(round_number + 1, nominal, budget, 0),
      ScheduleProgressAtEnd(*round.assignment)};
  absl::StatusOr<InnerStepLoop::Taken> during = round.steps->Take(
      budget, [&](uint32_t taken) { return !exchange_done && taken < allowed; },
      [next_start](uint32_t) { return next_start; });
  const absl::Time computed = context_.clock->Now();
  done.get();  // rethrows what the exchange threw
  const double waited = absl::ToDoubleSeconds(context_.clock->Now() - computed);
  round.report->MergeFrom(exchanged);
  // An exchange that failed fails the round as it would without the
  // overlap (the runner restores the round's start).
  if (!result.ok()) return result.status();
  // The exchange completed: the peers have mixed this worker's point, so
  // the round stands whatever happened beside it, as a plain round's
  // exchange does. A cancel only stopped the steps (those taken are
  // kept); a failed step drops the steps taken beside the exchange.
  InnerStepLoop::Taken kept;
  if (during.ok()) {
    kept = *during;
    if (merge_alpha_) {
      // theta' = a theta_now + (1 - a) mix(theta_Hi).
      MergeWithGlobal(model_->flat(), *merge_alpha_, model.flat());
    } else {
      // theta' = mix(theta_Hi) + (theta_now - theta_Hi).
      AddLocalChange(model_->flat(), base_->flat(), model.flat());
    }
  } else {
    const std::string why = absl::StrCat(
        "an inner step beside the exchange failed (",
        during.status().ToString(),
        "); the round keeps its exchange and drops the steps taken beside it");
    GASLOC_LOG(WARNING) << "job " << context_.job_id << " round "
                        << round_number << ": " << why;
    round.report->set_failure_reason(
        round.report->failure_reason().empty()
            ? why
            : absl::StrCat(round.report->failure_reason(), "; ", why));
    model.CopyFrom(*model_);
  }
  start_pending_ = true;
  RecordSteps(round, kept, allowed, waited);
  return result;
}

void OverlappedExchange::Apply() {
  exchange_->Apply();
  if (!start_pending_) return;
  // The next round starts from the mixed point; the parameters hold it
  // plus the steps taken beside the exchange.
  OuterBuffers& b = *context_.buffers;
  b.theta_start.CopyFrom(*model_);
  b.start_carried = true;
  start_pending_ = false;
}

void OverlappedExchange::RecordSteps(OuterRound& round,
                                     const InnerStepLoop::Taken& during,
                                     uint64_t allowed, double waited) const {
  v1::ReportRoundRequest* report = round.report;
  const uint32_t extra = during.taken;
  const uint32_t planned = report->inner_steps();
  report->set_inner_steps(planned + extra);
  report->set_tokens(report->tokens() + during.tokens);
  if (extra > 0)
    report->set_train_loss(static_cast<float>(
        (report->train_loss() * planned + during.loss_sum) /
        (planned + extra)));
  report->set_compute_seconds(report->compute_seconds() + during.seconds);
  report->set_overlap_steps(extra);
  report->set_overlap_compute_seconds(during.seconds);
  // Waiting is now only the time the worker did not compute: blocked on an
  // exchange that outlasted the steps it was allowed.
  report->set_wait_seconds(waited);
  GASLOC_LOG(INFO) << "job " << context_.job_id << " round "
                   << round.assignment->round() << ": " << extra
                   << " inner steps during the exchange (H_i="
                   << round.assignment->local_steps() << ", at most "
                   << allowed << "), " << absl::StrFormat("%.3f", waited)
                   << " s waited after them"
                   << (during.cancelled ? " (the round was cancelled)" : "");
}

}  // namespace gasloc
