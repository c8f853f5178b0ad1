#include "coordinator/budget.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gasloc::coordinator {

double UpdateEma(double old_value, double sample, double weight) {
  if (!(old_value > 0)) return sample;
  return (1 - weight) * old_value + weight * sample;
}

std::string Budget::Reason() const {
  switch (basis) {
    case Basis::kNoMeasurement:
      return "no measurement yet";
    case Basis::kUniform:
      return absl::StrFormat("uniform policy: nominal H=%u", local_steps);
    case Basis::kAdaptive:
      break;
  }
  const uint32_t ceiling = std::max(nominal_steps, max_steps);
  std::string bound;
  if (raw_steps <= min_steps) {
    bound = " (floor H_min)";
  } else if (raw_steps >= ceiling) {
    bound = ceiling == nominal_steps
                ? std::string(" (ceiling H)")
                : absl::StrFormat(" (ceiling H_max=%u)", ceiling);
  } else if (raw_steps > nominal_steps) {
    bound = absl::StrFormat(" (above H=%u)", nominal_steps);
  }
  std::string link;
  if (!link_known) {
    link = " (typical; link not measured)";
  } else if (bound_peer != 0) {
    link = absl::StrFormat(" (bound by worker %u, %.3g MB/s)", bound_peer,
                           bound_bytes_per_second / 1e6);
  }
  std::string out = absl::StrFormat(
      "s_i=%.3g steps/s (%.2fx fastest), c_i=%.3g s%s, T=%.3g s%s: H_i=%u%s",
      steps_per_second, steps_per_second / fastest_steps_per_second,
      exchange_seconds, link, target_seconds,
      target_from_floor ? " (an exchange H_min cannot shorten)" : "",
      guard == Guard::kDeadBand ? previous_steps : local_steps,
      guard == Guard::kNoiseBand ? "" : bound);
  if (guard == Guard::kDeadBand) {
    absl::StrAppend(&out, "; kept H_i=", local_steps, ": the formula's ",
                    static_cast<int64_t>(raw_steps),
                    " is within the dead band");
  } else if (guard == Guard::kNoiseBand) {
    absl::StrAppend(&out, " (the formula's ", static_cast<int64_t>(raw_steps),
                    " is within the noise band ",
                    raw_steps > nominal_steps ? "above" : "below", " H");
    if (noise_band > 0)
      absl::StrAppend(&out, absl::StrFormat(
                                ": %.0f%%, the rates' measured round-to-round "
                                "noise",
                                100 * noise_band));
    absl::StrAppend(&out, ")");
    if (previous_steps != 0 && previous_steps != local_steps)
      absl::StrAppend(&out, " (was ", previous_steps, ")");
  } else if (previous_steps != 0 && previous_steps != local_steps) {
    absl::StrAppend(&out, " (was ", previous_steps, ")");
  }
  return out;
}

namespace {

// The relative standard deviation of a worker's s_i estimate.
double EstimateNoise(const WorkerRates& w) {
  const double share =
      w.estimate_share > 0 && w.estimate_share <= 1 ? w.estimate_share : 1;
  return w.step_rate_spread * std::sqrt(share);
}

// The noise band of a worker against the fastest (budget.h header
// comment).
double NoiseBand(const BudgetOptions& options, const WorkerRates& worker,
                 const WorkerRates& fastest) {
  if (worker.step_rate_spread < 0 || fastest.step_rate_spread < 0)
    return options.max_noise_band_fraction;
  const double noise = std::hypot(EstimateNoise(worker), EstimateNoise(fastest));
  return std::clamp(options.noise_band_sigmas * noise,
                    options.noise_band_fraction,
                    std::max(options.noise_band_fraction,
                             options.max_noise_band_fraction));
}

}  // namespace

