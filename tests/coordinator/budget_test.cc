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
