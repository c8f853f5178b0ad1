#include "bench/convergence_sim.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <numbers>
#include <optional>
#include <span>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "bench/consensus_stats.h"
#include "common/arena.h"
#include "common/job_spec.h"
#include "coordinator/budget.h"
#include "coordinator/link_model.h"
#include "coordinator/round_planner.h"
#include "coordinator/schedule.h"
#include "worker/round/inner_trainer.h"
#include "worker/round/outer_optimizer.h"
#include "worker/train/adamw.h"

namespace gasloc::bench {
namespace {

using coordinator::RoundSchedule;
using coordinator::SplitMix64;

// The job spec the simulated job runs: the algorithm, topology and budgets
// chosen, every other outer number the spec's default.
v1::JobSpec SpecFor(const SimOptions& o) {
  v1::JobSpec spec;
  spec.set_name("convergence-sim");
  spec.mutable_data()->set_corpus_path("/dev/null");
  spec.mutable_stop()->set_max_wall_seconds(
      static_cast<uint64_t>(std::max(1.0, std::ceil(o.seconds))));
  spec.mutable_stop()->set_max_rounds(o.max_rounds);
  spec.mutable_training()->set_seed(o.seed);
  v1::OuterSpec* outer = spec.mutable_outer();
  switch (o.algorithm) {
    case SimAlgorithm::kGasloc:
      outer->set_algorithm(v1::ALGORITHM_GASLOC);
      break;
    case SimAlgorithm::kGaslocTwoPeer:
      outer->set_algorithm(v1::ALGORITHM_GASLOC);
      outer->set_topology(v1::TOPOLOGY_RANDOM_TWO_PEER);
      break;
    case SimAlgorithm::kDiloco:
    case SimAlgorithm::kDilocoEager:
      outer->set_algorithm(v1::ALGORITHM_DILOCO);
      break;
    case SimAlgorithm::kDpsgd:
      outer->set_algorithm(v1::ALGORITHM_DPSGD);
      break;
    case SimAlgorithm::kDpsgdTwoPeer:
      outer->set_algorithm(v1::ALGORITHM_DPSGD);
      outer->set_topology(v1::TOPOLOGY_RANDOM_TWO_PEER);
      break;
  }
  const bool diloco = o.algorithm == SimAlgorithm::kDiloco ||
                      o.algorithm == SimAlgorithm::kDilocoEager;
  if (o.outer_lr >= 0) {
    if (diloco) outer->set_lr(static_cast<float>(o.outer_lr));
    else outer->set_eta(static_cast<float>(o.outer_lr));
  }
  if (o.outer_momentum >= 0) {
    if (diloco) outer->set_mu(static_cast<float>(o.outer_momentum));
    else outer->set_gamma(static_cast<float>(o.outer_momentum));
  }
  if (o.uniform_budgets)
    outer->set_budget_policy(v1::BUDGET_POLICY_UNIFORM);
  if (o.local_steps > 0) outer->set_local_steps(o.local_steps);
  if (o.min_local_steps > 0) outer->set_min_local_steps(o.min_local_steps);
  return ApplyJobSpecDefaults(spec);
}

// Standard normals from splitmix64 (Box-Muller), the same on every build.
double NextNormal(SplitMix64& rng) {
  const double u1 = (static_cast<double>(rng.Next() >> 11) + 1) * 0x1p-53;
  const double u2 = static_cast<double>(rng.Next() >> 11) * 0x1p-53;
  return std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
}

// The workers' quadratics (header comment). Gradient noise comes from a
// table of standard normals read from a random offset each step: one
// generator call a step instead of d.
class Objective {
 public:
  Objective(const SimOptions& o, size_t n) : d_(o.dimension), noise_(o.noise) {
    SplitMix64 rng(o.seed * 0x9e3779b97f4a7c15ULL + 17);
    for (uint32_t k = 0; k < d_; ++k)
      curvature_.push_back(static_cast<float>(std::pow(
          o.curvature_min, d_ > 1 ? static_cast<double>(k) / (d_ - 1) : 0.0)));
    std::vector<double> optimum(d_), mean(d_, 0);
    for (double& c : optimum) c = NextNormal(rng);
    centre_.resize(n);
    for (auto& c : centre_) {
      for (uint32_t k = 0; k < d_; ++k) {
        c.push_back(
            static_cast<float>(optimum[k] + o.heterogeneity * NextNormal(rng)));
        mean[k] += c.back() / static_cast<double>(n);
      }
    }
    mean_centre_.assign(mean.begin(), mean.end());
    for (size_t t = 0; t < kTable; ++t)
      table_.push_back(static_cast<float>(NextNormal(rng)));
  }