// Above 80 lines by choice: one pure decision read top to bottom in the
// order of budget.h's header comment (c_i, the round's target T, each H_i,
// then its noise-band and dead-band guards), each step feeding the next;
// budget_test.cc pins every branch.
BudgetPlan PlanBudgets(const std::vector<WorkerRates>& workers,
                       const std::vector<WorkerRound>& round,
                       const BudgetOptions& options) {
  BudgetPlan plan;
  static const WorkerRound kNoRound;
  auto round_of = [&](size_t i) -> const WorkerRound& {
    return i < round.size() ? round[i] : kNoRound;
  };
  const uint32_t nominal = options.nominal_steps;
  const uint32_t floor = std::min(options.min_steps, nominal);
  const uint32_t ceiling = std::max(options.max_steps, nominal);
  Budget nominal_budget;
  nominal_budget.local_steps = nominal;
  nominal_budget.nominal_steps = nominal;
  nominal_budget.min_steps = floor;
  nominal_budget.max_steps = ceiling;
  plan.budgets.assign(workers.size(), nominal_budget);
  for (size_t i = 0; i < workers.size(); ++i) {
    plan.budgets[i].bytes_per_second = std::max(0.0, workers[i].bytes_per_second);
    plan.budgets[i].previous_steps = round_of(i).previous_steps;
  }
  if (options.policy != v1::BUDGET_POLICY_ADAPTIVE) {
    for (Budget& b : plan.budgets) b.basis = Budget::Basis::kUniform;
    return plan;
  }

  // c_i per worker: this round's expected exchange, else the own link.
  std::vector<double> exchange(workers.size(), -1);
  std::vector<double> known;
  known.reserve(workers.size());
  double fastest = 0;
  size_t fastest_index = 0;
  for (size_t i = 0; i < workers.size(); ++i) {
    const WorkerRates& w = workers[i];
    if (w.steps_per_second > fastest) {
      fastest = w.steps_per_second;
      fastest_index = i;
    }
    if (round_of(i).exchange.seconds >= 0) {
      exchange[i] = round_of(i).exchange.seconds;
    } else if (w.bytes_per_second > 0 && options.exchange_bytes > 0) {
      exchange[i] = options.exchange_bytes / w.bytes_per_second;
    }
    if (exchange[i] >= 0) known.push_back(exchange[i]);
  }
  if (fastest <= 0) return plan;  // nobody measured yet
  double c_typ = 0;
  if (!known.empty()) {
    auto mid = known.begin() + known.size() / 2;
    std::nth_element(known.begin(), mid, known.end());
    c_typ = *mid;
  }
  // T: the earliest finish of a measured worker doing the nominal H, but
  // not before the latest finish of one doing H_min (header comment), over
  // the workers that have someone to meet (a member without peers this
  // round, the odd one out of a matching, waits for nobody).
  auto meets_someone = [&](size_t i) {
    const ExpectedExchange& e = round_of(i).exchange;
    return e.seconds < 0 || e.bound_index >= 0;
  };
  bool any_meets = false;
  for (size_t i = 0; i < workers.size(); ++i)
    any_meets =
        any_meets || (workers[i].steps_per_second > 0 && meets_someone(i));
  double target = 0, floor_target = 0;
  bool first = true;
  for (size_t i = 0; i < workers.size(); ++i) {
    if (!(workers[i].steps_per_second > 0)) continue;
    if (any_meets && !meets_someone(i)) continue;
    const double c = exchange[i] >= 0 ? exchange[i] : c_typ;
    const double t = nominal / workers[i].steps_per_second + c;
    target = first ? t : std::min(target, t);
    first = false;
    const double t_floor = floor / workers[i].steps_per_second + c;
    if (t_floor > floor_target) {
      floor_target = t_floor;
      plan.floor_bound_index = static_cast<int64_t>(i);
    }
  }
  plan.target_from_floor = floor_target > target;
  if (plan.target_from_floor) {
    target = floor_target;
  } else {
    plan.floor_bound_index = -1;
  }
  plan.target_round_seconds = target;
  plan.typical_exchange_seconds = c_typ;
  // Above H only to fill a round that the floor term lengthened (a worker
  // without peers, c_i = 0, would otherwise get more than H in a
  // homogeneous cluster).
  const uint32_t top = plan.target_from_floor ? ceiling : nominal;
  const double dead_band =
      std::max(1.0, options.dead_band_fraction * static_cast<double>(nominal));

  for (size_t i = 0; i < workers.size(); ++i) {
    const WorkerRates& w = workers[i];
    if (!(w.steps_per_second > 0)) continue;  // "no measurement yet"
    Budget& b = plan.budgets[i];
    b.basis = Budget::Basis::kAdaptive;
    b.link_known = exchange[i] >= 0;
    b.steps_per_second = w.steps_per_second;
    b.fastest_steps_per_second = fastest;
    b.exchange_seconds = b.link_known ? exchange[i] : c_typ;
    const WorkerRound& r = round_of(i);
    if (r.exchange.seconds >= 0) {
      b.bound_peer = r.exchange.bound_peer;
      b.bound_bytes_per_second = r.exchange.bound_bytes_per_second;
    }
    b.target_seconds = target;
    b.target_from_floor = plan.target_from_floor;
    b.raw_steps = std::round((target - b.exchange_seconds) * w.steps_per_second);
    b.local_steps = static_cast<uint32_t>(std::clamp(
        b.raw_steps, static_cast<double>(floor), static_cast<double>(top)));
    // The spread-sized band covers the rate's share of the shortfall only:
    // a link slower than the others (c_i, from wire time) is checked
    // against the fixed band, as if the rates were the fastest's. The
    // record keeps the band that was applied.
    const bool link_within_band =
        (target - b.exchange_seconds) * fastest >=
        (1.0 - options.noise_band_fraction) * nominal;
    b.noise_band = link_within_band
                       ? NoiseBand(options, w, workers[fastest_index])
                       : options.noise_band_fraction;
    // Symmetric: below H or above it (a stretched round), within the band
    // the difference is noise and H is given; outside it, the formula's.
    if (b.local_steps != nominal &&
        std::abs(b.raw_steps - nominal) <= b.noise_band * nominal) {
      b.local_steps = nominal;
      b.guard = Budget::Guard::kNoiseBand;
      continue;
    }
    // The previous H_i is kept only within this round's bounds: a stretched
    // round's H_i above H is not carried into a round that is not.
    const uint32_t prev = r.previous_steps;
    if (prev >= floor && prev <= top && prev != b.local_steps &&
        std::abs(static_cast<double>(b.local_steps) - prev) < dead_band) {
      b.local_steps = prev;
      b.guard = Budget::Guard::kDeadBand;
    }
  }
  return plan;
}

