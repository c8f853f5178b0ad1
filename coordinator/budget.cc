#include "coordinator/budget.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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
  const char* bound = raw_steps <= min_steps       ? " (floor H_min)"
                      : raw_steps >= nominal_steps ? " (ceiling H)"
                                                   : "";
  return absl::StrFormat(
      "s_i=%.3g steps/s (%.2fx fastest), c_i=%.3g s%s, T=%.3g s: H_i=%u%s",
      steps_per_second, steps_per_second / fastest_steps_per_second,
      exchange_seconds, link_known ? "" : " (typical; link not measured)",
      target_seconds, local_steps, bound);
}

BudgetPlan PlanBudgets(const std::vector<WorkerRates>& workers,
                       const BudgetOptions& options) {
  BudgetPlan plan;
  const uint32_t nominal = options.nominal_steps;
  const uint32_t floor = std::min(options.min_steps, nominal);
  Budget nominal_budget;
  nominal_budget.local_steps = nominal;
  nominal_budget.nominal_steps = nominal;
  nominal_budget.min_steps = floor;
  if (options.policy != v1::BUDGET_POLICY_ADAPTIVE) {
    nominal_budget.basis = Budget::Basis::kUniform;
    plan.budgets.assign(workers.size(), nominal_budget);
    return plan;
  }
  plan.budgets.assign(workers.size(), nominal_budget);

  double fastest = 0;
  std::vector<double> exchange_times;
  exchange_times.reserve(workers.size());
  for (const WorkerRates& w : workers) {
    fastest = std::max(fastest, w.steps_per_second);
    if (w.bytes_per_second > 0 && options.exchange_bytes > 0)
      exchange_times.push_back(options.exchange_bytes / w.bytes_per_second);
  }
  if (fastest <= 0) return plan;  // nobody measured yet
  double c_typ = 0;
  if (!exchange_times.empty()) {
    auto mid = exchange_times.begin() + exchange_times.size() / 2;
    std::nth_element(exchange_times.begin(), mid, exchange_times.end());
    c_typ = *mid;
  }
  const double target = nominal / fastest + c_typ;
  plan.target_round_seconds = target;
  plan.typical_exchange_seconds = c_typ;

  for (size_t i = 0; i < workers.size(); ++i) {
    const WorkerRates& w = workers[i];
    if (!(w.steps_per_second > 0)) continue;  // "no measurement yet"
    Budget& b = plan.budgets[i];
    b.basis = Budget::Basis::kAdaptive;
    b.link_known = w.bytes_per_second > 0 && options.exchange_bytes > 0;
    b.steps_per_second = w.steps_per_second;
    b.fastest_steps_per_second = fastest;
    b.exchange_seconds =
        b.link_known ? options.exchange_bytes / w.bytes_per_second : c_typ;
    b.target_seconds = target;
    b.raw_steps = std::round((target - b.exchange_seconds) * w.steps_per_second);
    b.local_steps = static_cast<uint32_t>(std::clamp(
        b.raw_steps, static_cast<double>(floor), static_cast<double>(nominal)));
  }
  return plan;
}

std::string EncodeBudgets(const std::vector<Budget>& budgets) {
  std::string out(budgets.size() * kBudgetRecordBytes, '\0');
  char* p = out.data();
  auto put = [&p](const auto& v) {
    std::memcpy(p, &v, sizeof(v));
    p += sizeof(v);
  };
  for (const Budget& b : budgets) {
    put(b.local_steps);
    put(static_cast<uint8_t>(b.basis));
    put(static_cast<uint8_t>(b.link_known));
    put(uint16_t{0});
    put(b.nominal_steps);
    put(b.min_steps);
    put(b.steps_per_second);
    put(b.fastest_steps_per_second);
    put(b.exchange_seconds);
    put(b.target_seconds);
    put(b.raw_steps);
  }
  return out;
}

absl::StatusOr<std::vector<Budget>> DecodeBudgets(absl::string_view blob) {
  if (blob.size() % kBudgetRecordBytes != 0)
    return absl::DataLossError(absl::StrCat(
        "rounds.budgets has ", blob.size(), " bytes, not a multiple of ",
        kBudgetRecordBytes));
  std::vector<Budget> budgets(blob.size() / kBudgetRecordBytes);
  const char* p = blob.data();
  auto get = [&p](auto& v) {
    std::memcpy(&v, p, sizeof(v));
    p += sizeof(v);
  };
  for (Budget& b : budgets) {
    uint8_t basis, link;
    uint16_t pad;
    get(b.local_steps);
    get(basis);
    get(link);
    get(pad);
    get(b.nominal_steps);
    get(b.min_steps);
    get(b.steps_per_second);
    get(b.fastest_steps_per_second);
    get(b.exchange_seconds);
    get(b.target_seconds);
    get(b.raw_steps);
    if (basis > static_cast<uint8_t>(Budget::Basis::kAdaptive))
      return absl::DataLossError("rounds.budgets holds an unknown basis");
    b.basis = static_cast<Budget::Basis>(basis);
    b.link_known = link != 0;
  }
  return budgets;
}

}  // namespace gasloc::coordinator
