#include "worker/round/round_runner.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/crc32c.h"
#include "common/job_spec.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "worker/round/outer_optimizer.h"
#include "worker/round/ring_all_reduce.h"

namespace gasloc {
namespace {

constexpr char kPrevIterate[] = "outer.y_prev";
constexpr char kMomentum[] = "outer.momentum";
constexpr char kNextRound[] = "outer.next_round";
constexpr char kJobId[] = "outer.job_id";

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

// Copies a ring all-reduce's traffic and timing into the round report.
void RecordRingTraffic(const RingAllReduceResult& result,
                       v1::ReportRoundRequest* report) {
  report->set_bytes_sent(result.bytes_sent);
  report->set_bytes_received(result.bytes_received);
  report->set_exchange_seconds(result.seconds);
  report->set_wait_seconds(result.wait_seconds);
  if (result.wire_seconds > 0) {
    report->set_wire_seconds(result.wire_seconds);
    report->set_wait_seconds(std::max(0.0, result.seconds - result.wire_seconds));
    v1::LinkSample* sample = report->add_link_samples();
    sample->set_peer_id(result.predecessor_id);
    sample->set_bytes(result.bytes_received);
    sample->set_wire_seconds(result.wire_seconds);
  }
}

// The round's ring in order; *rank = this worker's position, -1 if absent.
std::vector<RingMember> RingOf(const v1::Assignment& assignment,
                               uint64_t self_id, int* rank) {
  std::vector<RingMember> ring;
  *rank = -1;
  for (const auto& member : assignment.ring_order()) {
    if (member.worker_id() == self_id) *rank = static_cast<int>(ring.size());
    ring.push_back(
        {.worker_id = member.worker_id(), .address = member.address()});
  }
  return ring;
}

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
      theta_start_(trainer->params().shared_layout()),
      y_(trainer->params().shared_layout()),
      y_prev_(trainer->params()),  // y_{-1} = theta_0 (algorithms.md s.3)
      momentum_(trainer->params().shared_layout()),
      scratch_(trainer->params().shared_layout()),
      poison_guard_(options_.spec.exchange().poison_distance_ratio()) {}

void RoundRunner::Progress(const RoundProgress& progress) const {
  if (options_.on_progress) options_.on_progress(progress);
}

ExchangeOptions RoundRunner::MakeExchangeOptions() const {
  ExchangeOptions options;
  options.encoding = options_.spec.exchange().encoding();
  options.chunk_bytes = options_.spec.exchange().chunk_bytes();
  options.deadline =
      clock_->Now() + absl::Milliseconds(options_.spec.exchange().deadline_ms());
  return options;
}

bool RoundRunner::KeepsPreviousIterate() const {
  const v1::OuterSpec& outer = options_.spec.outer();
  return IsGossipAlgorithm(outer.algorithm()) &&
         outer.momentum_placement() != v1::MOMENTUM_PLACEMENT_PSEUDO_GRADIENT;
}

FloatArena& RoundRunner::outer_state() {
  return KeepsPreviousIterate() ? y_prev_ : momentum_;
}

absl::Status RoundRunner::InstallFetchedModel(const FetchedModel& model) {
  FloatArena& params = trainer_->params();
  const size_t n = params.size();
  FloatArena* m = trainer_->optimizer_m();
  FloatArena* v = trainer_->optimizer_v();
  const bool with_optimizer = !model.optimizer_m.empty() && m != nullptr &&
                              v != nullptr;
  auto mismatch = [&](const char* part, size_t got) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", model.sender_id, " sent ", part, " of ", got,
        " floats; this job's model has ", n));
  };
  if (model.params.size() != n) return mismatch("parameters", model.params.size());
  if (!model.outer_state.empty() && model.outer_state.size() != n)
    return mismatch("an outer state", model.outer_state.size());
  if (with_optimizer &&
      (model.optimizer_m.size() != n || model.optimizer_v.size() != n))
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", model.sender_id, " sent optimizer moments of ",
        model.optimizer_m.size(), " and ", model.optimizer_v.size(),
        " floats; this job's model has ", n));
  std::copy(model.params.begin(), model.params.end(), params.data());
  if (!model.outer_state.empty())
    std::copy(model.outer_state.begin(), model.outer_state.end(),
              outer_state().data());
  if (with_optimizer) {
    std::copy(model.optimizer_m.begin(), model.optimizer_m.end(), m->data());
    std::copy(model.optimizer_v.begin(), model.optimizer_v.end(), v->data());
    trainer_->set_optimizer_step(model.optimizer_step);
  }
  next_round_ = model.round;
  return absl::OkStatus();
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
  theta_start_.CopyFrom(params);
  pending_outer_ = PendingOuter::kNone;
  ring_failed_ = false;
  ring_failed_peers_.clear();
  const v1::Algorithm algorithm = options_.spec.outer().algorithm();

  absl::Status status;
  if (algorithm == v1::ALGORITHM_DATA_PARALLEL) {
    status = DataParallelStep(assignment, &report);
  } else {
    status = RunInnerSteps(assignment.local_steps(), round, &report);
    if (status.ok() && !AllFinite(params.flat()))
      status = absl::InternalError(absl::StrCat(
          "round ", round, ": parameters became non-finite during the inner "
          "phase; round abandoned, parameters restored"));
    if (status.ok()) {
      Progress({.round = round,
                .inner_step = assignment.local_steps(),
                .train_loss = report.train_loss(),
                .activity = v1::WORKER_ACTIVITY_EXCHANGING});
      if (IsGossipAlgorithm(algorithm) &&
          options_.spec.outer().overlap_exchange()) {
        status = GossipExchangeOverlapped(assignment, &report);
      } else if (IsGossipAlgorithm(algorithm)) {
        GossipExchange(assignment, &report, params);
      } else {
        AllReduceExchange(assignment, &report);
      }
    }
  }
  if (!status.ok()) {
    params.CopyFrom(theta_start_);
    return status;
  }
  if (!AllFinite(params.flat())) {
    params.CopyFrom(theta_start_);
    return absl::InternalError(absl::StrCat(
        "round ", round, ": the outer update produced non-finite parameters; "
        "parameters and outer state restored to the round's start"));
  }
  CommitOuterState();
  next_round_ = round + 1;
  if (ring_failed_ &&
      !ResyncAfterRingFailure(assignment, ring_failed_peers_, &report))
    next_round_ = round;  // not a model of a completed round
  RETURN_IF_ERROR(EvaluateIfDue(assignment, &report));
  if (!IsGossipAlgorithm(algorithm)) {
    // What the coordinator compares across the round's replicas: taken
    // last, so it covers whatever the round left in the model.
    report.set_replica_checksum(ReplicaChecksum(
        params.flat(), momentum_.flat(),
        algorithm == v1::ALGORITHM_DATA_PARALLEL ? trainer_->optimizer_m()
                                                 : nullptr,
        algorithm == v1::ALGORITHM_DATA_PARALLEL ? trainer_->optimizer_v()
                                                 : nullptr));
    report.set_replica_behind(next_round_ != round + 1);
  }
  return report;
}

