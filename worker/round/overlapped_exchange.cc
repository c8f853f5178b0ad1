#include "worker/round/overlapped_exchange.h"

#include <atomic>
#include <future>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "worker/round/outer_optimizer.h"

namespace gasloc {

absl::StatusOr<ExchangeResult> OverlappedExchange::Exchange(OuterRound& round,
                                                            FloatArena& model) {
  if (!model_) {
    model_.emplace(model.shared_layout());
    base_.emplace(model.shared_layout());
  }
  model_->CopyFrom(model);  // theta at H_i: what the exchange mixes
  base_->CopyFrom(model);
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
  // the round, at the schedule position of the round's last planned step
  // (and, on a horizon, at the round's planned end).
  const uint64_t round_number = round.assignment->round();
  const uint32_t nominal = context_.spec->outer().local_steps();
  const uint32_t budget = round.assignment->local_steps();
  const uint64_t cap = static_cast<uint64_t>(kOverlapStepFactor) * nominal;
  const uint64_t allowed = cap > budget ? cap - budget : 0;
  const SchedulePoint last_planned{
      ScheduleStep(round_number, nominal, budget, budget > 0 ? budget - 1 : 0),
      ScheduleProgressAtEnd(*round.assignment)};
  absl::StatusOr<InnerStepLoop::Taken> during = round.steps->Take(
      budget, [&](uint32_t taken) { return !exchange_done && taken < allowed; },
      [last_planned](uint32_t) { return last_planned; });
  const absl::Time computed = context_.clock->Now();
  done.get();  // rethrows what the exchange threw
  const double waited = absl::ToDoubleSeconds(context_.clock->Now() - computed);
  round.report->MergeFrom(exchanged);
  if (absl::IsCancelled(during.status())) return during.status();
  if (!during.ok())
    return absl::Status(during.status().code(),
                        absl::StrCat("round ", round_number,
                                     ": an inner step taken during the "
                                     "exchange: ",
                                     during.status().message()));
  if (!result.ok()) return result.status();
  // theta' = mix(theta_Hi) + (theta_now - theta_Hi).
  AddLocalChange(model_->flat(), base_->flat(), model.flat());
  RecordSteps(round, *during, allowed, waited);
  return result;
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
  // Waiting is now only the time the worker did not compute: blocked on an
  // exchange that outlasted the steps it was allowed.
  report->set_wait_seconds(waited);
  GASLOC_LOG(INFO) << "job " << context_.job_id << " round "
                   << round.assignment->round() << ": " << extra
                   << " inner steps during the exchange (H_i="
                   << round.assignment->local_steps() << ", at most "
                   << allowed << "), " << absl::StrFormat("%.3f", waited)
                   << " s waited after them";
}

}  // namespace gasloc