  // A stochastic gradient of worker i at x into g.
  void Gradient(size_t i, std::span<const float> x, SplitMix64& rng,
                std::span<float> g) const {
    const size_t offset = rng.Below(kTable);
    const std::vector<float>& c = centre_[i];
    for (uint32_t k = 0; k < d_; ++k)
      g[k] = curvature_[k] * (x[k] - c[k]) +
             noise_ * table_[(offset + k) % kTable];
  }

  // F(x) - F(cbar).
  double Excess(std::span<const float> x) const {
    double sum = 0;
    for (uint32_t k = 0; k < d_; ++k) {
      const double e = static_cast<double>(x[k]) - mean_centre_[k];
      sum += curvature_[k] * e * e;
    }
    return 0.5 * sum;
  }

 private:
  static constexpr size_t kTable = 1 << 16;
  uint32_t d_;
  float noise_;
  std::vector<float> curvature_, table_, mean_centre_;
  std::vector<std::vector<float>> centre_;
};

// One virtual worker's buffers (the arena layout of the real ones).
struct Replica {
  explicit Replica(const std::shared_ptr<const ArenaLayout>& layout)
      : theta(layout),
        start(layout),
        sent(layout),
        momentum(layout),
        momentum_next(layout),
        grad(layout),
        others(layout) {}
  FloatArena theta, start, sent, momentum, momentum_next, grad;
  FloatArena others;  // diloco-eager: the others' share of the last mean
  std::unique_ptr<AdamW> adamw;
  AdamWOptions schedule;  // SGD's learning-rate schedule
  SplitMix64 rng{0};
  double clock = 0;    // virtual seconds: when its last round ended
  double compute = 0;  // virtual seconds spent on inner steps
  uint32_t previous_steps = 0;
};

// The exchange of one algorithm family: its timing and its update, chosen
// once per run.
class OuterRule {
 public:
  virtual ~OuterRule() = default;
  // When each worker leaves the exchange, from when it arrived.
  virtual std::vector<double> Leave(
      const RoundSchedule& schedule,
      const std::vector<double>& arrive) const = 0;
  // The exchange and outer update; theta after the inner phase on entry.
  virtual void Update(const RoundSchedule& schedule,
                      std::vector<Replica>& replicas) const = 0;
};

// GASLoC and D-PSGD: GossipAlgorithm::Exchange's calls for the
// PSEUDO_GRADIENT placement (D-PSGD's gamma 0 makes the placements equal).
class GossipRule final : public OuterRule {
 public:
  GossipRule(const v1::JobSpec& spec, const SimOptions& o, uint32_t n)
      : spec_(spec),
        options_(o),
        weights_(coordinator::RoundWeights(spec, n)) {}

  std::vector<double> Leave(const RoundSchedule& s,
                            const std::vector<double>& arrive) const override {
    const auto& w = options_.workers;
    const double m = options_.model_bytes;
    std::vector<double> leave(arrive);
    for (uint32_t i = 0; i < s.n; ++i) {
      for (uint32_t j : s.PeersOf(i)) {
        const double wire = std::max(s.Degree(i) * m / w[i].bytes_per_second,
                                     s.Degree(j) * m / w[j].bytes_per_second);
        const double edge =
            wire + 2 * (w[i].latency_seconds + w[j].latency_seconds);
        leave[i] = std::max(leave[i], std::max(arrive[i], arrive[j]) + edge);
      }
    }
    return leave;
  }