uint32_t ReplicaChecksum(std::span<const float> params,
                         std::span<const float> outer, const FloatArena* m,
                         const FloatArena* v) {
  uint32_t crc = Crc32cExtend(0, params.data(), params.size_bytes());
  crc = Crc32cExtend(crc, outer.data(), outer.size_bytes());
  for (const FloatArena* moment : {m, v})
    if (moment != nullptr)
      crc = Crc32cExtend(crc, moment->data(), moment->size() * sizeof(float));
  return crc == 0 ? 1 : crc;  // 0 means "not computed" in the report
}

void RoundRunner::ResyncFromSource(const v1::Assignment& assignment,
                                   v1::ReportRoundRequest* report) {
  const v1::PeerAssignment& source = assignment.resync_source();
  absl::Status status =
      resync_fetcher_ ? absl::OkStatus()
                      : absl::FailedPreconditionError("no fetcher installed");
  absl::StatusOr<FetchedModel> model;
  if (status.ok()) {
    model = resync_fetcher_(source);
    status = model.status();
  }
  if (status.ok() && model->round != assignment.round())
    status = absl::FailedPreconditionError(absl::StrCat(
        "its model is at next round ", model->round, ", not ",
        assignment.round()));
  if (status.ok()) status = InstallFetchedModel(*model);
  if (!status.ok()) {
    // Train on with our own model; the next round's checksum flags it again.
    GASLOC_LOG(WARNING) << "job " << options_.job_id << " round "
                        << assignment.round()
                        << ": the coordinator found this replica apart from "
                           "the others, but re-synchronising from worker "
                        << source.worker_id() << " failed: " << status;
    report->set_failure_reason(absl::StrCat(
        "re-sync from worker ", source.worker_id(), " failed: ",
        status.ToString()));
    return;
  }
  ++resyncs_;
  report->set_resynced_from(source.worker_id());
  GASLOC_LOG(INFO) << "job " << options_.job_id << " round "
                   << assignment.round()
                   << ": replica re-synchronised from worker "
                   << source.worker_id()
                   << " before the round (the coordinator found it apart "
                      "from the majority after the previous round)";
}

