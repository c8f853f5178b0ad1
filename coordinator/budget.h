// The local-step budget planner (algorithms.md section 5): per-worker inner
// steps H_i for one round from each worker's measured inner-step rate s_i
// and link bandwidth b_i, so that partners reach the exchange at about the
// same moment.
//
//   T   = H / max_i s_i + c_typ          (fastest worker doing the nominal H)
//   c_i = exchange_bytes / b_i           (its own exchange time)
//   H_i = clamp(round((T - c_i) * s_i), H_min, H)
//
// c_typ is the median c_i over the workers whose bandwidth is known; a
// worker whose bandwidth is not known yet is assumed to have c_i = c_typ.
// A worker with no measurement at all gets the nominal H ("no measurement
// yet"); the UNIFORM policy (DiLoCo and the other baselines) gives everyone
// the nominal H.
//
// Pure functions of their inputs; thread-safe.
#ifndef GASLOC_COORDINATOR_BUDGET_H_
#define GASLOC_COORDINATOR_BUDGET_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "gasloc/v1/job.pb.h"

namespace gasloc::coordinator {

// What the coordinator knows about one worker's speed.
struct WorkerRates {
  // Inner steps per second (EMA); <= 0 = not measured yet.
  double steps_per_second = 0;
  // Link bandwidth, bytes per second (EMA); <= 0 = not measured yet.
  double bytes_per_second = 0;
};

struct BudgetOptions {
  v1::BudgetPolicy policy = v1::BUDGET_POLICY_ADAPTIVE;
  // Nominal H (the ceiling) and H_min (the floor).
  uint32_t nominal_steps = 100;
  uint32_t min_steps = 10;
  // Bytes one worker moves in its exchange (the wire size of the model).
  double exchange_bytes = 0;
};

// One worker's budget and the numbers behind it. The reason string is
// formatted on demand (Reason()), so planning 10,000 budgets formats none.
struct Budget {
  enum class Basis : uint8_t { kNoMeasurement, kUniform, kAdaptive };
  uint32_t local_steps = 0;
  Basis basis = Basis::kNoMeasurement;
  // kAdaptive: the inputs of the formula.
  bool link_known = false;
  uint32_t nominal_steps = 0;
  uint32_t min_steps = 0;
  double steps_per_second = 0;
  double fastest_steps_per_second = 0;
  double exchange_seconds = 0;  // c_i
  double target_seconds = 0;    // T
  double raw_steps = 0;         // (T - c_i) * s_i before clamping

  // E.g. "s_i=5 steps/s (0.50x fastest), c_i=1 s, T=11 s: H_i=50".
  std::string Reason() const;
};

struct BudgetPlan {
  // One per input worker, same order.
  std::vector<Budget> budgets;
  // Target round time T and typical exchange time c_typ, seconds; 0 when
  // no worker has a measurement.
  double target_round_seconds = 0;
  double typical_exchange_seconds = 0;
};

BudgetPlan PlanBudgets(const std::vector<WorkerRates>& workers,
                       const BudgetOptions& options);

// Exponential moving average: the first sample (old <= 0) is taken as is.
double UpdateEma(double old_value, double sample, double weight);

// The binary form of a round's budgets as the store keeps them
// (little-endian records of kBudgetRecordBytes, docs/coordinator.md), and
// back (DATA_LOSS on a malformed blob).
inline constexpr size_t kBudgetRecordBytes = 56;
std::string EncodeBudgets(const std::vector<Budget>& budgets);
absl::StatusOr<std::vector<Budget>> DecodeBudgets(absl::string_view blob);

}  // namespace gasloc::coordinator

#endif  // GASLOC_COORDINATOR_BUDGET_H_
