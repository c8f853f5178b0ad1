// gasloc-bench simulate's simulator (bench/convergence_sim.h) and scenario
// reader (bench/sim_scenario.h): the outer algorithms reach the optimum,
// two peers a round mix more than one, DiLoCo's replicas stay identical, a
// slow link costs DiLoCo's all-reduce more than GASLoC's gossip, and the
// harness's scenario files read as the harness reads them.
#include "bench/convergence_sim.h"

#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "bench/sim_scenario.h"
#include "gtest/gtest.h"

namespace gasloc::bench {
namespace {

constexpr SimAlgorithm kAll[] = {
    SimAlgorithm::kGasloc, SimAlgorithm::kGaslocTwoPeer, SimAlgorithm::kDiloco,
    SimAlgorithm::kDpsgd, SimAlgorithm::kDpsgdTwoPeer};

// n equal workers at 100 steps/s on fast links.
SimOptions Equal(SimAlgorithm algorithm, uint32_t n) {
  SimOptions o;
  o.algorithm = algorithm;
  o.workers.assign(n, {.steps_per_second = 100, .bytes_per_second = 1e9});
  o.model_bytes = 1e3;
  o.dimension = 16;
  o.local_steps = 80;
  return o;
}

double MeanConsensusOverTheSecondHalf(const SimResult& r) {
  double sum = 0;
  size_t count = 0;
  for (size_t k = r.points.size() / 2; k < r.points.size(); ++k, ++count)
    sum += r.points[k].consensus_distance;
  return count > 0 ? sum / count : 0;
}

TEST(ConvergenceSim,
     EveryAlgorithmReachesTheOptimumWithIdenticalDataAndNoNoise) {
  for (SimAlgorithm a : kAll) {
    SimOptions o = Equal(a, 8);
    o.heterogeneity = 0;
    o.noise = 0;
    o.seconds = 40;
    auto r = RunConvergenceSim(o);
    ASSERT_TRUE(r.ok()) << r.status();
    const double first = r->points.front().average_loss;
    ASSERT_GT(first, 1);
    EXPECT_LT(r->points.back().average_loss, 1e-8 * first)
        << SimAlgorithmName(a) << " after " << r->rounds << " rounds";
    EXPECT_LT(r->points.back().mean_worker_loss, 1e-8 * first)
        << SimAlgorithmName(a);
    EXPECT_GT(r->rounds, 10u) << SimAlgorithmName(a);
  }
}

// The mean consensus distance over the second half of a run with one peer
// a round (`one`) and of the same run with `two_peer`.
std::pair<double, double> OneAndTwoPeerConsensus(const SimOptions& one,
                                                 SimAlgorithm two_peer) {
  SimOptions two = one;
  two.algorithm = two_peer;
  auto r1 = RunConvergenceSim(one);
  auto r2 = RunConvergenceSim(two);
  EXPECT_TRUE(r1.ok() && r2.ok());
  if (!r1.ok() || !r2.ok()) return {0, 0};
  return {MeanConsensusOverTheSecondHalf(*r1),
          MeanConsensusOverTheSecondHalf(*r2)};
}

TEST(ConvergenceSim, TwoPeersARoundKeepSixtyFourWorkersCloserThanOne) {
  SimOptions one = Equal(SimAlgorithm::kGasloc, 64);
  one.seconds = 30;
  one.heterogeneity = 0;
  one.noise = 1;
  const auto [c1, c2] =
      OneAndTwoPeerConsensus(one, SimAlgorithm::kGaslocTwoPeer);
  EXPECT_GT(c2, 0);
  EXPECT_GT(c1, 1.3 * c2) << "one peer " << c1 << ", two peers " << c2;
}

TEST(ConvergenceSim, DilocoReplicasStayBitIdenticalAndGossipOnesDoNot) {
  for (SimAlgorithm a : {SimAlgorithm::kDiloco, SimAlgorithm::kGasloc}) {
    SimOptions o = Equal(a, 6);
    o.seconds = 10;
    o.keep_models = true;
    auto r = RunConvergenceSim(o);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->final_models.size(), 6u);
    bool identical = true;
    for (const std::vector<float>& m : r->final_models)
      identical &= std::memcmp(m.data(), r->final_models[0].data(),
                               m.size() * sizeof(float)) == 0;
    EXPECT_EQ(identical, a == SimAlgorithm::kDiloco) << SimAlgorithmName(a);
    if (a == SimAlgorithm::kDiloco) {
      EXPECT_EQ(r->points.back().consensus_distance, 0);
    }
  }
}

TEST(ConvergenceSim, ASlowLinkHoldsDilocosRingButOnlyGaslocsSlowPair) {
  // One link 10x slower, a copy on it (10 s) longer than a round of
  // compute (0.8 s): the ring waits for it every round, in all 2 (n - 1)
  // steps; gossip only in the pair that holds it.
  auto slow = [](SimAlgorithm a) {
    SimOptions o = Equal(a, 4);
    o.model_bytes = 1e6;
    for (SimWorker& w : o.workers) w.bytes_per_second = 1e6;
    o.workers[3].bytes_per_second = 1e5;
    o.max_rounds = 20;
    o.seconds = 1e6;
    return o;
  };
  auto diloco = RunConvergenceSim(slow(SimAlgorithm::kDiloco));
  auto gasloc = RunConvergenceSim(slow(SimAlgorithm::kGasloc));
  ASSERT_TRUE(diloco.ok() && gasloc.ok());
  // H / s + 2 (n - 1) / n M / b_slow = 0.8 + 1.5 x 10 s.
  EXPECT_NEAR(diloco->mean_round_seconds, 15.8, 1e-6);
  EXPECT_EQ(diloco->mean_local_steps, 80);
  EXPECT_LT(gasloc->mean_round_seconds, 0.8 * diloco->mean_round_seconds);
  // The planner stretches the fast pair's budgets through the slow copy.
  EXPECT_GT(gasloc->mean_local_steps, 80);
}

TEST(ConvergenceSim, ASeedReproducesItsRun) {
  SimOptions o = Equal(SimAlgorithm::kGasloc, 8);
  o.seconds = 10;
  auto a = RunConvergenceSim(o);
  auto b = RunConvergenceSim(o);
  o.seed = 2;
  auto c = RunConvergenceSim(o);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->points.back().average_loss, b->points.back().average_loss);
  EXPECT_NE(a->points.back().average_loss, c->points.back().average_loss);
}