  void Update(const RoundSchedule& s,
              std::vector<Replica>& replicas) const override {
    const auto& outer = spec_.outer();
    for (Replica& r : replicas) {
      PseudoGradient(r.start.flat(), r.theta.flat(), r.sent.flat());
      NesterovOuterStep(r.start.flat(), r.sent.flat(), outer.eta(),
                        outer.gamma(), r.momentum.flat(),
                        r.momentum_next.flat(), r.sent.flat());
    }
    std::vector<GossipNeighbor> neighbors;
    for (uint32_t i = 0; i < s.n; ++i) {
      neighbors.clear();
      for (uint32_t j : s.PeersOf(i))
        neighbors.push_back({.y = replicas[j].sent.flat(),
                             .weight = weights_.PeerWeight(s, i, j),
                             .own = {}});
      Replica& r = replicas[i];
      GossipOuterStep(r.sent.flat(), neighbors, weights_.alpha, 0.0f,
                      r.sent.flat(), r.theta.flat());
    }
    for (Replica& r : replicas) std::swap(r.momentum, r.momentum_next);
  }

 private:
  const v1::JobSpec& spec_;
  const SimOptions& options_;
  coordinator::EdgeWeights weights_;
};

// The ring all-reduce's mean of every replica's `sent`, taken directly in
// double precision (header comment).
std::vector<float> MeanOfSent(const std::vector<Replica>& replicas) {
  const size_t size = replicas[0].sent.size();
  std::vector<double> sum(size, 0);
  for (const Replica& r : replicas)
    for (size_t k = 0; k < size; ++k) sum[k] += r.sent.flat()[k];
  std::vector<float> mean(size);
  for (size_t k = 0; k < size; ++k)
    mean[k] = static_cast<float>(sum[k] / static_cast<double>(replicas.size()));
  return mean;
}

// DiLoCo: PseudoGradientRing::Exchange's calls; the ring's mean is taken
// directly (header comment).
class RingRule final : public OuterRule {
 public:
  RingRule(const v1::JobSpec& spec, const SimOptions& o)
      : spec_(spec), options_(o) {}

  std::vector<double> Leave(const RoundSchedule& s,
                            const std::vector<double>& arrive) const override {
    const auto& w = options_.workers;
    const double last = *std::max_element(arrive.begin(), arrive.end());
    if (s.n < 2) return arrive;
    double slowest = w[0].bytes_per_second, latency = 0;
    for (uint32_t i = 0; i < s.n; ++i) {
      slowest = std::min(slowest, w[i].bytes_per_second);
      latency = std::max(
          latency, w[i].latency_seconds + w[(i + 1) % s.n].latency_seconds);
    }
    const double step = options_.model_bytes / s.n / slowest + latency;
    return std::vector<double>(s.n, last + 2.0 * (s.n - 1) * step);
  }

  void Update(const RoundSchedule& /*s*/,
              std::vector<Replica>& replicas) const override {
    const auto& outer = spec_.outer();
    for (Replica& r : replicas)
      PseudoGradient(r.start.flat(), r.theta.flat(), r.sent.flat());
    const std::vector<float> mean = MeanOfSent(replicas);
    for (Replica& r : replicas)
      NesterovOuterStep(r.start.flat(), mean, outer.lr(), outer.mu(),
                        r.momentum.flat(), r.momentum.flat(), r.theta.flat());
  }

 private:
  const v1::JobSpec& spec_;
  const SimOptions& options_;
};

// DiLoCo's eager-updates rule (EagerPseudoGradientRing's update, without
// its overlap: the ring's time is RingRule's): each worker's outer step
// from its own round start with its own fresh pseudo-gradient / n plus
// the others' share of the previous round's mean (EagerOuterStep), then
// the mean of this round's pseudo-gradients, taken directly, leaves the
// others' share for the next round (OthersShare).
class EagerRingRule final : public OuterRule {
 public:
  EagerRingRule(const v1::JobSpec& spec, const SimOptions& o)
      : spec_(spec), ring_(spec, o) {}

  std::vector<double> Leave(const RoundSchedule& s,
                            const std::vector<double>& arrive) const override {
    return ring_.Leave(s, arrive);
  }

