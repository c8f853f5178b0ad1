#include "worker/round/round_runner.h"

#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "worker/round/outer_optimizer.h"
#include "worker/round/ring_algorithm.h"

namespace gasloc {
namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

}  // namespace

RoundDuties RoundDutiesAfter(const v1::JobSpec& spec, uint64_t round) {
  RoundDuties duties;
  const uint32_t eval_interval = spec.data().eval_interval_rounds();
  const uint64_t max_rounds = spec.stop().max_rounds();
  const bool last_round = max_rounds > 0 && round + 1 >= max_rounds;
  if (last_round) {
    duties.evaluate = true;
    duties.reason = "the job's last round is evaluated";
  } else if (eval_interval > 0 && (round + 1) % eval_interval == 0) {
    duties.evaluate = true;
    duties.reason = absl::StrCat("eval every ", eval_interval, " rounds");
  }
  const uint32_t checkpoint_interval = spec.checkpoint().interval_rounds();
  if (!spec.checkpoint().directory().empty() && checkpoint_interval > 0 &&
      (round + 1) % checkpoint_interval == 0) {
    duties.checkpoint = true;
    absl::StrAppend(&duties.reason, duties.reason.empty() ? "" : "; ",
                    "checkpoint every ", checkpoint_interval, " rounds");
  }
  return duties;
}

RoundRunner::RoundRunner(RoundRunnerOptions options, InnerTrainer* trainer,
                         PeerTransport* transport, const Clock* clock)
    : options_(std::move(options)),
      trainer_(trainer),
      transport_(transport),
      clock_(clock),
      buffers_(trainer->params()),
      algorithm_((options_.algorithms != nullptr
                      ? *options_.algorithms
                      : OuterAlgorithmRegistry::Default())
                     .Create({.job_id = options_.job_id,
                              .spec = &options_.spec,
                              .trainer = trainer_,
                              .transport = transport_,
                              .clock = clock_,
                              .buffers = &buffers_})) {}

void RoundRunner::Progress(const RoundProgress& progress) {
  if (options_.on_progress) options_.on_progress(progress);
}

bool RoundRunner::KeepsPreviousIterate() const {
  return algorithm_.ok() && (*algorithm_)->KeepsPreviousIterate();
}

FloatArena& RoundRunner::outer_state() {
  return KeepsPreviousIterate() ? buffers_.y_prev : buffers_.momentum;
}

const FloatArena& RoundRunner::replicated_params() const {
  return ReplicatedParameters(buffers_, trainer_->params());
}

absl::StatusOr<v1::ReportRoundRequest> RoundRunner::RunRound(
    const v1::Assignment& assignment) {
  if (assignment.kind() != v1::ASSIGNMENT_KIND_ROUND)
    return absl::InvalidArgumentError(absl::StrCat(
        "RunRound needs a ROUND assignment, got ",
        v1::AssignmentKind_Name(assignment.kind())));
  if (assignment.job_id() != options_.job_id)
    return absl::FailedPreconditionError(
        absl::StrCat("assignment is for job ", assignment.job_id(),
                     " but this runner runs job ", options_.job_id));
  RETURN_IF_ERROR(algorithm_.status());
  cancelled_ = false;
  failure_codes_.clear();
  const uint64_t round = assignment.round();
  v1::ReportRoundRequest report;
  report.set_worker_id(transport_->self_id());
  report.set_job_id(options_.job_id);
  report.set_round(round);
  if (round < next_round_) {
    // The model already includes this round: a worker that joined with a
    // member's model taken after the round (or got an assignment again).
    // Running it would apply the round's inner steps and outer momentum a
    // second time; report it done with no steps and leave the model alone
    // (peers that listed us treat us as absent for the round), evaluated
    // when the round is due for it like any other.
    GASLOC_LOG(INFO) << "job " << options_.job_id << " round " << round
                     << ": skipped, the model already includes rounds up to "
                     << next_round_ - 1;
    report.set_inner_steps(0);
    RETURN_IF_ERROR(EvaluateIfDue(assignment, &report));
    return report;
  }

  // The coordinator found this replica apart from the others after the
  // previous round: adopt a majority member's model first.
  if (assignment.has_resync_source() &&
      assignment.resync_source().worker_id() != 0)
    ResyncFromSource(assignment, &report);

  FloatArena& params = trainer_->params();
  // theta_t: the parameters, unless the previous round left its start
  // point aside (an overlapped round: the steps beside its exchange are
  // this round's first).
  if (!buffers_.start_carried) buffers_.theta_start.CopyFrom(params);
  buffers_.start_carried = false;
  const absl::Time round_start = clock_->Now();
  OuterRound outer{.assignment = &assignment,
                   .report = &report,
                   .failure_codes = &failure_codes_,
                   .steps = this};
  absl::StatusOr<ExchangeResult> exchanged = RunAlgorithm(outer);
  if (!exchanged.ok()) {
    params.CopyFrom(buffers_.theta_start);
    return exchanged.status();
  }
  report.set_round_seconds(Seconds(clock_->Now() - round_start));
  RETURN_IF_ERROR(FinishRound(assignment, *exchanged, &report));
  return report;
}