TEST(ConvergenceSim, AdamWInnerStepsLearnToo) {
  SimOptions o = Equal(SimAlgorithm::kGasloc, 4);
  o.adamw = true;
  o.inner_lr = 0.01;
  o.seconds = 20;
  auto r = RunConvergenceSim(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_LT(r->points.back().average_loss,
            0.05 * r->points.front().average_loss);
}

TEST(ConvergenceSim, SecondsToLossInterpolatesInLogLoss) {
  std::vector<SimPoint> points(2);
  points[0] = {.seconds = 0, .average_loss = 100, .mean_worker_loss = 100};
  points[1] = {.seconds = 10, .average_loss = 1, .mean_worker_loss = 50};
  EXPECT_DOUBLE_EQ(SecondsToLoss(points, 10), 5);
  EXPECT_DOUBLE_EQ(SecondsToLoss(points, 100), 0);
  EXPECT_EQ(SecondsToLoss(points, 0.5), -1);
  EXPECT_EQ(SecondsToLoss(points, 10, &SimPoint::mean_worker_loss), -1);
}

// The outer rate and momentum reach the real update: GASLoC with eta 1
// and gamma 0 at one step a round is D-PSGD (its job-spec defaults), to
// the bit, and with the defaults (eta 0.7, gamma 0.9) it is not.
TEST(ConvergenceSim, GaslocWithEtaOneAndNoMomentumIsDpsgd) {
  auto run = [](SimAlgorithm a, double eta, double gamma) {
    SimOptions o = Equal(a, 4);
    o.local_steps = 1;
    o.max_rounds = 60;
    o.seconds = 1e6;
    o.outer_lr = eta;
    o.outer_momentum = gamma;
    o.keep_models = true;
    auto r = RunConvergenceSim(o);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->final_models : std::vector<std::vector<float>>{};
  };
  const auto dpsgd = run(SimAlgorithm::kDpsgd, -1, -1);
  ASSERT_EQ(dpsgd.size(), 4u);
  EXPECT_EQ(run(SimAlgorithm::kGasloc, 1, 0), dpsgd);
  EXPECT_NE(run(SimAlgorithm::kGasloc, -1, -1), dpsgd);
}

// Uniform budgets: every worker takes exactly H steps a round, whatever
// GASLoC's adaptive planner would give (h1_claim.py compares at equal
// tokens).
TEST(ConvergenceSim, UniformBudgetsGiveEveryWorkerTheNominalSteps) {
  SimOptions o = Equal(SimAlgorithm::kGaslocTwoPeer, 16);
  o.local_steps = 1;
  o.max_rounds = 300;
  o.seconds = 1e6;
  o.uniform_budgets = true;
  auto r = RunConvergenceSim(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->points.back().round, 300u);
  EXPECT_EQ(r->points.back().steps, 300u * 16);
}

// The eager rule with one worker is DiLoCo: its own pseudo-gradient is
// the whole mean and the others' share is empty. With four it is not.
TEST(ConvergenceSim, DilocoEagerRuleWithOneWorkerIsDiloco) {
  auto run = [](SimAlgorithm a, uint32_t n) {
    SimOptions o = Equal(a, n);
    o.seconds = 20;
    o.keep_models = true;
    auto r = RunConvergenceSim(o);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->final_models : std::vector<std::vector<float>>{};
  };
  const auto diloco = run(SimAlgorithm::kDiloco, 1);
  ASSERT_EQ(diloco.size(), 1u);
  EXPECT_EQ(run(SimAlgorithm::kDilocoEager, 1), diloco);
  EXPECT_NE(run(SimAlgorithm::kDilocoEager, 4), run(SimAlgorithm::kDiloco, 4));
}

// D-PSGD over two random matchings a round (at 4 workers a ring, redrawn
// every round) mixes more than over one: a lower consensus distance.
TEST(ConvergenceSim, TwoPeerDpsgdKeepsItsWorkersCloserThanOnePeer) {
  SimOptions one = Equal(SimAlgorithm::kDpsgd, 4);
  one.max_rounds = 2000;
  one.seconds = 1e6;
  const auto [c1, c2] = OneAndTwoPeerConsensus(one, SimAlgorithm::kDpsgdTwoPeer);
  EXPECT_GT(c2, 0);
  EXPECT_LT(c2, 0.75 * c1) << "one peer " << c1 << ", two peers " << c2;
}

TEST(ConvergenceSim, DpsgdRefusesAnOuterRateOrMomentum) {
  auto message = [](SimAlgorithm a, double eta, double gamma) {
    SimOptions o = Equal(a, 4);
    o.outer_lr = eta;
    o.outer_momentum = gamma;
    return std::string(RunConvergenceSim(o).status().message());
  };
  EXPECT_NE(message(SimAlgorithm::kDpsgd, 0.5, -1).find("tune its inner_lr"),
            std::string::npos);
  EXPECT_NE(message(SimAlgorithm::kDpsgdTwoPeer, -1, 0.5)
                .find("tune its inner_lr"),
            std::string::npos);
  EXPECT_EQ(message(SimAlgorithm::kGasloc, 0.5, 0.5), "");
  EXPECT_EQ(ParseSimAlgorithm("dpsgd-2peer").value(),
            SimAlgorithm::kDpsgdTwoPeer);
}

TEST(SimScenario, ReadsTheOneSlowLinkScenarioAndRepeatsItsPattern) {
  auto s =
      LoadSimScenario(GASLOC_SOURCE_DIR "/bench/scenarios/one_slow_link.yaml");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->name, "one-slow-link");
  EXPECT_EQ(s->local_steps, 80u);
  EXPECT_EQ(s->tokens_per_step, 8u * 64u);
  EXPECT_EQ(s->max_wall_seconds, 240);
  EXPECT_EQ(s->max_rounds, 30u);
  ASSERT_EQ(s->workers.size(), 4u);
  EXPECT_EQ(s->workers[0].rate_mbit, 24);
  EXPECT_EQ(s->workers[3].rate_mbit, 2.4);
  EXPECT_EQ(s->workers[3].cpu, 0.45);
  const std::vector<ScenarioWorker> many = ExpandWorkers(s->workers, 16);
  ASSERT_EQ(many.size(), 16u);
  for (size_t i = 0; i < many.size(); ++i)
    EXPECT_EQ(many[i].rate_mbit, i % 4 == 3 ? 2.4 : 24) << i;
}

TEST(SimScenario, RefusesWhatItCannotRead) {
  EXPECT_FALSE(ParseSimScenario("name: x\n").ok());  // no workers
  EXPECT_FALSE(ParseSimScenario("workers:\n  - {cpu: fast}\n").ok());
  EXPECT_FALSE(ParseSimScenario("- {cpu: 1}\n").ok());  // outside workers:
  auto ok = ParseSimScenario(
      "defaults: {cpu: 0.5}  # a comment\nworkers:\n  - {count: 2}\n"
      "  - {delay_ms: 20, join_at_s: 5}\n");
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->workers.size(), 3u);
  EXPECT_EQ(ok->workers[2].cpu, 0.5);
  EXPECT_EQ(ok->workers[2].delay_ms, 20);
}

}  // namespace
}  // namespace gasloc::bench