std::string EncodeBudgets(const std::vector<Budget>& budgets) {
  const size_t magic = sizeof(kBudgetFormatV3) - 1;
  std::string out(magic + budgets.size() * kBudgetRecordBytes, '\0');
  std::memcpy(out.data(), kBudgetFormatV3, magic);
  char* p = out.data() + magic;
  auto put = [&p](const auto& v) {
    std::memcpy(p, &v, sizeof(v));
    p += sizeof(v);
  };
  for (const Budget& b : budgets) {
    put(b.local_steps);
    put(static_cast<uint8_t>(b.basis));
    put(static_cast<uint8_t>(b.link_known));
    put(static_cast<uint8_t>(b.guard));
    put(static_cast<uint8_t>(b.target_from_floor));  // 0 before it
    put(b.nominal_steps);
    put(b.min_steps);
    put(b.steps_per_second);
    put(b.fastest_steps_per_second);
    put(b.exchange_seconds);
    put(b.target_seconds);
    put(b.raw_steps);
    // Version 2 from here.
    put(b.bytes_per_second);
    put(b.bound_peer);
    put(b.bound_bytes_per_second);
    put(b.previous_steps);
    put(b.max_steps);  // 0 before it
    // Version 3 from here.
    put(b.noise_band);
  }
  return out;
}

absl::StatusOr<std::vector<Budget>> DecodeBudgets(absl::string_view blob) {
  int format = 1;
  for (const auto& [magic, version] :
       {std::pair<absl::string_view, int>{kBudgetFormatV3, 3},
        std::pair<absl::string_view, int>{kBudgetFormatV2, 2}}) {
    if (absl::StartsWith(blob, magic)) {
      blob.remove_prefix(magic.size());
      format = version;
      break;
    }
  }
  const bool v2 = format >= 2;
  const size_t record = format == 3   ? kBudgetRecordBytes
                        : format == 2 ? kBudgetRecordBytesV2
                                      : kBudgetRecordBytesV1;
  if (blob.size() % record != 0)
    return absl::DataLossError(absl::StrCat(
        "rounds.budgets has ", blob.size(), " bytes of records, not a multiple of ",
        record, " (format ", format, ")"));
  std::vector<Budget> budgets(blob.size() / record);
  const char* p = blob.data();
  auto get = [&p](auto& v) {
    std::memcpy(&v, p, sizeof(v));
    p += sizeof(v);
  };
  for (Budget& b : budgets) {
    uint8_t basis, link, guard, from_floor;
    get(b.local_steps);
    get(basis);
    get(link);
    get(guard);
    get(from_floor);
    get(b.nominal_steps);
    get(b.min_steps);
    get(b.steps_per_second);
    get(b.fastest_steps_per_second);
    get(b.exchange_seconds);
    get(b.target_seconds);
    get(b.raw_steps);
    if (v2) {
      get(b.bytes_per_second);
      get(b.bound_peer);
      get(b.bound_bytes_per_second);
      get(b.previous_steps);
      get(b.max_steps);
      if (format == 3) get(b.noise_band);
    } else {
      guard = 0;  // format 1 wrote zero padding here
      from_floor = 0;
    }
    if (basis > static_cast<uint8_t>(Budget::Basis::kAdaptive))
      return absl::DataLossError("rounds.budgets holds an unknown basis");
    if (guard > static_cast<uint8_t>(Budget::Guard::kNoiseBand))
      return absl::DataLossError("rounds.budgets holds an unknown guard");
    b.basis = static_cast<Budget::Basis>(basis);
    if (from_floor > 1)
      return absl::DataLossError("rounds.budgets holds an unknown T basis");
    b.target_from_floor = from_floor != 0;
    b.link_known = link != 0;
    b.guard = static_cast<Budget::Guard>(guard);
  }
  return budgets;
}

}  // namespace gasloc::coordinator
