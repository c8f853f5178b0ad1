// The local-step budget planner (algorithms.md section 5): per-worker inner
// steps H_i for one round from each worker's measured inner-step rate s_i
// and its expected exchange time c_i, so that partners reach the exchange
// at about the same moment.
//
//   c_i = this round's expected exchange seconds with its actual peers
//         (link_model.h ExpectedExchanges: the slower link of each edge);
//         without one, exchange_bytes / b_i (its own link only)
//   T   = max(min_i (H / s_i + c_i),        (the earliest a worker doing the
//                                            nominal H can finish)
//             max_i (H_min / s_i + c_i))    (the latest a worker doing the
//                                            floor H_min must finish)
//   H_i = clamp(round((T - c_i) * s_i), H_min, H_max)
//
// The second term of T matters when an exchange is longer than a whole
// round of compute (a link far slower than the others, or a worker far
// slower): that pair cannot finish before H_min / s_i + c_i whatever its
// budget, the rest of the cluster would wait for it, and so the others
// compute instead, up to the ceiling H_max (BudgetOptions::max_steps, by
// default kStretchFactor times H). Otherwise the ceiling is H. Measured on one slow link
// (docs/heterogeneity.md): with T from the first term alone and H_max = H,
// the fast workers waited half of every round.
//
// A worker whose c_i is not known (no link measured) is given c_typ, the
// median of the known ones. A worker with no measurement at all gets the
// nominal H ("no measurement yet"); the UNIFORM policy (DiLoCo and the
// other baselines) gives everyone the nominal H.
//
// Oscillation guard (with the bounded estimate moves of link_model.h): a
// change of H_i smaller than the dead band (dead_band_fraction of the
// nominal H, at least one step) is not made; the previous H_i is kept.
// Noise band, symmetric: a formula's H_i within the band of the nominal H,
// below it or above it (above only in a stretched round), is H; outside
// it the formula's H_i stands. The band is noise_band_fraction, or wider
// where the link alone would leave H_i within noise_band_fraction of H
// ((T - c_i) * s_fastest): then what the noise of the rate estimates
// cannot tell apart, noise_band_sigmas standard deviations of the
// difference between worker i's s_i and the fastest worker's,
//   band_i = clamp(sigmas * sqrt(share_i spread_i^2 +
//                                share_fastest spread_fastest^2),
//                  noise_band_fraction, max_noise_band_fraction)
// (spread = a worker's measured relative deviation of a round's rate from
// its s_i; share = how much of one round's variance its s_i, an EMA of
// rounds, still carries: 1 after one round, towards 0.18 as rounds are
// averaged in; while its or the fastest's spread is not measured yet,
// after one counted round, the band is the widest).
// Identical workers sharing a machine's cores measured single-round rates
// of 78-108 steps/s (the homogeneous netns sweep, seed 3); a fixed 10%
// band then let H_i of 67-71 for a uniform 80 through in 3.4% of rounds
// (early rounds, s_i from one or two rounds: the band is wide there).
// What bounds a partner's wait: a worker given H though truly slower
// makes its partner wait that share of a round, so the band must cover the
// noise of the estimates, not of one round (with one round's spread, 2
// sqrt(2) x 8.5% = 24% at +-12% shared-core noise: a worker 20% slower
// kept H and its partner waited 19% of every round). Once s_i has
// averaged its rounds the band is about noise_band_fraction, and that
// (plus the dead band) is what the planner makes a partner wait
// (budget_simulation_test.cc APartnersWaitIsBoundedByTheNoiseBand).
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
#include "coordinator/link_model.h"
#include "gasloc/v1/job.pb.h"

