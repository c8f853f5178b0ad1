#include "coordinator/round_planner.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"

namespace gasloc::coordinator {
namespace {

// Seconds left until `limit` at the rate `done` per `elapsed` seconds.
double SecondsLeft(double limit, double done, double elapsed) {
  return std::max(0.0, limit - done) * elapsed / done;
}

}  // namespace

std::string FormatIdList(const std::vector<uint64_t>& ids) {
  constexpr size_t kShown = 8;
  if (ids.size() <= kShown) return absl::StrJoin(ids, ",");
  std::vector<uint64_t> head(ids.begin(), ids.begin() + kShown);
  return absl::StrCat(absl::StrJoin(head, ","), ",... (", ids.size(), ")");
}

bool IsEnded(v1::JobState state) {
  return state == v1::JOB_STATE_FINISHED || state == v1::JOB_STATE_FAILED ||
         state == v1::JOB_STATE_STOPPED;
}

std::optional<std::string> StopReason(const v1::JobSpec& spec,
                                      uint64_t rounds_run, uint64_t tokens,
                                      absl::Time started, absl::Time now) {
  const v1::StopCondition& stop = spec.stop();
  if (stop.max_rounds() > 0 && rounds_run >= stop.max_rounds())
    return absl::StrCat("reached max_rounds=", stop.max_rounds());
  if (stop.max_tokens() > 0 && tokens >= stop.max_tokens())
    return absl::StrCat("reached max_tokens=", stop.max_tokens(), " (",
                        tokens, " tokens)");
  if (stop.max_wall_seconds() > 0 &&
      now - started >= absl::Seconds(stop.max_wall_seconds()))
    return absl::StrCat("reached max_wall_seconds=", stop.max_wall_seconds());
  return std::nullopt;
}

std::optional<ScheduleProgress> PlanScheduleProgress(const v1::JobSpec& spec,
                                                     const JobProgress& at) {
  const v1::ScheduleHorizon horizon = ScheduleHorizonOf(spec);
  if (horizon == v1::SCHEDULE_HORIZON_ROUNDS) return std::nullopt;
  const v1::StopCondition& stop = spec.stop();
  const bool stop_any = horizon == v1::SCHEDULE_HORIZON_STOP;
  std::optional<ScheduleProgress> out;
  // One limit's fractions, kept when the horizon uses it (the largest).
  auto limit = [&](bool used, uint64_t max, double done, double step) {
    if (!used || max == 0) return;
    const double m = static_cast<double>(max);
    const ScheduleProgress p{std::clamp(done / m, 0.0, 1.0),
                             std::clamp((done + step) / m, 0.0, 1.0)};
    if (!out) out = p;
    out->begin = std::max(out->begin, p.begin);
    out->end = std::max(out->end, p.end);
  };
  limit(stop_any, stop.max_rounds(), static_cast<double>(at.rounds_run), 1);
  limit(stop_any || horizon == v1::SCHEDULE_HORIZON_TOKENS, stop.max_tokens(),
        static_cast<double>(at.tokens), at.round_tokens);
  limit(stop_any || horizon == v1::SCHEDULE_HORIZON_SECONDS,
        stop.max_wall_seconds(), at.seconds, at.round_seconds);
  return out;
}

double PlannedRoundTokens(const v1::JobSpec& spec,
                          const std::vector<Budget>& budgets) {
  double steps = 0;
  for (const Budget& b : budgets) steps += b.local_steps;
  return steps * spec.training().batch() * spec.model().context();
}

double ExpectedRoundSeconds(double target_round_seconds,
                            uint64_t rounds_planned, double elapsed) {
  if (target_round_seconds > 0) return target_round_seconds;
  if (rounds_planned == 0) return 0;
  return elapsed / static_cast<double>(rounds_planned);
}

double EstimateEtaSeconds(const v1::JobStatus& status, absl::Time now) {
  if (IsEnded(status.state())) return 0;
  if (status.state() != v1::JOB_STATE_RUNNING || status.started_unix_ms() == 0)
    return -1;
  const double elapsed = absl::ToDoubleSeconds(
      now - absl::FromUnixMillis(status.started_unix_ms()));
  const v1::StopCondition& stop = status.spec().stop();
  double eta = std::numeric_limits<double>::infinity();
  if (stop.max_rounds() > 0 && status.rounds_completed() > 0)
    eta = std::min(eta, SecondsLeft(static_cast<double>(stop.max_rounds()),
                                    static_cast<double>(status.rounds_completed()),
                                    elapsed));
  if (stop.max_tokens() > 0 && status.tokens() > 0)
    eta = std::min(eta, SecondsLeft(static_cast<double>(stop.max_tokens()),
                                    static_cast<double>(status.tokens()),
                                    elapsed));
  if (stop.max_wall_seconds() > 0)
    eta = std::min(eta, std::max(0.0, stop.max_wall_seconds() - elapsed));
  return std::isfinite(eta) ? eta : -1;
}

RoundOutcome DecideRoundOutcome(bool completed,
                                const std::vector<uint64_t>& epoch_members,
                                absl::FunctionRef<bool(uint64_t)> running,
                                bool past_deadline) {
  if (completed) return RoundOutcome::kSucceeded;
  if (past_deadline) return RoundOutcome::kFailed;
  for (uint64_t id : epoch_members)
    if (running(id)) return RoundOutcome::kOpen;
  return RoundOutcome::kFailed;
}

std::string FailureDecision::Reason() const {
  return absl::StrCat("failed ", consecutive, " round(s) in a row",
                      " (max_consecutive_round_failures=", limit, ")");
}

std::string FailureDecision::JobReason() const {
  if (members_left == 0) return "every worker was dropped";
  return absl::StrCat(members_left,
                      " worker(s) left, fewer than min_workers=", min_workers);
}

uint32_t MaxConsecutiveRoundFailures(const v1::JobSpec& spec) {
  return spec.has_max_consecutive_round_failures()
             ? spec.max_consecutive_round_failures()
             : kDefaultMaxConsecutiveRoundFailures;
}

FailureDecision DecideFailure(const v1::JobSpec& spec, uint32_t consecutive,
                              size_t members) {
  FailureDecision d;
  d.consecutive = consecutive;
  d.limit = MaxConsecutiveRoundFailures(spec);
  d.min_workers = spec.min_workers();
  d.members_left = members;
  if (consecutive < d.limit) return d;
  d.drop = true;
  d.members_left = members > 0 ? members - 1 : 0;
  d.fail_job = d.members_left < d.min_workers;
  return d;
}

ExchangeVolume ExchangeVolumeOf(const v1::JobSpec& spec) {
  // INT8: a byte a parameter and a 4-byte scale per block of 256
  // (docs/exchange.md, "INT8").
  double bytes_per_param = 4.0;
  if (spec.exchange().encoding() == v1::WIRE_ENCODING_BF16)
    bytes_per_param = 2.0;
  if (spec.exchange().encoding() == v1::WIRE_ENCODING_INT8)
    bytes_per_param = 1.0 + 4.0 / 256.0;
  return {.kind = IsGossipAlgorithm(spec.outer().algorithm())
                      ? ExchangeVolume::Kind::kGossip
                      : ExchangeVolume::Kind::kRingAllReduce,
          .model_bytes = static_cast<double>(
                             ModelParameterCount(spec.model())) *
                         bytes_per_param};
}

double ExchangeBytes(const v1::JobSpec& spec, uint32_t members) {
  const ExchangeVolume volume = ExchangeVolumeOf(spec);
  const double model_bytes = volume.model_bytes;
  if (volume.kind == ExchangeVolume::Kind::kRingAllReduce) {
    if (members < 2) return 0;
    return model_bytes * 2.0 * (members - 1) / members;
  }
  switch (spec.outer().topology()) {
    case v1::TOPOLOGY_COMPLETE:
      // Gossip on the complete graph sends y to each of the others.
      return members < 2 ? 0 : model_bytes * (members - 1);
    case v1::TOPOLOGY_RANDOM_TWO_PEER:
    case v1::TOPOLOGY_RING:
      return 2 * model_bytes;
    default:
      return model_bytes;
  }
}

BudgetOptions BudgetOptionsFor(const v1::JobSpec& spec, uint32_t members) {
  BudgetOptions options;
  options.policy = spec.outer().budget_policy();
  options.nominal_steps = spec.outer().local_steps();
  options.min_steps = spec.outer().min_local_steps();
  options.max_steps = kStretchFactor * spec.outer().local_steps();
  options.exchange_bytes = ExchangeBytes(spec, members);
  return options;
}

std::string EpochDecision::Reason() const {
  return absl::StrCat(
      "epoch ", epoch, " from round ", round, ": ", members, " workers",
      joined.empty() ? "" : absl::StrCat(", joined ", FormatIdList(joined)),
      left.empty() ? "" : absl::StrCat(", left ", FormatIdList(left)));
}

EpochDecision DecideEpoch(uint64_t last_epoch,
                          const std::vector<uint64_t>* last_members,
                          const std::vector<uint64_t>& members,
                          uint64_t round) {
  EpochDecision d;
  d.round = round;
  d.members = members.size();
  d.epoch = last_members == nullptr ? 0 : last_epoch;
  if (last_members != nullptr && *last_members == members) return d;
  d.bump = true;
  ++d.epoch;
  if (last_members == nullptr) {
    d.joined = members;
    return d;
  }
  std::set_difference(members.begin(), members.end(), last_members->begin(),
                      last_members->end(), std::back_inserter(d.joined));
  std::set_difference(last_members->begin(), last_members->end(),
                      members.begin(), members.end(),
                      std::back_inserter(d.left));
  return d;
}

std::string PlanDecision::Reason() const {
  // Indexed by Why.
  static constexpr const char* kReasons[] = {
      "no round planned yet",
      "the worker was in the latest round",
      "nobody from the latest round is still in the job",
      "a new member waits for the members to reach the round boundary",
  };
  return kReasons[static_cast<int>(why)];
}

PlanDecision DecidePlanNext(const std::vector<uint64_t>* latest_members,
                            uint64_t worker_id,
                            absl::FunctionRef<bool(uint64_t)> in_job) {
  using Why = PlanDecision::Why;
  if (latest_members == nullptr) return {true, Why::kFirstRound};
  if (std::binary_search(latest_members->begin(), latest_members->end(),
                         worker_id))
    return {true, Why::kInLatestRound};
  for (uint64_t id : *latest_members)
    if (in_job(id)) return {false, Why::kWaitForBoundary};
  return {true, Why::kLatestRoundGone};
}

LeadDecision DecideRoundLead(uint64_t round, uint32_t max_lead,
                             const std::vector<MemberProgress>& members) {
  LeadDecision d;
  d.round = round;
  d.max_lead = max_lead;
  d.needed_round =
      static_cast<int64_t>(round) - 1 - static_cast<int64_t>(max_lead);
  for (const MemberProgress& m : members) {
    if (m.finished_round >= d.needed_round) continue;
    if (!d.hold || m.finished_round < d.slowest_finished) {
      d.hold = true;
      d.slowest_worker = m.worker_id;
      d.slowest_finished = m.finished_round;
    }
  }
  return d;
}

std::string LeadDecision::Reason() const {
  std::string reason =
      absl::StrCat("round ", round, " waits until every member has finished "
                   "round ", needed_round, " (max_round_lead ", max_lead, ")");
  if (!hold) return absl::StrCat(reason, ": every member has");
  if (slowest_finished < 0)
    return absl::StrCat(reason, ": worker ", slowest_worker,
                        " has finished no round yet");
  return absl::StrCat(reason, ": worker ", slowest_worker,
                      " has finished round ", slowest_finished);
}

std::vector<BudgetDiff> DiffBudgets(const std::vector<uint32_t>& old_steps,
                                    const std::vector<Budget>& budgets) {
  std::vector<BudgetDiff> diffs;
  for (size_t i = 0; i < budgets.size() && i < old_steps.size(); ++i) {
    if (old_steps[i] == 0 || old_steps[i] == budgets[i].local_steps) continue;
    diffs.push_back({i, old_steps[i], budgets[i].local_steps});
  }
  return diffs;
}

}  // namespace gasloc::coordinator
