// A convergence simulator (issue 38 item 2): n virtual workers of one
// job in one process on a virtual clock, each with a cheap stand-in
// objective, trained by the project's outer-update code.
//
// Real code exercised, unchanged, every round:
//   coordinator  PlanSchedule + RoundKey (the round's pairing: one random
//                matching, two, or the complete graph), RoundWeights /
//                EdgeWeights::PeerWeight (alpha, lambda_ij),
//                ExpectedExchanges + PlanBudgets + BudgetOptionsFor (each
//                worker's H_i; ADAPTIVE for GASLoC, UNIFORM otherwise),
//                ExchangeVolumeOf (gossip or ring all-reduce),
//                StopReason (max_rounds, max_wall_seconds; checked when a
//                round's first worker asks for it), PlanScheduleProgress +
//                ExpectedRoundSeconds (the round's place on the job's
//                learning-rate horizon)
//   worker       PseudoGradient, NesterovOuterStep, GossipOuterStep
//                (outer_optimizer.h), in the order GossipAlgorithm::Exchange
//                and PseudoGradientRing::Exchange call them for the
//                default PSEUDO_GRADIENT placement; PlannedSchedulePoint
//                + LearningRate (each inner step's rate: the cosine by
//                the horizon's progress); AdamW::Step (--inner=adamw)
//   common       ApplyJobSpecDefaults and ValidateJobSpec (every outer
//                hyperparameter is the job spec's default)
// Modelled, not the real code:
//   - the transport: the real classes block on a PeerTransport with real
//     deadlines, so the simulator hands each peer's gossiped point over
//     directly (every edge succeeds) and averages the ring's
//     pseudo-gradients in double precision (what RingAllReduceMean
//     computes, up to float rounding, with the same result on every
//     replica);
//   - time: worker i reaches its exchange H_i / s_i after it finished its
//     previous round; a gossip edge starts when both ends are there and
//     takes max(d_i M / b_i, d_j M / b_j) plus the latency of both links,
//     twice (the model, then the edge confirmation); a worker with two
//     peers waits for both; a ring all-reduce starts when the last member
//     arrives and takes 2 (n - 1) steps of M / n bytes over the slowest
//     link plus the slowest pair's latency each; everyone leaves it
//     together. No overlap (outer.overlap_exchange), no failures, no
//     churn; the planner is given the scenario's true s_i and b_i, as if
//     its estimates had converged (link_model.h's estimation is not run);
//   - the objective: worker i minimises the noisy quadratic
//     f_i(x) = 1/2 sum_k a_k (x_k - c_ik)^2 with a_k log-spaced in
//     [curvature_min, 1], centre c_i = c* + heterogeneity * xi_i
//     (xi_i ~ N(0, I), per worker) and a stochastic gradient
//     a (x - c_i) + noise * N(0, I). The global objective is the mean of
//     the f_i, minimised at cbar = mean_i c_i; every loss reported is the
//     excess F(x) - F(cbar) = 1/2 sum_k a_k (x_k - cbar_k)^2.
//
// Thread safety: RunConvergenceSim is a pure function of its options;
// concurrent calls share nothing.
#ifndef GASLOC_BENCH_CONVERGENCE_SIM_H_
#define GASLOC_BENCH_CONVERGENCE_SIM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gasloc::bench {

enum class SimAlgorithm {
  kGasloc,
  kGaslocTwoPeer,
  kDiloco,
  kDpsgd,
  kDpsgdTwoPeer,
  kDilocoEager,
};

// "gasloc", "gasloc-2peer", "diloco", "dpsgd", "dpsgd-2peer" (two random
// matchings a round: at 4 workers a ring, redrawn every round),
// "diloco-eager" (DiLoCo's eager-updates rule, EagerOuterStep: the
// worker's own fresh pseudo-gradient in place of its share of the mean,
// the others' from the round before; the rule alone, without the
// overlapped exchange it is meant for: the ring still blocks).
const char* SimAlgorithmName(SimAlgorithm algorithm);
absl::StatusOr<SimAlgorithm> ParseSimAlgorithm(const std::string& name);

struct SimWorker {
  double steps_per_second = 100;
  double bytes_per_second = 3e6;
  double latency_seconds = 0;  // one way, this worker's link
};

struct SimOptions {
  SimAlgorithm algorithm = SimAlgorithm::kGasloc;
  std::vector<SimWorker> workers;
  uint64_t seed = 1;
  // Wire size of one model (M), bytes.
  double model_bytes = 550e3;
  // Nominal H and H_min (0: the job spec's defaults); D-PSGD always 1.
  uint32_t local_steps = 80;
  uint32_t min_local_steps = 0;
  // The job's stop limits (stop.max_wall_seconds in virtual seconds,
  // rounded up; stop.max_rounds, 0 = none). The default STOP horizon
  // anneals the inner rate by whichever is nearer.
  double seconds = 240;
  uint64_t max_rounds = 0;
  // An evaluation point at the first round end past each multiple.
  double eval_seconds = 5;
  // The stand-in objective (header comment).
  uint32_t dimension = 256;
  double curvature_min = 0.1;
  double heterogeneity = 0.1;
  double noise = 0.5;
  // Inner optimiser: plain SGD at inner_lr, or the project's AdamW at
  // inner_lr (no warmup, weight decay or clipping). With anneal, the rate
  // follows the job's horizon (cosine to 10% of inner_lr by the stop
  // limit, as a real job anneals); without, it stays inner_lr.
  bool adamw = false;
  double inner_lr = 0.05;
  bool anneal = true;
  // The outer step's rate and momentum in place of the job spec's
  // defaults (< 0: the default): GASLoC's eta and gamma, DiLoCo's lr and
  // mu. D-PSGD has none (eta 1, gamma 0 by definition): refused there.
  double outer_lr = -1;
  double outer_momentum = -1;
  // Every worker gets the nominal H (BUDGET_POLICY_UNIFORM) whatever the
  // algorithm's default: equal tokens for a comparison at equal steps.
  bool uniform_budgets = false;
  uint32_t tokens_per_step = 512;
  // Keep every worker's final parameters in SimResult::final_models.
  bool keep_models = false;
};

// One evaluation point.
struct SimPoint {
  uint64_t round = 0;             // rounds completed
  double seconds = 0;             // virtual: when the last worker finished them
  uint64_t steps = 0;             // inner steps, all workers
  uint64_t tokens = 0;            // steps x tokens_per_step
  double average_loss = 0;        // excess loss at the workers' average
  double mean_worker_loss = 0;    // mean over workers of their excess loss
  double consensus_distance = 0;  // (1/n) sum_i ||x_i - xbar||^2
};

struct SimResult {
  std::vector<SimPoint> points;  // the first at round 0, time 0
  uint64_t rounds = 0;
  double mean_round_seconds = 0;  // virtual seconds / rounds
  double mean_local_steps = 0;    // over workers and rounds
  // Share of the virtual time the workers spent waiting or on the wire,
  // not computing.
  double idle_fraction = 0;
  std::vector<std::vector<float>> final_models;  // keep_models only
};

absl::StatusOr<SimResult> RunConvergenceSim(const SimOptions& options);

// The first virtual second at which `points` reach `loss` <= target
// (linear in log loss between points); < 0 = never. mean_worker_loss is
// what a real job reports (the mean of its members' bpb).
double SecondsToLoss(const std::vector<SimPoint>& points, double target,
                     double SimPoint::*loss = &SimPoint::average_loss);

}  // namespace gasloc::bench

#endif  // GASLOC_BENCH_CONVERGENCE_SIM_H_