namespace gasloc::coordinator {

// What the coordinator knows about one worker's speed.
struct WorkerRates {
  // Inner steps per second (EMA); <= 0 = not measured yet.
  double steps_per_second = 0;
  // Link bandwidth from wire time, bytes per second (EMA); <= 0 = not
  // measured yet.
  double bytes_per_second = 0;
  // Relative standard deviation of one round's step rate about
  // steps_per_second (the noise band, header comment); < 0 = not measured
  // yet (the widest band).
  double step_rate_spread = 0;
  // Var(steps_per_second) / Var(one round's rate), in (0, 1]
  // (link_model.h UpdateStepRateEstimateShare); outside it: 1, an estimate
  // as noisy as one round.
  double estimate_share = 1;
};

// What the round itself brings to one worker's budget.
struct WorkerRound {
  // This round's expected exchange with its peers; seconds < 0 = not
  // planned from peers (then exchange_bytes / bytes_per_second).
  ExpectedExchange exchange;
  // H_i of the previous round (0 = none), for the dead band.
  uint32_t previous_steps = 0;
};

// The default ceiling of an adaptive H_i, as a multiple of the nominal H.
inline constexpr uint32_t kStretchFactor = 4;

struct BudgetOptions {
  v1::BudgetPolicy policy = v1::BUDGET_POLICY_ADAPTIVE;
  // Nominal H, the floor H_min and the ceiling H_max (0 or below H: H).
  uint32_t nominal_steps = 100;
  uint32_t min_steps = 10;
  uint32_t max_steps = 0;
  // Bytes one worker moves in its exchange (the wire size of the model);
  // used only for workers without an ExpectedExchange.
  double exchange_bytes = 0;
  // Changes of H_i within this fraction of the nominal H (at least one
  // step) are not made.
  double dead_band_fraction = 0.05;
  // A formula's H_i within band H of H (below, or above in a stretched
  // round) is H, band from the estimates' measured noise (header comment)
  // within these bounds.
  double noise_band_fraction = 0.10;
  double noise_band_sigmas = 2;
  double max_noise_band_fraction = 0.25;
};

// One worker's budget and the numbers behind it. The reason string is
// formatted on demand (Reason()), so planning 10,000 budgets formats none.
struct Budget {
  enum class Basis : uint8_t { kNoMeasurement, kUniform, kAdaptive };
  // kDeadBand: the formula's H_i was within the dead band of the previous
  // H_i, which was kept. kNoiseBand: it was within the noise band of the
  // nominal H (below, or above in a stretched round), which was given.
  enum class Guard : uint8_t { kNone, kDeadBand, kNoiseBand };
  uint32_t local_steps = 0;
  Basis basis = Basis::kNoMeasurement;
  // kAdaptive: the inputs of the formula.
  bool link_known = false;
  uint32_t nominal_steps = 0;
  uint32_t min_steps = 0;
  uint32_t max_steps = 0;  // H_max (0: a record from before it: H)
  // T was set by the floor term: an exchange that H_min cannot shorten.
  bool target_from_floor = false;
  double steps_per_second = 0;
  double fastest_steps_per_second = 0;
  double exchange_seconds = 0;  // c_i
  double target_seconds = 0;    // T
  double raw_steps = 0;         // (T - c_i) * s_i before clamping
  double bytes_per_second = 0;  // b_i (0 = not measured)
  // The peer whose edge bounds c_i (0 = none) and that edge's slower link.
  uint64_t bound_peer = 0;
  double bound_bytes_per_second = 0;
  uint32_t previous_steps = 0;  // H_i of the previous round (0 = none)
  Guard guard = Guard::kNone;
  // The noise band this worker's H_i was checked against, as a fraction
  // of H (0: a record from before it).
  double noise_band = 0;

  // E.g. "s_i=5 steps/s (0.50x fastest), c_i=1 s (bound by worker 3,
  // 12.5 MB/s), T=11 s: H_i=50"; "T=21 s (an exchange H_min cannot
  // shorten): H_i=205 (above H=100)".
  std::string Reason() const;
};

struct BudgetPlan {
  // One per input worker, same order.
  std::vector<Budget> budgets;
  // Target round time T and typical exchange time c_typ, seconds; 0 when
  // no worker has a measurement.
  double target_round_seconds = 0;
  double typical_exchange_seconds = 0;
  // T came from the floor term (header comment); then the worker that set
  // it is floor_bound_index (-1: none).
  bool target_from_floor = false;
  int64_t floor_bound_index = -1;
};

// `round` is empty (no schedule, no previous budgets) or one per worker.
BudgetPlan PlanBudgets(const std::vector<WorkerRates>& workers,
                       const std::vector<WorkerRound>& round,
                       const BudgetOptions& options);
inline BudgetPlan PlanBudgets(const std::vector<WorkerRates>& workers,
                              const BudgetOptions& options) {
  return PlanBudgets(workers, {}, options);
}

// Exponential moving average: the first sample (old <= 0) is taken as is.
double UpdateEma(double old_value, double sample, double weight);

// The binary form of a round's budgets as the store keeps them
// (docs/coordinator.md): the magic kBudgetFormatV3 then little-endian
// records of kBudgetRecordBytes; and back (DATA_LOSS on a malformed blob).
// Older blobs still decode: kBudgetFormatV2 with records of
// kBudgetRecordBytesV2 (no noise band), and blobs without a magic, the
// first format (records of kBudgetRecordBytesV1, without the fields from
// bytes_per_second on).
inline constexpr size_t kBudgetRecordBytesV1 = 56;
inline constexpr size_t kBudgetRecordBytesV2 = 88;
inline constexpr size_t kBudgetRecordBytes = 96;
inline constexpr char kBudgetFormatV2[] = "BGT2";
inline constexpr char kBudgetFormatV3[] = "BGT3";
std::string EncodeBudgets(const std::vector<Budget>& budgets);
absl::StatusOr<std::vector<Budget>> DecodeBudgets(absl::string_view blob);

}  // namespace gasloc::coordinator

#endif  // GASLOC_COORDINATOR_BUDGET_H_