bool RoundRunner::ResyncAfterRingFailure(
    const v1::Assignment& assignment, const std::vector<uint64_t>& failed_peers,
    v1::ReportRoundRequest* report) {
  if (!resync_fetcher_) return false;
  const uint64_t self = transport_->self_id();
  std::string tried;
  for (const v1::PeerAssignment& member : assignment.ring_order()) {
    const uint64_t id = member.worker_id();
    if (id == self || std::find(failed_peers.begin(), failed_peers.end(),
                                id) != failed_peers.end())
      continue;
    absl::StatusOr<FetchedModel> model = resync_fetcher_(member);
    absl::Status status = model.status();
    if (status.ok() && model->round != assignment.round() + 1)
      status = absl::FailedPreconditionError(absl::StrCat(
          "its model is at next round ", model->round, ", not ",
          assignment.round() + 1, " (it did not complete the round)"));
    if (status.ok()) status = InstallFetchedModel(*model);
    if (status.ok()) {
      ++resyncs_;
      report->set_resynced_from(id);
      report->set_failure_reason(absl::StrCat(
          report->failure_reason(), "; re-synchronised from worker ", id));
      GASLOC_LOG(INFO) << "job " << options_.job_id << " round "
                       << assignment.round()
                       << ": re-synchronised with the model of worker " << id;
      return true;
    }
    absl::StrAppend(&tried, tried.empty() ? "" : "; ", "worker ", id, ": ",
                    status.ToString());
  }
  GASLOC_LOG(WARNING) << "job " << options_.job_id << " round "
                      << assignment.round()
                      << ": could not re-synchronise after the failed "
                         "all-reduce; keeping the round's start ("
                      << (tried.empty() ? "no member to fetch from" : tried)
                      << ")";
  return false;
}

