#include "coordinator/budget.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"

namespace gasloc::coordinator {

double UpdateEma(double old_value, double sample, double weight) {
  if (!(old_value > 0)) return sample;
  return (1 - weight) * old_value + weight * sample;
}

BudgetPlan PlanBudgets(const std::vector<WorkerRates>& workers,
                       const BudgetOptions& options) {
  BudgetPlan plan;
  const uint32_t nominal = options.nominal_steps;
  const uint32_t floor = std::min(options.min_steps, nominal);
  plan.budgets.resize(workers.size());
  if (options.policy != v1::BUDGET_POLICY_ADAPTIVE) {
    const std::string reason =
        absl::StrFormat("uniform policy: nominal H=%u", nominal);
    for (Budget& b : plan.budgets) b = {nominal, reason};
    return plan;
  }

  double fastest = 0;
  std::vector<double> exchange_times;
  exchange_times.reserve(workers.size());
  for (const WorkerRates& w : workers) {
    fastest = std::max(fastest, w.steps_per_second);
    if (w.bytes_per_second > 0 && options.exchange_bytes > 0)
      exchange_times.push_back(options.exchange_bytes / w.bytes_per_second);
  }
  double c_typ = 0;
  if (!exchange_times.empty()) {
    auto mid = exchange_times.begin() + exchange_times.size() / 2;
    std::nth_element(exchange_times.begin(), mid, exchange_times.end());
    c_typ = *mid;
  }
  if (fastest <= 0) {
    for (Budget& b : plan.budgets) b = {nominal, "no measurement yet"};
    return plan;
  }
  const double target = nominal / fastest + c_typ;
  plan.target_round_seconds = target;
  plan.typical_exchange_seconds = c_typ;

  for (size_t i = 0; i < workers.size(); ++i) {
    const WorkerRates& w = workers[i];
    Budget& b = plan.budgets[i];
    if (!(w.steps_per_second > 0)) {
      b = {nominal, "no measurement yet"};
      continue;
    }
    const bool link_known = w.bytes_per_second > 0 && options.exchange_bytes > 0;
    const double c_i =
        link_known ? options.exchange_bytes / w.bytes_per_second : c_typ;
    const double raw = std::round((target - c_i) * w.steps_per_second);
    const double clamped =
        std::clamp(raw, static_cast<double>(floor), static_cast<double>(nominal));
    b.local_steps = static_cast<uint32_t>(clamped);
    const char* bound = raw <= floor     ? " (floor H_min)"
                        : raw >= nominal ? " (ceiling H)"
                                         : "";
    b.reason = absl::StrFormat(
        "s_i=%.3g steps/s (%.2fx fastest), c_i=%.3g s%s, T=%.3g s: H_i=%u%s",
        w.steps_per_second, w.steps_per_second / fastest, c_i,
        link_known ? "" : " (typical; link not measured)", target,
        b.local_steps, bound);
  }
  return plan;
}

}  // namespace gasloc::coordinator