  void Update(const RoundSchedule& /*s*/,
              std::vector<Replica>& replicas) const override {
    const auto& outer = spec_.outer();
    const int n = static_cast<int>(replicas.size());
    for (Replica& r : replicas)
      EagerOuterStep(r.start.flat(), r.theta.flat(), r.others.flat(), n,
                     outer.lr(), outer.mu(), r.momentum.flat(),
                     r.momentum_next.flat(), r.sent.flat(), r.theta.flat());
    const std::vector<float> mean = MeanOfSent(replicas);
    for (Replica& r : replicas) {
      OthersShare(mean, r.sent.flat(), n, r.others.flat());
      std::swap(r.momentum, r.momentum_next);
    }
  }

 private:
  const v1::JobSpec& spec_;
  RingRule ring_;
};

SimPoint Evaluate(const Objective& objective,
                  const std::vector<Replica>& replicas) {
  std::vector<std::span<const float>> models;
  for (const Replica& r : replicas) models.push_back(r.theta.flat());
  std::vector<float> average;
  const ConsensusStats stats = ComputeConsensus(models, &average);
  SimPoint p;
  p.average_loss = objective.Excess(average);
  for (const Replica& r : replicas)
    p.mean_worker_loss += objective.Excess(r.theta.flat()) / replicas.size();
  p.consensus_distance = stats.consensus_distance;
  return p;
}

// The round's H_i inner steps of worker i, each at the learning rate of
// its place on the job's schedule (PlannedSchedulePoint, LearningRate: the
// cosine by the round's progress through the horizon when the assignment
// carries one, else the constant inner_lr).
void Stamp(uint64_t rounds, double now, uint64_t steps, const SimOptions& o,
           SimPoint& p) {
  p.round = rounds;
  p.seconds = now;
  p.steps = steps;
  p.tokens = steps * o.tokens_per_step;
}

absl::Status InnerSteps(const Objective& objective, size_t i,
                        const v1::Assignment& assignment, uint32_t nominal,
                        const SimOptions& o, Replica& r) {
  for (uint32_t h = 0; h < assignment.local_steps(); ++h) {
    objective.Gradient(i, r.theta.flat(), r.rng, r.grad.flat());
    const SchedulePoint point = PlannedSchedulePoint(assignment, nominal, h);
    if (r.adamw != nullptr) {
      r.adamw->set_schedule_step(point.step);
      if (point.progress) r.adamw->set_schedule_progress(*point.progress);
      auto stepped = r.adamw->Step(&r.theta, r.grad);
      if (!stepped.ok()) return stepped.status();
      continue;
    }
    const float lr = point.progress
                         ? LearningRate(r.schedule, point.step, *point.progress)
                         : LearningRate(r.schedule, point.step);
    float* x = r.theta.data();
    const float* g = r.grad.data();
    for (uint32_t k = 0; k < o.dimension; ++k) x[k] -= lr * g[k];
  }
  return absl::OkStatus();
}

absl::Status CheckOptions(const SimOptions& o) {
  if (o.workers.empty() || o.dimension == 0 || o.seconds <= 0 ||
      o.eval_seconds <= 0 || o.model_bytes <= 0)
    return absl::InvalidArgumentError(
        "need workers, dimension > 0, seconds > 0, eval_seconds > 0 and "
        "model_bytes > 0");
  for (const SimWorker& w : o.workers)
    if (w.steps_per_second <= 0 || w.bytes_per_second <= 0 ||
        w.latency_seconds < 0)
      return absl::InvalidArgumentError(
          "every worker needs steps_per_second > 0, bytes_per_second > 0 and "
          "latency_seconds >= 0");
  const bool dpsgd = o.algorithm == SimAlgorithm::kDpsgd ||
                     o.algorithm == SimAlgorithm::kDpsgdTwoPeer;
  if (dpsgd && (o.outer_lr >= 0 || o.outer_momentum >= 0))
    return absl::InvalidArgumentError(
        "D-PSGD has no outer rate or momentum to set (eta 1, gamma 0 by "
        "definition): tune its inner_lr");
  return absl::OkStatus();
}

}  // namespace

const char* SimAlgorithmName(SimAlgorithm algorithm) {
  switch (algorithm) {
    case SimAlgorithm::kGasloc:
      return "gasloc";
    case SimAlgorithm::kGaslocTwoPeer:
      return "gasloc-2peer";
    case SimAlgorithm::kDiloco:
      return "diloco";
    case SimAlgorithm::kDpsgd:
      return "dpsgd";
    case SimAlgorithm::kDpsgdTwoPeer:
      return "dpsgd-2peer";
    case SimAlgorithm::kDilocoEager:
      return "diloco-eager";
  }
  return "?";
}

absl::StatusOr<SimAlgorithm> ParseSimAlgorithm(const std::string& name) {
  for (SimAlgorithm a : {SimAlgorithm::kGasloc, SimAlgorithm::kGaslocTwoPeer,
                         SimAlgorithm::kDiloco, SimAlgorithm::kDpsgd,
                         SimAlgorithm::kDpsgdTwoPeer, SimAlgorithm::kDilocoEager})
    if (name == SimAlgorithmName(a)) return a;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown algorithm \"", name,
      "\" (gasloc, gasloc-2peer, diloco, dpsgd, dpsgd-2peer, diloco-eager)"));
}

