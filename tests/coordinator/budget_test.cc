// The budget planner (algorithms.md section 5).
#include "coordinator/budget.h"

#include "common/link_bandwidth.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gasloc::coordinator {
namespace {

using ::testing::HasSubstr;

BudgetOptions Adaptive(double exchange_bytes = 0) {
  BudgetOptions o;
  o.policy = v1::BUDGET_POLICY_ADAPTIVE;
  o.nominal_steps = 100;
  o.min_steps = 10;
  o.exchange_bytes = exchange_bytes;
  return o;
}

TEST(BudgetTest, NoMeasurementGetsNominal) {
  BudgetPlan plan = PlanBudgets({{}, {}}, Adaptive());
  ASSERT_EQ(plan.budgets.size(), 2u);
  for (const Budget& b : plan.budgets) {
    EXPECT_EQ(b.local_steps, 100u);
    EXPECT_EQ(b.Reason(), "no measurement yet");
  }
  // One measured, one not: the unmeasured one still gets H.
  plan = PlanBudgets({{10, 0}, {}}, Adaptive());
  EXPECT_EQ(plan.budgets[1].local_steps, 100u);
  EXPECT_EQ(plan.budgets[1].Reason(), "no measurement yet");
}

TEST(BudgetTest, UniformPolicyGivesEveryoneNominal) {
  BudgetOptions o = Adaptive(1e6);
  o.policy = v1::BUDGET_POLICY_UNIFORM;
  BudgetPlan plan = PlanBudgets({{10, 1e6}, {1, 1e3}}, o);
  for (const Budget& b : plan.budgets) {
    EXPECT_EQ(b.local_steps, 100u);
    EXPECT_THAT(b.Reason(), HasSubstr("uniform"));
  }
}

TEST(BudgetTest, HalfSpeedGetsHalfTheSteps) {
  // Same link, one worker at half the step rate.
  BudgetPlan plan = PlanBudgets({{10, 1e8}, {5, 1e8}, {10, 1e8}}, Adaptive(1e8));
  EXPECT_EQ(plan.budgets[0].local_steps, 100u);
  EXPECT_EQ(plan.budgets[2].local_steps, 100u);
  EXPECT_EQ(plan.budgets[1].local_steps, 50u);
  EXPECT_THAT(plan.budgets[1].Reason(), HasSubstr("0.50x fastest"));
  EXPECT_DOUBLE_EQ(plan.target_round_seconds, 10 + 1);
}

// A formula's H_i less than 10% below H is H (the noise band): identical
// workers measured a few percent apart keep the uniform H; a worker 12%
// slower gets 12% fewer steps.
TEST(BudgetTest, DifferencesInsideTheNoiseBandKeepTheNominalH) {
  BudgetPlan plan =
      PlanBudgets({{10, 1e8}, {9.2, 1e8}, {8.8, 1e8}}, Adaptive(1e8));
  EXPECT_EQ(plan.budgets[0].local_steps, 100u);
  EXPECT_EQ(plan.budgets[1].local_steps, 100u) << plan.budgets[1].Reason();
  EXPECT_EQ(plan.budgets[1].guard, Budget::Guard::kNoiseBand);
  EXPECT_THAT(plan.budgets[1].Reason(),
              HasSubstr("the formula's 92 is within the noise band"));
  EXPECT_EQ(plan.budgets[2].local_steps, 88u) << plan.budgets[2].Reason();
  EXPECT_EQ(plan.budgets[2].guard, Budget::Guard::kNone);
}

// The band grows with the rates' measured round-to-round spread: 2 sd of
// the difference of two workers' single-round rates, within [10%, 25%]; a
// worker whose spread is not measured yet gets the widest band.
TEST(BudgetTest, TheNoiseBandIsSizedFromTheMeasuredSpread) {
  auto plan_with = [](double spread) {
    return PlanBudgets({{.steps_per_second = 10, .bytes_per_second = 1e8,
                         .step_rate_spread = spread},
                        {.steps_per_second = 8.5, .bytes_per_second = 1e8,
                         .step_rate_spread = spread},
                        {.steps_per_second = 6, .bytes_per_second = 1e8,
                         .step_rate_spread = spread}},
                       Adaptive(1e8));
  };
  // Quiet rates (1%): the floor of 10%, and 85 steps are planned.
  BudgetPlan plan = plan_with(0.01);
  EXPECT_EQ(plan.budgets[1].local_steps, 85u) << plan.budgets[1].Reason();
  EXPECT_DOUBLE_EQ(plan.budgets[1].noise_band, 0.10);
  // Rates that move 8% a round: 2 * sqrt(2) * 8% = 22.6%, 85 is noise.
  plan = plan_with(0.08);
  EXPECT_EQ(plan.budgets[1].local_steps, 100u) << plan.budgets[1].Reason();
  EXPECT_NEAR(plan.budgets[1].noise_band, 0.226, 0.001);
  EXPECT_THAT(plan.budgets[1].Reason(),
              HasSubstr("the formula's 85 is within the noise band below H: "
                        "23%, the rates' measured round-to-round noise"));
  // A worker at 0.6x is planned whatever the noise (the band is at most 25%).
  EXPECT_EQ(plan.budgets[2].local_steps, 60u) << plan.budgets[2].Reason();
  plan = plan_with(0.5);
  EXPECT_DOUBLE_EQ(plan.budgets[2].noise_band, 0.25);
  EXPECT_EQ(plan.budgets[2].local_steps, 60u) << plan.budgets[2].Reason();
  // A slower link is not hidden by the rates' noise: with c_i = 2.5 s of
  // an 11 s round (the other's 1 s), 85 steps, whatever the spread.
  plan = PlanBudgets({{.steps_per_second = 10, .bytes_per_second = 1e8,
                       .step_rate_spread = 0.08},
                      {.steps_per_second = 10, .bytes_per_second = 4e7,
                       .step_rate_spread = 0.08}},
                     Adaptive(1e8));
  EXPECT_EQ(plan.budgets[1].local_steps, 85u) << plan.budgets[1].Reason();
  // Not measured yet: the widest band.
  plan = plan_with(-1);
  EXPECT_DOUBLE_EQ(plan.budgets[1].noise_band, 0.25);
  EXPECT_EQ(plan.budgets[1].local_steps, 100u);
}

TEST(BudgetTest, SlowLinkComputesLessAndFinishesWithTheOthers) {
  // 100 MB to move; three links at 100 MB/s (1 s), one at 25 MB/s (4 s).
  const double bytes = 1e8;
  BudgetPlan plan = PlanBudgets(
      {{10, 1e8}, {10, 1e8}, {10, 2.5e7}, {10, 1e8}}, Adaptive(bytes));
  EXPECT_DOUBLE_EQ(plan.typical_exchange_seconds, 1.0);
  EXPECT_EQ(plan.budgets[0].local_steps, 100u);
  EXPECT_EQ(plan.budgets[2].local_steps, 70u);  // (11 - 4) * 10
  // Compute plus transfer ends at the same time for everyone.
  const double fast_done = 100 / 10.0 + 1.0;
  const double slow_done = plan.budgets[2].local_steps / 10.0 + 4.0;
  EXPECT_NEAR(slow_done, fast_done, 0.1);
}

TEST(BudgetTest, ClampsToFloorAndCeiling) {
  // A worker 100x slower would get 1 step: the floor H_min = 10 applies.
  BudgetPlan plan = PlanBudgets({{100, 0}, {1, 0}}, Adaptive());
  EXPECT_EQ(plan.budgets[0].local_steps, 100u);
  EXPECT_EQ(plan.budgets[1].local_steps, 10u);
  EXPECT_THAT(plan.budgets[1].Reason(), HasSubstr("floor"));
  // Unknown link uses the typical exchange time: same as a measured one.
  plan = PlanBudgets({{10, 1e8}, {10, 0}}, Adaptive(1e8));
  EXPECT_EQ(plan.budgets[1].local_steps, 100u);
  EXPECT_THAT(plan.budgets[1].Reason(), HasSubstr("link not measured"));
}

TEST(BudgetTest, ExpectedExchangeFromThePeersSetsCi) {
  // Two pairs: one bounded by a slow link (4 s), one fast (1 s).
  auto pair = [](double c, int64_t bound) {
    return WorkerRound{
        .exchange = {.seconds = c,
                     .bound_index = bound,
                     .bound_peer = static_cast<uint64_t>(bound + 1),
                     .bound_bytes_per_second = 2.5e7},
        .previous_steps = 0};
  };
  const WorkerRates rates{.steps_per_second = 10, .bytes_per_second = 1e8};
  BudgetPlan plan =
      PlanBudgets({rates, rates, rates, rates},
                  {pair(1, 1), pair(1, 0), pair(4, 3), pair(4, 2)}, Adaptive());
  EXPECT_DOUBLE_EQ(plan.target_round_seconds, 11);
  EXPECT_EQ(plan.budgets[0].local_steps, 100u);
  EXPECT_EQ(plan.budgets[2].local_steps, 70u);
  EXPECT_EQ(plan.budgets[3].local_steps, 70u);
  EXPECT_THAT(plan.budgets[2].Reason(), HasSubstr("bound by worker 4, 25 MB/s"));
  // The odd one out (no peer) does not set T: it keeps H.
  const WorkerRound alone{
      .exchange = {.seconds = 0,
                   .bound_index = -1,
                   .bound_peer = 0,
                   .bound_bytes_per_second = 0},
      .previous_steps = 0};
  plan = PlanBudgets({rates, rates, rates}, {pair(4, 1), pair(4, 0), alone},
                     Adaptive());
  EXPECT_DOUBLE_EQ(plan.target_round_seconds, 14);
  EXPECT_EQ(plan.budgets[0].local_steps, 100u);
  EXPECT_EQ(plan.budgets[2].local_steps, 100u);
}

WorkerRound PairedWith(int64_t peer, double seconds) {
  return WorkerRound{.exchange = {.seconds = seconds,
                                  .bound_index = peer,
                                  .bound_peer = static_cast<uint64_t>(peer + 1),
                                  .bound_bytes_per_second = 1e5},
                     .previous_steps = 0};
}

// An exchange longer than a whole round of compute (docs/heterogeneity.md,
// one slow link on a fast CPU): the slow pair cannot finish before
// H_min / s + c = 1 + 20 s whatever its budget. T was the fast pairs'
// 10 + 0.5 s, so they ran H and then waited 10.5 s of 21 for the slow
// pair; T is now the slow pair's 21 s and they compute through it.
TEST(BudgetTest, AnExchangeLongerThanARoundStretchesTheOthers) {
  BudgetOptions o = Adaptive();
  o.max_steps = 4 * o.nominal_steps;
  const WorkerRates rates{.steps_per_second = 10, .bytes_per_second = 1e8};
  const std::vector<WorkerRound> round = {PairedWith(1, 0.5), PairedWith(0, 0.5),
                                          PairedWith(3, 20), PairedWith(2, 20)};
  BudgetPlan plan = PlanBudgets({rates, rates, rates, rates}, round, o);
  EXPECT_DOUBLE_EQ(plan.target_round_seconds, 21);
  EXPECT_TRUE(plan.target_from_floor);
  EXPECT_EQ(plan.budgets[0].local_steps, 205u);  // (21 - 0.5) * 10
  EXPECT_EQ(plan.budgets[1].local_steps, 205u);
  EXPECT_EQ(plan.budgets[2].local_steps, 10u);   // H_min
  EXPECT_EQ(plan.budgets[3].local_steps, 10u);
  EXPECT_THAT(plan.budgets[0].Reason(),
              HasSubstr("T=21 s (an exchange H_min cannot shorten): H_i=205 "
                        "(above H=100)"));
  // Everyone reaches the end of the round together: nobody waits.
  for (size_t i = 0; i < 4; ++i)
    EXPECT_NEAR(plan.budgets[i].local_steps / 10.0 + round[i].exchange.seconds,
                21, 0.05)
        << "worker " << i;

  // The ceiling H_max bounds the stretch.
  const std::vector<WorkerRound> slower = {PairedWith(1, 0.5),
                                           PairedWith(0, 0.5),
                                           PairedWith(3, 60), PairedWith(2, 60)};
  plan = PlanBudgets({rates, rates, rates, rates}, slower, o);
  EXPECT_EQ(plan.budgets[0].local_steps, 400u);
  EXPECT_THAT(plan.budgets[0].Reason(), HasSubstr("(ceiling H_max=400)"));

  // Without a ceiling above H (max_steps 0), the fast pairs keep H, but T
  // is still the slow pair's: what they cannot use is not planned away.
  plan = PlanBudgets({rates, rates, rates, rates}, round, Adaptive());
  EXPECT_DOUBLE_EQ(plan.target_round_seconds, 21);
  EXPECT_EQ(plan.budgets[0].local_steps, 100u);
  EXPECT_EQ(plan.budgets[2].local_steps, 10u);
}

// A link slower than the others but still shorter than a round keeps T at
// the earliest nominal finish: no worker is stretched above H.
TEST(BudgetTest, AnExchangeShorterThanARoundStretchesNobody) {
  BudgetOptions o = Adaptive();
  o.max_steps = 4 * o.nominal_steps;
  const WorkerRates rates{.steps_per_second = 10, .bytes_per_second = 1e8};
  BudgetPlan plan = PlanBudgets(
      {rates, rates, rates, rates},
      {PairedWith(1, 0.5), PairedWith(0, 0.5), PairedWith(3, 5),
       PairedWith(2, 5)},
      o);
  EXPECT_DOUBLE_EQ(plan.target_round_seconds, 10.5);
  EXPECT_FALSE(plan.target_from_floor);
  EXPECT_EQ(plan.budgets[0].local_steps, 100u);
  EXPECT_EQ(plan.budgets[2].local_steps, 55u);
}

// The band compares estimates, and s_i averages rounds: with one round's
// spread of 8.5% (+-12% shared-core noise) two estimates that each carry
// 0.18 of a round's variance (the EMA's steady state at weight 0.3) are
// told apart beyond 2 sqrt(2 x 0.18) x 8.5% = 10.2%, so a worker 20%
// slower is planned 80. As noisy as one round (share 1, or unknown), the
// band is 2 sqrt(2) x 8.5% = 24% and it keeps H (issue 32 item 6: its
// partner then waits 19% of every round).
TEST(BudgetTest, TheNoiseBandIsSizedFromTheEstimatesNoise) {
  auto plan_with = [](double share) {
    return PlanBudgets({{.steps_per_second = 10, .bytes_per_second = 1e8,
                         .step_rate_spread = 0.085, .estimate_share = share},
                        {.steps_per_second = 8, .bytes_per_second = 1e8,
                         .step_rate_spread = 0.085, .estimate_share = share}},
                       Adaptive(1e8));
  };
  BudgetPlan plan = plan_with(0.18);
  EXPECT_NEAR(plan.budgets[1].noise_band, 0.102, 0.001);
  EXPECT_EQ(plan.budgets[1].local_steps, 80u) << plan.budgets[1].Reason();
  EXPECT_EQ(plan.budgets[1].guard, Budget::Guard::kNone);
  for (const double share : {1.0, 0.0, -1.0}) {
    plan = plan_with(share);
    EXPECT_NEAR(plan.budgets[1].noise_band, 0.240, 0.001) << share;
    EXPECT_EQ(plan.budgets[1].local_steps, 100u) << plan.budgets[1].Reason();
  }
}

// The band is symmetric about H: in a stretched round (a pair's exchange
// of 10 s: T = 1 + 10 = 11 s) the fast pair's formula gives
// (11 - 0.5) x 10 = 105, within 10% above H: H, as 95 would be below it.
// Outside the band (an exchange of 12.5 s: 130) the formula's stands.
TEST(BudgetTest, TheNoiseBandIsSymmetricAboutH) {
  BudgetOptions o = Adaptive();
  o.max_steps = 4 * o.nominal_steps;
  const WorkerRates rates{.steps_per_second = 10, .bytes_per_second = 1e8};
  auto plan_with = [&](double slow_exchange) {
    return PlanBudgets({rates, rates, rates, rates},
                       {PairedWith(1, 0.5), PairedWith(0, 0.5),
                        PairedWith(3, slow_exchange),
                        PairedWith(2, slow_exchange)},
                       o);
  };
  BudgetPlan plan = plan_with(10);
  ASSERT_TRUE(plan.target_from_floor);
  EXPECT_DOUBLE_EQ(plan.budgets[0].raw_steps, 105);
  EXPECT_EQ(plan.budgets[0].local_steps, 100u) << plan.budgets[0].Reason();
  EXPECT_EQ(plan.budgets[0].guard, Budget::Guard::kNoiseBand);
  EXPECT_THAT(plan.budgets[0].Reason(),
              HasSubstr("the formula's 105 is within the noise band above H: "
                        "10%"));
  plan = plan_with(12.5);
  EXPECT_EQ(plan.budgets[0].local_steps, 130u) << plan.budgets[0].Reason();
  EXPECT_EQ(plan.budgets[0].guard, Budget::Guard::kNone);
}

TEST(BudgetTest, SmallChangesAreWithinTheDeadBand) {
  auto previous = [](uint32_t steps) {
    return WorkerRound{.exchange = {}, .previous_steps = steps};
  };
  // The formula says 50; a previous 52 is within 5% of H: kept.
  BudgetPlan plan = PlanBudgets({{10, 0}, {5, 0}},
                                {previous(100), previous(52)}, Adaptive());
  EXPECT_EQ(plan.budgets[1].local_steps, 52u);
  EXPECT_EQ(plan.budgets[1].guard, Budget::Guard::kDeadBand);
  EXPECT_THAT(plan.budgets[1].Reason(), HasSubstr("dead band"));
  // A previous 60 is outside: the change is made and says where from.
  plan = PlanBudgets({{10, 0}, {5, 0}}, {previous(100), previous(60)},
                     Adaptive());
  EXPECT_EQ(plan.budgets[1].local_steps, 50u);
  EXPECT_EQ(plan.budgets[1].guard, Budget::Guard::kNone);
  EXPECT_THAT(plan.budgets[1].Reason(), HasSubstr("(was 60)"));
}

// The dead band never keeps a budget above H in a round that is not
// stretched: a previous 103 (a stretched round's) is not kept when the
// formula says H = 100 again (it was, because the band was checked
// against the 4 H ceiling instead of the round's top).
TEST(BudgetTest, TheDeadBandKeepsNoBudgetAboveHOutsideAStretchedRound) {
  BudgetOptions o = Adaptive();
  o.max_steps = 4 * o.nominal_steps;
  const WorkerRound previous{.exchange = {}, .previous_steps = 103};
  BudgetPlan plan = PlanBudgets({{10, 0}, {10, 0}}, {previous, previous}, o);
  ASSERT_FALSE(plan.target_from_floor);
  for (const Budget& b : plan.budgets) {
    EXPECT_EQ(b.local_steps, 100u) << b.Reason();
    EXPECT_NE(b.guard, Budget::Guard::kDeadBand);
  }
}

TEST(BudgetTest, EncodingRoundTripsAndReadsTheFirstFormat) {
  Budget b;
  b.local_steps = 40;
  b.basis = Budget::Basis::kAdaptive;
  b.link_known = true;
  b.nominal_steps = 100;
  b.min_steps = 10;
  b.steps_per_second = 4;
  b.fastest_steps_per_second = 10;
  b.exchange_seconds = 2;
  b.target_seconds = 11;
  b.raw_steps = 36;
  b.bytes_per_second = 5e7;
  b.bound_peer = 7;
  b.bound_bytes_per_second = 2.5e7;
  b.previous_steps = 41;
  b.guard = Budget::Guard::kDeadBand;
  b.max_steps = 400;
  b.target_from_floor = true;
  b.noise_band = 0.2;
  const std::string blob = EncodeBudgets({b, Budget{}});
  EXPECT_EQ(blob.size(), 4 + 2 * kBudgetRecordBytes);
  auto decoded = DecodeBudgets(blob);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->size(), 2u);
  EXPECT_EQ((*decoded)[0].Reason(), b.Reason());
  EXPECT_EQ((*decoded)[0].bound_peer, 7u);
  EXPECT_EQ((*decoded)[0].previous_steps, 41u);
  EXPECT_EQ((*decoded)[0].guard, Budget::Guard::kDeadBand);
  EXPECT_EQ((*decoded)[0].max_steps, 400u);
  EXPECT_TRUE((*decoded)[0].target_from_floor);
  EXPECT_FALSE((*decoded)[1].target_from_floor);
  EXPECT_DOUBLE_EQ((*decoded)[0].noise_band, 0.2);
  // A second-format blob: "BGT2" and 88-byte records, no noise band.
  std::string v2 = std::string(kBudgetFormatV2) +
                   blob.substr(4, kBudgetRecordBytesV2) +
                   blob.substr(4 + kBudgetRecordBytes, kBudgetRecordBytesV2);
  auto second = DecodeBudgets(v2);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->size(), 2u);
  EXPECT_EQ((*second)[0].max_steps, 400u);
  EXPECT_DOUBLE_EQ((*second)[0].noise_band, 0);
  EXPECT_FALSE(DecodeBudgets(v2.substr(0, v2.size() - 8)).ok());
  // A first-format blob (a state file from before): the first 56 bytes of
  // each record, with no magic.
  std::string v1 = blob.substr(4, kBudgetRecordBytesV1);
  v1[6] = 0;  // the first format had padding where the guard now is
  auto old = DecodeBudgets(v1);
  ASSERT_TRUE(old.ok()) << old.status();
  ASSERT_EQ(old->size(), 1u);
  EXPECT_EQ((*old)[0].local_steps, 40u);
  EXPECT_DOUBLE_EQ((*old)[0].raw_steps, 36);
  EXPECT_EQ((*old)[0].bound_peer, 0u);
  EXPECT_EQ((*old)[0].max_steps, 0u);  // the ceiling was H then
  EXPECT_FALSE((*old)[0].target_from_floor);
}

TEST(BudgetTest, EmaStartsAtFirstSample) {
  EXPECT_DOUBLE_EQ(UpdateEma(0, 8, 0.3), 8);
  EXPECT_DOUBLE_EQ(UpdateEma(10, 20, 0.5), 15);
}

TEST(BudgetTest, LinkBandwidthIsTheBusierDirection) {
  EXPECT_EQ(LinkBytesPerSecond(1000, 4000, 2.0), 2000.0);
  EXPECT_EQ(LinkBytesPerSecond(4000, 1000, 2.0), 2000.0);
  EXPECT_EQ(LinkBytesPerSecond(0, 0, 2.0), 0.0) << "nothing moved";
  EXPECT_EQ(LinkBytesPerSecond(1000, 0, 0.0), 0.0) << "no time measured";
  EXPECT_EQ(LinkMegabytesPerSecond(2.5e6), 2.5);
}

}  // namespace
}  // namespace gasloc::coordinator