absl::StatusOr<ExchangeResult> RoundRunner::RunAlgorithm(OuterRound& round) {
  round_ = &round;
  absl::Cleanup forget = [this] { round_ = nullptr; };
  OuterAlgorithm& algorithm = **algorithm_;
  RETURN_IF_ERROR(algorithm.Prepare(round));
  return algorithm.Exchange(round, trainer_->params());
}

absl::Status RoundRunner::FinishRound(const v1::Assignment& assignment,
                                      const ExchangeResult& exchanged,
                                      v1::ReportRoundRequest* report) {
  const uint64_t round = assignment.round();
  FloatArena& params = trainer_->params();
  if (!AllFinite(params.flat())) {
    params.CopyFrom(buffers_.theta_start);
    return absl::InternalError(absl::StrCat(
        "round ", round, ": the outer update produced non-finite parameters; "
        "parameters and outer state restored to the round's start"));
  }
  OuterAlgorithm& algorithm = **algorithm_;
  algorithm.Apply();
  next_round_ = round + 1;
  if (exchanged.resync &&
      !ResyncAfterRingFailure(assignment, exchanged.failed_peers, report))
    next_round_ = round;  // not a model of a completed round
  RETURN_IF_ERROR(EvaluateIfDue(assignment, report));
  // What the coordinator compares across the round's replicas: taken
  // last, so it covers whatever the round left in the model.
  const std::optional<uint32_t> checksum = algorithm.ReplicaChecksum();
  if (checksum) report->set_replica_checksum(*checksum);
  // (DiLoCo's eager variant has no checksum after a failed ring.)
  if (checksum || exchanged.resync)
    report->set_replica_behind(next_round_ != round + 1);
  return absl::OkStatus();
}

absl::Status RoundRunner::EvaluateIfDue(const v1::Assignment& assignment,
                                        v1::ReportRoundRequest* report) {
  const uint64_t round = assignment.round();
  if (!RoundDutiesAfter(options_.spec, round).evaluate) return absl::OkStatus();
  Progress({.round = round,
            .inner_step = assignment.local_steps(),
            .train_loss = report->train_loss(),
            .activity = v1::WORKER_ACTIVITY_EVALUATING});
  ASSIGN_OR_RETURN(float bpb, trainer_->EvaluateBpb());
  report->set_val_bpb(bpb);
  return absl::OkStatus();
}

absl::StatusOr<InnerStepLoop::Taken> RoundRunner::Take(
    uint32_t first_step,
    absl::FunctionRef<bool(uint32_t taken)> more,
    absl::FunctionRef<SchedulePoint(uint32_t taken)> position) {
  const absl::Time start = clock_->Now();
  absl::Time step_start = start;
  const uint64_t round = round_->assignment->round();
  Taken done;
  for (; more(done.taken); ++done.taken) {
    if (cancelled_) {
      done.cancelled = true;
      break;
    }
    trainer_->SetSchedulePoint(position(done.taken));
    ASSIGN_OR_RETURN(InnerStepResult step, trainer_->Step());
    done.tokens += step.tokens;
    done.loss_sum += step.loss;
    const uint32_t taken = done.taken + 1;
    const absl::Time now = clock_->Now();
    const double elapsed = Seconds(now - start);
    Progress({.round = round,
              .inner_step = first_step + taken,
              .train_loss = step.loss,
              .steps_per_second = elapsed > 0 ? taken / elapsed : 0,
              .tokens_per_second = elapsed > 0 ? done.tokens / elapsed : 0,
              .activity = v1::WORKER_ACTIVITY_TRAINING,
              .step_seconds = Seconds(now - step_start),
              .step_tokens = step.tokens,
              .round_mean_loss = done.loss_sum / taken});
    step_start = now;
  }
  done.seconds = Seconds(clock_->Now() - start);
  return done;
}

absl::Status RoundRunner::TakePlanned() {
  const v1::Assignment& assignment = *round_->assignment;
  v1::ReportRoundRequest* report = round_->report;
  const uint64_t round = assignment.round();
  const uint32_t steps = assignment.local_steps();
  const uint32_t nominal = options_.spec.outer().local_steps();
  ASSIGN_OR_RETURN(
      Taken done,
      Take(
          0, [steps](uint32_t taken) { return taken < steps; },
          [&](uint32_t taken) {
            return PlannedSchedulePoint(assignment, nominal, taken);
          }));
  if (done.cancelled)
    return absl::CancelledError(absl::StrCat(
        "round ", round, " abandoned after ", done.taken, " steps"));
  report->set_inner_steps(steps);
  report->set_compute_seconds(done.seconds);
  report->set_tokens(done.tokens);
  report->set_train_loss(
      steps > 0 ? static_cast<float>(done.loss_sum / steps) : 0);
  if (!AllFinite(trainer_->params().flat()))
    return absl::InternalError(absl::StrCat(
        "round ", round, ": parameters became non-finite during the inner "
        "phase; round abandoned, parameters restored"));
  Progress({.round = round,
            .inner_step = steps,
            .train_loss = report->train_loss(),
            .activity = v1::WORKER_ACTIVITY_EXCHANGING});
  return absl::OkStatus();
}

}  // namespace gasloc