absl::StatusOr<SimResult> RunConvergenceSim(const SimOptions& o) {
  if (absl::Status s = CheckOptions(o); !s.ok()) return s;
  const v1::JobSpec spec = SpecFor(o);
  if (absl::Status s = ValidateJobSpec(spec); !s.ok()) return s;
  const uint32_t n = static_cast<uint32_t>(o.workers.size());
  coordinator::ExchangeVolume volume = coordinator::ExchangeVolumeOf(spec);
  volume.model_bytes = o.model_bytes;
  const coordinator::BudgetOptions budget_options =
      coordinator::BudgetOptionsFor(spec, n);
  std::vector<coordinator::WorkerRates> rates;
  std::vector<double> links;
  for (const SimWorker& w : o.workers) {
    rates.push_back({.steps_per_second = w.steps_per_second,
                     .bytes_per_second = w.bytes_per_second,
                     .step_rate_spread = 0,
                     .estimate_share = 1});
    links.push_back(w.bytes_per_second);
  }
  std::unique_ptr<OuterRule> rule;
  if (IsGossipAlgorithm(spec.outer().algorithm())) {
    rule = std::make_unique<GossipRule>(spec, o, n);
  } else if (o.algorithm == SimAlgorithm::kDilocoEager) {
    rule = std::make_unique<EagerRingRule>(spec, o);
  } else {
    rule = std::make_unique<RingRule>(spec, o);
  }

  const Objective objective(o, n);
  auto layout = std::make_shared<const ArenaLayout>(
      std::vector<TensorSpec>{{.name = "x", .shape = {o.dimension}}});
  std::vector<Replica> replicas;
  replicas.reserve(n);
  for (uint32_t i = 0; i < n; ++i) {
    replicas.emplace_back(layout);  // theta_0 = 0 on every worker
    Replica& r = replicas.back();
    r.rng = SplitMix64(o.seed * 1000003 + i + 1);
    r.schedule = {.lr = static_cast<float>(o.inner_lr),
                  .warmup_steps = 0,
                  .weight_decay = 0,
                  .grad_clip = 0};
    if (o.adamw) r.adamw = std::make_unique<AdamW>(layout, r.schedule);
  }

  SimResult result;
  result.points.push_back(Evaluate(objective, replicas));
  uint64_t steps = 0, worker_rounds = 0;
  double next_eval = o.eval_seconds, now = 0;
  std::vector<double> arrive(n);
  std::vector<coordinator::WorkerRound> this_round(n);
  const uint32_t nominal = spec.outer().local_steps();
  for (uint64_t round = 0;; ++round) {
    // The round is planned when its first worker asks for it.
    double planned_at = replicas[0].clock;
    for (const Replica& r : replicas)
      planned_at = std::min(planned_at, r.clock);
    if (coordinator::StopReason(spec, round, 0, absl::UnixEpoch(),
                                absl::UnixEpoch() + absl::Seconds(planned_at)))
      break;
    const RoundSchedule schedule =
        coordinator::PlanSchedule(coordinator::RoundKey(spec, round, 1), n);
    const std::vector<coordinator::ExpectedExchange> expected =
        coordinator::ExpectedExchanges(schedule, volume, links);
    for (uint32_t i = 0; i < n; ++i)
      this_round[i] = {.exchange = expected[i],
                       .previous_steps = replicas[i].previous_steps};
    const coordinator::BudgetPlan plan =
        coordinator::PlanBudgets(rates, this_round, budget_options);
    std::optional<coordinator::ScheduleProgress> progress;
    if (o.anneal)
      progress = coordinator::PlanScheduleProgress(
          spec, {.rounds_run = round,
                 .seconds = planned_at,
                 .round_seconds = coordinator::ExpectedRoundSeconds(
                     plan.target_round_seconds, round, planned_at)});
    v1::Assignment assignment;
    assignment.set_round(round);
    if (progress) {
      assignment.set_has_schedule(true);
      assignment.set_schedule_progress_begin(progress->begin);
      assignment.set_schedule_progress_end(progress->end);
    }
    for (uint32_t i = 0; i < n; ++i) {
      Replica& r = replicas[i];
      const uint32_t h = plan.budgets[i].local_steps;
      assignment.set_local_steps(h);
      r.start.CopyFrom(r.theta);
      if (absl::Status s = InnerSteps(objective, i, assignment, nominal, o, r);
          !s.ok())
        return s;
      const double seconds = h / o.workers[i].steps_per_second;
      arrive[i] = r.clock + seconds;
      r.compute += seconds;
      r.previous_steps = h;
      steps += h;
    }
    worker_rounds += n;
    const std::vector<double> leave = rule->Leave(schedule, arrive);
    rule->Update(schedule, replicas);
    for (uint32_t i = 0; i < n; ++i) replicas[i].clock = leave[i];
    now = std::max(now, *std::max_element(leave.begin(), leave.end()));
    result.rounds = round + 1;
    if (now < next_eval) continue;
    result.points.push_back(Evaluate(objective, replicas));
    next_eval = (std::floor(now / o.eval_seconds) + 1) * o.eval_seconds;
    Stamp(result.rounds, now, steps, o, result.points.back());
  }
  if (result.points.back().round != result.rounds) {
    result.points.push_back(Evaluate(objective, replicas));
    Stamp(result.rounds, now, steps, o, result.points.back());
  }
  result.mean_round_seconds = result.rounds > 0 ? now / result.rounds : 0;
  result.mean_local_steps =
      worker_rounds > 0 ? static_cast<double>(steps) / worker_rounds : 0;
  double busy = 0, total = 0;
  for (const Replica& r : replicas) {
    busy += r.compute;
    total += r.clock;
  }
  result.idle_fraction = total > 0 ? 1 - busy / total : 0;
  if (o.keep_models)
    for (const Replica& r : replicas)
      result.final_models.emplace_back(r.theta.flat().begin(),
                                       r.theta.flat().end());
  return result;
}

double SecondsToLoss(const std::vector<SimPoint>& points, double target,
                     double SimPoint::*loss) {
  for (size_t k = 0; k < points.size(); ++k) {
    const double b = points[k].*loss;
    // Within rounding of the target counts (the loss at DiLoCo's average
    // and its workers' mean differ in the last bits).
    if (b > target * (1 + 1e-9)) continue;
    if (k == 0) return points[0].seconds;
    const double a = points[k - 1].*loss;
    // Linear in log loss between the two points (in loss at a zero).
    double f = 1;
    if (b <= 0 || target <= 0) {
      f = (a - target) / (a - b);
    } else if (a > b) {
      f = std::log(a / target) / std::log(a / b);
    }
    return points[k - 1].seconds +
           f * (points[k].seconds - points[k - 1].seconds);
  }
  return -1;
}

}  // namespace gasloc::bench