void RoundRunner::CommitOuterState() {
  switch (pending_outer_) {
    case PendingOuter::kNone:
      break;
    case PendingOuter::kPrevIterateFromY:
      y_prev_.CopyFrom(y_);
      break;
    case PendingOuter::kMomentumFromScratch:
      std::swap(momentum_, scratch_);
      break;
  }
  pending_outer_ = PendingOuter::kNone;
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

absl::StatusOr<RoundRunner::InnerSteps> RoundRunner::TakeInnerSteps(
    uint64_t round, uint32_t first_step,
    absl::FunctionRef<bool(uint32_t taken)> more,
    absl::FunctionRef<uint64_t(uint32_t taken)> position) {
  const absl::Time start = clock_->Now();
  absl::Time step_start = start;
  InnerSteps done;
  for (; more(done.taken); ++done.taken) {
    if (cancelled_)
      return absl::CancelledError(absl::StrCat(
          "round ", round, " abandoned after ", first_step + done.taken,
          " steps"));
    trainer_->SetScheduleStep(position(done.taken));
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

absl::Status RoundRunner::RunInnerSteps(uint32_t steps, uint64_t round,
                                        v1::ReportRoundRequest* report) {
  const uint32_t nominal = options_.spec.outer().local_steps();
  ASSIGN_OR_RETURN(
      InnerSteps done,
      TakeInnerSteps(
          round, 0, [steps](uint32_t taken) { return taken < steps; },
          [&](uint32_t taken) {
            return ScheduleStep(round, nominal, steps, taken);
          }));
  report->set_inner_steps(steps);
  report->set_compute_seconds(done.seconds);
  report->set_tokens(done.tokens);
  report->set_train_loss(
      steps > 0 ? static_cast<float>(done.loss_sum / steps) : 0);
  return absl::OkStatus();
}

absl::Status RoundRunner::GossipExchangeOverlapped(
    const v1::Assignment& assignment, v1::ReportRoundRequest* report) {
  FloatArena& params = trainer_->params();
  if (!overlap_model_) {
    overlap_model_.emplace(params.shared_layout());
    overlap_base_.emplace(params.shared_layout());
  }
  overlap_model_->CopyFrom(params);  // theta at H_i: what the exchange mixes
  overlap_base_->CopyFrom(params);
  v1::ReportRoundRequest exchanged;
  std::atomic<bool> exchange_done{false};
  std::thread exchange([&] {
    GossipExchange(assignment, &exchanged, *overlap_model_);
    exchange_done = true;
  });
  // Inner steps while the exchange runs, up to kOverlapStepFactor * H in
  // the round, at the schedule position of the round's last planned step.
  const uint64_t round = assignment.round();
  const uint32_t nominal = options_.spec.outer().local_steps();
  const uint32_t budget = assignment.local_steps();
  const uint64_t cap = static_cast<uint64_t>(kOverlapStepFactor) * nominal;
  const uint64_t allowed = cap > budget ? cap - budget : 0;
  const uint64_t last_planned =
      ScheduleStep(round, nominal, budget, budget > 0 ? budget - 1 : 0);
  absl::StatusOr<InnerSteps> during = TakeInnerSteps(
      round, budget,
      [&](uint32_t taken) { return !exchange_done && taken < allowed; },
      [last_planned](uint32_t) { return last_planned; });
  const absl::Time computed = clock_->Now();
  exchange.join();
  const double waited = Seconds(clock_->Now() - computed);
  report->MergeFrom(exchanged);
  if (absl::IsCancelled(during.status())) return during.status();
  if (!during.ok())
    return absl::Status(during.status().code(),
                        absl::StrCat("round ", round,
                                     ": an inner step taken during the "
                                     "exchange: ",
                                     during.status().message()));
  const uint32_t extra = during->taken;
  // theta' = mix(theta_Hi) + (theta_now - theta_Hi).
  AddLocalChange(overlap_model_->flat(), overlap_base_->flat(), params.flat());
  const uint32_t planned = report->inner_steps();
  report->set_inner_steps(planned + extra);
  report->set_tokens(report->tokens() + during->tokens);
  if (extra > 0)
    report->set_train_loss(static_cast<float>(
        (report->train_loss() * planned + during->loss_sum) /
        (planned + extra)));
  report->set_compute_seconds(report->compute_seconds() + during->seconds);
  // Waiting is now only the time the worker did not compute: blocked on an
  // exchange that outlasted the steps it was allowed.
  report->set_wait_seconds(waited);
  GASLOC_LOG(INFO) << "job " << options_.job_id << " round " << round << ": "
                   << extra << " inner steps during the exchange (H_i="
                   << budget << ", at most " << allowed << "), "
                   << absl::StrFormat("%.3f", waited) << " s waited after them";
  return absl::OkStatus();
}

void RoundRunner::GossipExchange(const v1::Assignment& assignment,
                                 v1::ReportRoundRequest* report,
                                 FloatArena& params) {
  const auto& outer = options_.spec.outer();
  // What is gossiped, by momentum placement: y (LOCAL); the extrapolated
  // point z = y + gamma (y - y_prev) in scratch_ (MIXED); or the Nesterov
  // point z = theta + eta (g + gamma v') in y_, v' in scratch_
  // (PSEUDO_GRADIENT, whose update is then plain mixing of z).
  const bool pseudo_gradient_momentum = !KeepsPreviousIterate();
  const bool mixed =
      outer.momentum_placement() == v1::MOMENTUM_PLACEMENT_MIXED;
  if (pseudo_gradient_momentum) {
    PseudoGradient(theta_start_.flat(), params.flat(), y_.flat());
    NesterovOuterStep(theta_start_.flat(), y_.flat(), outer.eta(),
                      outer.gamma(), momentum_.flat(), scratch_.flat(),
                      y_.flat());
  } else {
    PostLocalIterate(theta_start_.flat(), params.flat(), outer.eta(), y_.flat());
    if (mixed)
      ExtrapolatedPoint(y_.flat(), y_prev_.flat(), outer.gamma(),
                        scratch_.flat());
  }
  const std::span<const float> gossiped = mixed ? scratch_.flat() : y_.flat();

  const int peer_count = assignment.peers_size();
  while (static_cast<int>(received_.size()) < peer_count)
    received_.emplace_back(params.shared_layout());
  const uint64_t size = params.size();
  std::vector<OutgoingTransfer> sends;
  std::vector<IncomingTransfer> receives;
  for (int k = 0; k < peer_count; ++k) {
    const auto& peer = assignment.peers(k);
    sends.push_back({.peer_id = peer.worker_id(),
                     .address = peer.address(),
                     .data = gossiped,
                     .range_begin = 0,
                     .range_end = size});
    receives.push_back({.peer_id = peer.worker_id(),
                        .buffer = received_[k].flat(),
                        .range_begin = 0,
                        .range_end = size});
  }
  const absl::Time start = clock_->Now();
  TransferKey key{.job_id = options_.job_id,
                  .round = assignment.round(),
                  .phase = v1::EXCHANGE_PHASE_GOSSIP,
                  .step = 0};
  std::vector<TransferOutcome> outcomes;
  if (peer_count > 0)
    outcomes = transport_->Exchange(key, sends, receives, MakeExchangeOptions());

  // Phase 1's outcomes per peer slot k. Send outcomes are not used for the
  // decision: a lost acknowledgement makes a send fail that the peer
  // committed, so the sender's view can differ from the receiver's.
  std::vector<absl::Status> received(peer_count), sent(peer_count);
  double max_send_seconds = 0, max_receive_seconds = 0;
  // Concurrent receives: the exchange's wire time is the longest one's.
  double max_wire_seconds = 0;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const TransferOutcome& outcome = outcomes[i];
    const int k = static_cast<int>(i % peer_count);
    (outcome.incoming ? received : sent)[k] = outcome.status;
    if (!outcome.status.ok()) continue;
    if (outcome.incoming) {
      report->set_bytes_received(report->bytes_received() + outcome.bytes);
      max_receive_seconds = std::max(max_receive_seconds, outcome.seconds);
      // The first-chunk scaling is an estimate: at most the receive's time.
      const double wire = std::min(outcome.wire_seconds, outcome.seconds);
      max_wire_seconds = std::max(max_wire_seconds, wire);
      if (wire > 0) {
        v1::LinkSample* sample = report->add_link_samples();
        sample->set_peer_id(outcome.peer_id);
        sample->set_bytes(outcome.bytes);
        sample->set_wire_seconds(wire);
      }
    } else {
      report->set_bytes_sent(report->bytes_sent() + outcome.bytes);
      max_send_seconds = std::max(max_send_seconds, outcome.seconds);
    }
  }
  // Poisoning guard: a committed model too far from ours is refused before
  // the edge confirmation, so both ends drop the edge.
  std::vector<double> distance(peer_count, -1);
  for (int k = 0; k < peer_count; ++k) {
    if (!received[k].ok()) continue;
    distance[k] = L2Distance(gossiped, received_[k].flat());
    absl::Status guard = poison_guard_.Check(distance[k]);
    if (guard.ok()) continue;
    received[k] = guard;
    report->add_refused_peers(assignment.peers(k).worker_id());
    ++models_refused_;
    GASLOC_LOG(WARNING) << "job " << options_.job_id << " round "
                        << assignment.round() << ": worker "
                        << assignment.peers(k).worker_id() << ": " << guard;
  }
  std::vector<absl::Status> edge = ConfirmGossipEdges(assignment, received,
                                                      sent, report);
  std::string failure;
  std::vector<bool> edge_ok(peer_count, true);
  for (int k = 0; k < peer_count; ++k) {
    if (edge[k].ok()) continue;
    edge_ok[k] = false;
    report->add_failed_peers(assignment.peers(k).worker_id());
    failure_codes_.push_back(edge[k].code());
    absl::StrAppend(&failure, failure.empty() ? "" : "; ", "worker ",
                    assignment.peers(k).worker_id(), ": ", edge[k].ToString());
  }
  // peer_distance: the RMS over this round's committed peers of
  // ||x_i - x_j|| (x = what is gossiped: y, or z for MIXED), this worker's
  // neighbourhood view of the spread (algorithms.md, "Peer distance").
  std::vector<GossipNeighbor> neighbors;
  double squared_sum = 0;
  for (int k = 0; k < peer_count; ++k) {
    if (!edge_ok[k]) continue;
    neighbors.push_back({.y = received_[k].flat(),
                         .weight = assignment.peers(k).weight()});
    const double d = distance[k] >= 0
                         ? distance[k]
                         : L2Distance(gossiped, received_[k].flat());
    poison_guard_.Accept(d);
    squared_sum += d * d;
  }
  if (!neighbors.empty())
    report->set_peer_distance(static_cast<float>(
        std::sqrt(squared_sum / static_cast<double>(neighbors.size()))));
  if (!failure.empty()) {
    report->set_failure_reason(failure);
    GASLOC_LOG(WARNING) << "job " << options_.job_id << " round "
                        << assignment.round() << ": gossip without "
                        << report->failed_peers_size()
                        << " peer(s): " << failure;
  }
  // PSEUDO_GRADIENT: y_ holds z and no momentum follows the mixing, so
  // this is theta' = z - alpha sum_j lambda_ij (q(z) - z_j).
  GossipOuterStep(
      y_.flat(), neighbors, assignment.alpha(),
      pseudo_gradient_momentum ? 0.0f : outer.gamma(),
      pseudo_gradient_momentum ? y_.flat() : y_prev_.flat(), params.flat(),
      {.sent = gossiped,
       .bf16 = options_.spec.exchange().encoding() == v1::WIRE_ENCODING_BF16});
  pending_outer_ = pseudo_gradient_momentum ? PendingOuter::kMomentumFromScratch
                                            : PendingOuter::kPrevIterateFromY;
  const double exchange_seconds = Seconds(clock_->Now() - start);
  report->set_exchange_seconds(exchange_seconds);
  // Waiting = everything in the exchange that was not bytes moving; without
  // a wire measurement, the receives' time beyond the sends' (the old
  // estimate).
  max_wire_seconds = std::min(max_wire_seconds, exchange_seconds);
  if (max_wire_seconds > 0) {
    report->set_wire_seconds(max_wire_seconds);
    report->set_wait_seconds(std::max(0.0, exchange_seconds - max_wire_seconds));
  } else {
    report->set_wait_seconds(
        std::max(0.0, max_receive_seconds - max_send_seconds));
  }
}

std::vector<absl::Status> RoundRunner::ConfirmGossipEdges(
    const v1::Assignment& assignment, const std::vector<absl::Status>& received,
    const std::vector<absl::Status>& sent, v1::ReportRoundRequest* report) {
  const int peer_count = assignment.peers_size();
  std::vector<absl::Status> edge(peer_count);
  // Each end tells the other whether it committed the other's y (1) or
  // not (0), as a one-float transfer (GOSSIP, step 1). An edge is used iff
  // this end committed the peer's y AND the peer says it committed ours:
  // both ends apply the same rule to the same two facts, whatever became
  // of the acknowledgements. A peer with which nothing got through in
  // phase 1 gets no confirmation (it waits for ours until its deadline and
  // drops the edge too).
  std::vector<float> mine(peer_count, 0.0f), theirs(peer_count, 0.0f);
  std::vector<OutgoingTransfer> sends;
  std::vector<IncomingTransfer> receives;
  std::vector<int> slots;
  for (int k = 0; k < peer_count; ++k) {
    if (!received[k].ok() && !sent[k].ok()) {
      edge[k] = sent[k];  // sends end first (an absent peer: at once)
      continue;
    }
    mine[k] = received[k].ok() ? 1.0f : 0.0f;
    const auto& peer = assignment.peers(k);
    sends.push_back({.peer_id = peer.worker_id(),
                     .address = peer.address(),
                     .data = std::span<const float>(&mine[k], 1),
                     .range_begin = 0,
                     .range_end = 1});
    receives.push_back({.peer_id = peer.worker_id(),
                        .buffer = std::span<float>(&theirs[k], 1),
                        .range_begin = 0,
                        .range_end = 1});
    slots.push_back(k);
  }
  if (slots.empty()) return edge;
  ExchangeOptions options = MakeExchangeOptions();
  options.encoding = v1::WIRE_ENCODING_FP32;
  const TransferKey key{.job_id = options_.job_id,
                        .round = assignment.round(),
                        .phase = v1::EXCHANGE_PHASE_GOSSIP,
                        .step = 1};
  const std::vector<TransferOutcome> outcomes =
      transport_->Exchange(key, sends, receives, options);
  for (const TransferOutcome& outcome : outcomes) {
    if (!outcome.status.ok()) continue;
    if (outcome.incoming) {
      report->set_bytes_received(report->bytes_received() + outcome.bytes);
    } else {
      report->set_bytes_sent(report->bytes_sent() + outcome.bytes);
    }
  }
  for (size_t s = 0; s < slots.size(); ++s) {
    const int k = slots[s];
    const absl::Status& confirm = outcomes[slots.size() + s].status;
    if (!received[k].ok()) {
      edge[k] = received[k];
    } else if (!confirm.ok()) {
      edge[k] = absl::Status(confirm.code(),
                             absl::StrCat("no confirmation of the edge: ",
                                          confirm.message()));
    } else if (theirs[k] != 1.0f) {
      edge[k] = absl::AbortedError(absl::StrCat(
          "the peer did not commit our y",
          sent[k].ok() ? "" : absl::StrCat(" (our send: ", sent[k].ToString(), ")")));
    }
  }
  return edge;
}

void RoundRunner::AllReduceExchange(const v1::Assignment& assignment,
                                    v1::ReportRoundRequest* report) {
  FloatArena& params = trainer_->params();
  const auto& outer = options_.spec.outer();
  PseudoGradient(theta_start_.flat(), params.flat(), y_.flat());
  int rank = -1;
  const uint64_t self = transport_->self_id();
  std::vector<RingMember> ring = RingOf(assignment, self, &rank);
  if (rank < 0) {
    // Not in the ring (a malformed assignment): average over nobody.
    report->set_failure_reason("this worker is not in the round's ring order");
    ring.clear();
    ring.push_back({.worker_id = self, .address = ""});
    rank = 0;
  }
  TransferKey key{.job_id = options_.job_id,
                  .round = assignment.round(),
                  .phase = v1::EXCHANGE_PHASE_REDUCE_SCATTER,
                  .step = 0};
  RingAllReduceResult result = RingAllReduceMean(
      *transport_, *clock_, key, ring, rank, y_.flat(), scratch_.flat(),
      MakeExchangeOptions());
  RecordRingTraffic(result, report);
  if (!result.status.ok()) {
    // Applying our own pseudo-gradient would part this replica from the
    // others for good: apply nothing, re-synchronise in RunRound.
    RecordRingFailures(result, report);
    ring_failed_ = true;
    ring_failed_peers_ = result.failed_peers;
    params.CopyFrom(theta_start_);
    GASLOC_LOG(WARNING) << "job " << options_.job_id << " round "
                        << assignment.round()
                        << ": all-reduce failed, no update applied; "
                           "re-synchronising: "
                        << result.status;
    return;
  }
  // v_t goes to scratch_ (free once the ring is done) and is adopted only
  // when the new parameters are finite.
  NesterovOuterStep(theta_start_.flat(), y_.flat(), outer.lr(), outer.mu(),
                    momentum_.flat(), scratch_.flat(), params.flat());
  pending_outer_ = PendingOuter::kMomentumFromScratch;
}

void RoundRunner::RecordRingFailures(const RingAllReduceResult& result,
                                     v1::ReportRoundRequest* report) {
  for (uint64_t peer : result.failed_peers) {
    report->add_failed_peers(peer);
    failure_codes_.push_back(result.status.code());
  }
  report->set_failure_reason(result.status.ToString());
}

absl::Status RoundRunner::DataParallelStep(const v1::Assignment& assignment,
                                           v1::ReportRoundRequest* report) {
  if (assignment.local_steps() != 1)
    return absl::InvalidArgumentError(absl::StrCat(
        "data-parallel rounds have exactly 1 inner step, got local_steps ",
        assignment.local_steps()));
  const absl::Time start = clock_->Now();
  ASSIGN_OR_RETURN(InnerStepResult step, trainer_->ComputeGradients());
  const double seconds = Seconds(clock_->Now() - start);
  report->set_inner_steps(1);
  report->set_tokens(step.tokens);
  report->set_train_loss(step.loss);
  report->set_compute_seconds(seconds);
  Progress({.round = assignment.round(),
            .inner_step = 1,
            .train_loss = step.loss,
            .steps_per_second = seconds > 0 ? 1 / seconds : 0,
            .tokens_per_second = seconds > 0 ? step.tokens / seconds : 0,
            .activity = v1::WORKER_ACTIVITY_TRAINING,
            .step_seconds = seconds,
            .step_tokens = step.tokens,
            .round_mean_loss = step.loss});
  int rank = -1;
  std::vector<RingMember> ring =
      RingOf(assignment, transport_->self_id(), &rank);
  if (rank >= 0 && ring.size() > 1) {
    TransferKey key{.job_id = options_.job_id,
                    .round = assignment.round(),
                    .phase = v1::EXCHANGE_PHASE_REDUCE_SCATTER,
                    .step = 0};
    FloatArena& grads = trainer_->grads();
    y_.CopyFrom(grads);  // keep the local gradient for a fallback
    RingAllReduceResult result = RingAllReduceMean(
        *transport_, *clock_, key, ring, rank, grads.flat(), scratch_.flat(),
        MakeExchangeOptions());
    RecordRingTraffic(result, report);
    if (!result.status.ok()) {
      // No step with our own gradient (it would part the replicas); the
      // round re-synchronises in RunRound.
      RecordRingFailures(result, report);
      ring_failed_ = true;
      ring_failed_peers_ = result.failed_peers;
      return absl::OkStatus();
    }
  }
  return trainer_->ApplyGradients();
}

absl::Status RoundRunner::SaveCheckpoint(const std::string& path) {
  CheckpointExtras outer;
  outer.buffers[kPrevIterate].assign(y_prev_.flat().begin(), y_prev_.flat().end());
  outer.buffers[kMomentum].assign(momentum_.flat().begin(), momentum_.flat().end());
  outer.values[kNextRound] = absl::StrCat(next_round_);
  outer.values[kJobId] = absl::StrCat(options_.job_id);
  return trainer_->SaveCheckpoint(path, outer);
}

absl::Status RoundRunner::LoadCheckpoint(const std::string& path,
                                         std::optional<uint64_t> wanted) {
  // All or nothing: the outer state is checked before the trainer swaps
  // its state in (a refused checkpoint changes nothing).
  uint64_t next_round = 0;
  const auto check = [&](const CheckpointExtras& outer) -> absl::Status {
    uint64_t job_id = 0;
    auto value = [&](const char* key) {
      auto it = outer.values.find(key);
      return it == outer.values.end() ? std::string() : it->second;
    };
    if (!absl::SimpleAtoi(value(kJobId), &job_id) ||
        !absl::SimpleAtoi(value(kNextRound), &next_round))
      return absl::DataLossError(
          absl::StrCat("checkpoint ", path, " lacks the outer round state"));
    if (job_id != options_.job_id)
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint ", path, " is of job ", job_id,
                       ", not job ", options_.job_id));
    if (wanted.has_value() && next_round != *wanted)
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint ", path, " holds the model for round ", next_round,
          ", not round ", *wanted, " (the checkpoint set's)"));
    for (auto [name, arena] : {std::pair<const char*, FloatArena*>{kPrevIterate, &y_prev_},
                               {kMomentum, &momentum_}}) {
      auto it = outer.buffers.find(name);
      const size_t size = it == outer.buffers.end() ? 0 : it->second.size();
      if (size != arena->size())
        return absl::DataLossError(absl::StrCat(
            "checkpoint ", path, ": ", name, " has ", size,
            " floats, the model needs ", arena->size()));
    }
    return absl::OkStatus();
  };
  ASSIGN_OR_RETURN(CheckpointExtras outer, trainer_->LoadCheckpoint(path, check));
  for (auto [name, arena] : {std::pair<const char*, FloatArena*>{kPrevIterate, &y_prev_},
                             {kMomentum, &momentum_}}) {
    const std::vector<float>& buffer = outer.buffers[name];
    std::copy(buffer.begin(), buffer.end(), arena->data());
  }
  next_round_ = next_round;
  return absl::OkStatus();
}

}  // namespace gasloc
