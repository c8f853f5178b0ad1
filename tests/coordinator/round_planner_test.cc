// The round planner's decisions, called directly: stop reasons, ETA,
// exchange bytes, epochs (who joined and left), whether to plan the next
// round, and budget diffs.
#include "coordinator/round_planner.h"

#include <set>

#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gasloc::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

const absl::Time kT0 = absl::FromUnixSeconds(1700000000);

TEST(RoundPlannerTest, StopReasonNamesTheCondition) {
  v1::JobSpec spec;
  spec.mutable_stop()->set_max_rounds(10);
  spec.mutable_stop()->set_max_tokens(1000);
  spec.mutable_stop()->set_max_wall_seconds(60);
  EXPECT_EQ(StopReason(spec, 9, 0, kT0, kT0), std::nullopt);
  EXPECT_EQ(StopReason(spec, 10, 0, kT0, kT0), "reached max_rounds=10");
  EXPECT_EQ(StopReason(spec, 1, 1000, kT0, kT0),
            "reached max_tokens=1000 (1000 tokens)");
  EXPECT_EQ(StopReason(spec, 1, 0, kT0, kT0 + absl::Seconds(60)),
            "reached max_wall_seconds=60");
}

// Issue 32 item 5: a round's place on the learning-rate horizon. ROUNDS
// gives none (rounds x H on the workers); TOKENS and SECONDS the fraction
// of their limit done at planning and after the round; STOP the largest
// over the limits set (here seconds run ahead of rounds), clamped.
TEST(RoundPlannerTest, ScheduleProgressIsTheFractionOfTheHorizonsLimit) {
  v1::JobSpec spec;
  spec.mutable_training()->set_batch(4);
  spec.mutable_model()->set_context(8);
  spec.mutable_stop()->set_max_rounds(10);
  const JobProgress at{.rounds_run = 2,
                       .tokens = 250,
                       .seconds = 60,
                       .round_tokens = 50,
                       .round_seconds = 12};
  EXPECT_EQ(PlanScheduleProgress(spec, at), std::nullopt);  // rounds only
  spec.mutable_stop()->set_max_tokens(1000);
  spec.mutable_stop()->set_max_wall_seconds(240);
  auto progress = [&](v1::ScheduleHorizon horizon, const JobProgress& p) {
    spec.mutable_training()->set_schedule_horizon(horizon);
    return PlanScheduleProgress(spec, p);
  };
  EXPECT_EQ(progress(v1::SCHEDULE_HORIZON_ROUNDS, at), std::nullopt);
  auto tokens = progress(v1::SCHEDULE_HORIZON_TOKENS, at);
  ASSERT_TRUE(tokens.has_value());
  EXPECT_DOUBLE_EQ(tokens->begin, 0.25);
  EXPECT_DOUBLE_EQ(tokens->end, 0.3);
  auto seconds = progress(v1::SCHEDULE_HORIZON_SECONDS, at);
  ASSERT_TRUE(seconds.has_value());
  EXPECT_DOUBLE_EQ(seconds->begin, 0.25);
  EXPECT_DOUBLE_EQ(seconds->end, 0.3);
  JobProgress late = at;
  late.seconds = 180;  // 0.75 of the wall time, 0.2 of the rounds
  auto stop = progress(v1::SCHEDULE_HORIZON_STOP, late);
  ASSERT_TRUE(stop.has_value());
  EXPECT_DOUBLE_EQ(stop->begin, 0.75);
  EXPECT_DOUBLE_EQ(stop->end, 0.8);
  late.seconds = 235;
  stop = progress(v1::SCHEDULE_HORIZON_STOP, late);
  EXPECT_DOUBLE_EQ(stop->begin, 235.0 / 240);
  EXPECT_DOUBLE_EQ(stop->end, 1.0);  // clamped
  // The round's tokens: its planned steps x batch x context.
  std::vector<Budget> budgets(3);
  budgets[0].local_steps = 10;
  budgets[1].local_steps = 20;
  budgets[2].local_steps = 5;
  EXPECT_DOUBLE_EQ(PlannedRoundTokens(spec, budgets), 35.0 * 4 * 8);
  // The round's length: the budget plan's target, else the mean so far.
  EXPECT_DOUBLE_EQ(ExpectedRoundSeconds(12, 5, 100), 12);
  EXPECT_DOUBLE_EQ(ExpectedRoundSeconds(0, 5, 100), 20);
  EXPECT_DOUBLE_EQ(ExpectedRoundSeconds(0, 0, 100), 0);
}

TEST(RoundPlannerTest, OnlyEndedStatesAreEnded) {
  EXPECT_FALSE(IsEnded(v1::JOB_STATE_PENDING));
  EXPECT_FALSE(IsEnded(v1::JOB_STATE_RUNNING));
  EXPECT_TRUE(IsEnded(v1::JOB_STATE_FINISHED));
  EXPECT_TRUE(IsEnded(v1::JOB_STATE_FAILED));
  EXPECT_TRUE(IsEnded(v1::JOB_STATE_STOPPED));
}

// A round succeeded once a member completed it; it failed when nobody is
// still running it (or its deadline passed) and none completed it.
TEST(RoundPlannerTest, ARoundFailsWhenNoMemberCompletedIt) {
  const std::vector<uint64_t> members = {1, 2};
  std::set<uint64_t> running = {2};
  const auto is_running = [&](uint64_t id) { return running.count(id) > 0; };
  EXPECT_EQ(DecideRoundOutcome(true, members, is_running, false),
            RoundOutcome::kSucceeded);
  EXPECT_EQ(DecideRoundOutcome(false, members, is_running, false),
            RoundOutcome::kOpen);
  EXPECT_EQ(DecideRoundOutcome(false, members, is_running, true),
            RoundOutcome::kFailed);
  running.clear();
  EXPECT_EQ(DecideRoundOutcome(false, members, is_running, false),
            RoundOutcome::kFailed);
  EXPECT_EQ(DecideRoundOutcome(false, {}, is_running, false),
            RoundOutcome::kFailed);
}

TEST(RoundPlannerTest, AMemberIsDroppedAfterItsFailuresInARow) {
  v1::JobSpec spec;  // max_consecutive_round_failures unset: the default
  spec.set_min_workers(2);
  EXPECT_EQ(MaxConsecutiveRoundFailures(spec),
            kDefaultMaxConsecutiveRoundFailures);
  FailureDecision d = DecideFailure(spec, 2, 3);
  EXPECT_FALSE(d.drop);
  d = DecideFailure(spec, 3, 3);
  EXPECT_TRUE(d.drop);
  EXPECT_FALSE(d.fail_job);  // 2 left, min_workers 2
  EXPECT_EQ(d.Reason(),
            "failed 3 round(s) in a row (max_consecutive_round_failures=3)");
  d = DecideFailure(spec, 3, 2);
  EXPECT_TRUE(d.fail_job);
  EXPECT_EQ(d.JobReason(), "1 worker(s) left, fewer than min_workers=2");
  spec.set_max_consecutive_round_failures(1);
  spec.set_min_workers(1);
  d = DecideFailure(spec, 1, 1);
  EXPECT_TRUE(d.drop && d.fail_job);
  EXPECT_EQ(d.JobReason(), "every worker was dropped");
}

TEST(RoundPlannerTest, EtaFromTheObservedRate) {
  v1::JobStatus st;
  st.set_state(v1::JOB_STATE_PENDING);
  EXPECT_EQ(EstimateEtaSeconds(st, kT0), -1);
  st.set_state(v1::JOB_STATE_RUNNING);
  st.set_started_unix_ms(absl::ToUnixMillis(kT0));
  st.mutable_spec()->mutable_stop()->set_max_rounds(100);
  EXPECT_EQ(EstimateEtaSeconds(st, kT0 + absl::Seconds(10)), -1)
      << "no round completed yet";
  st.set_rounds_completed(10);
  EXPECT_DOUBLE_EQ(EstimateEtaSeconds(st, kT0 + absl::Seconds(10)), 90);
  st.set_state(v1::JOB_STATE_FINISHED);
  EXPECT_EQ(EstimateEtaSeconds(st, kT0), 0);
}

TEST(RoundPlannerTest, ExchangeBytesFollowTheTopology) {
  v1::JobSpec spec;
  spec.mutable_model()->set_layers(2);
  spec.mutable_model()->set_d_model(16);
  spec.mutable_model()->set_heads(1);
  spec.mutable_model()->set_context(16);
  spec.mutable_outer()->set_algorithm(v1::ALGORITHM_GASLOC);
  spec.mutable_outer()->set_topology(v1::TOPOLOGY_RANDOM_ONE_PEER);
  const double model = 4.0 * static_cast<double>(ModelParameterCount(spec.model()));
  EXPECT_DOUBLE_EQ(ExchangeBytes(spec, 4), model);
  spec.mutable_outer()->set_topology(v1::TOPOLOGY_RING);
  EXPECT_DOUBLE_EQ(ExchangeBytes(spec, 4), 2 * model);
  // Gossip on the complete graph sends y to each of the n - 1 others.
  spec.mutable_outer()->set_topology(v1::TOPOLOGY_COMPLETE);
  EXPECT_DOUBLE_EQ(ExchangeBytes(spec, 4), 3 * model);
  EXPECT_EQ(ExchangeVolumeOf(spec).kind, ExchangeVolume::Kind::kGossip);
  EXPECT_DOUBLE_EQ(ExchangeVolumeOf(spec).model_bytes, model);
  spec.mutable_outer()->set_algorithm(v1::ALGORITHM_DILOCO);
  EXPECT_DOUBLE_EQ(ExchangeBytes(spec, 4), model * 2 * 3 / 4);
  EXPECT_EQ(ExchangeVolumeOf(spec).kind, ExchangeVolume::Kind::kRingAllReduce);
  EXPECT_EQ(ExchangeBytes(spec, 1), 0);
  const BudgetOptions o = BudgetOptionsFor(spec, 4);
  EXPECT_DOUBLE_EQ(o.exchange_bytes, model * 2 * 3 / 4);
  // INT8: a byte a parameter and a 4-byte scale per 256 of them.
  spec.mutable_exchange()->set_encoding(v1::WIRE_ENCODING_INT8);
  EXPECT_DOUBLE_EQ(ExchangeVolumeOf(spec).model_bytes,
                   model / 4 * (1 + 4.0 / 256));
}

TEST(RoundPlannerTest, FirstEpochHasEveryoneJoining) {
  const EpochDecision d = DecideEpoch(0, nullptr, {1, 2, 3}, 0);
  EXPECT_TRUE(d.bump);
  EXPECT_EQ(d.epoch, 1u);
  EXPECT_THAT(d.joined, ElementsAre(1u, 2u, 3u));
  EXPECT_THAT(d.left, IsEmpty());
  EXPECT_EQ(d.Reason(), "epoch 1 from round 0: 3 workers, joined 1,2,3");
}

TEST(RoundPlannerTest, SameMembersKeepTheEpoch) {
  const std::vector<uint64_t> last = {1, 2};
  const EpochDecision d = DecideEpoch(4, &last, {1, 2}, 9);
  EXPECT_FALSE(d.bump);
  EXPECT_EQ(d.epoch, 4u);
}

TEST(RoundPlannerTest, ChangedMembersBumpAndSayWhoJoinedAndLeft) {
  const std::vector<uint64_t> last = {1, 2, 3};
  const EpochDecision d = DecideEpoch(2, &last, {1, 3, 4}, 7);
  EXPECT_TRUE(d.bump);
  EXPECT_EQ(d.epoch, 3u);
  EXPECT_THAT(d.joined, ElementsAre(4u));
  EXPECT_THAT(d.left, ElementsAre(2u));
  EXPECT_EQ(d.Reason(), "epoch 3 from round 7: 3 workers, joined 4, left 2");
}

TEST(RoundPlannerTest, LongIdListsAreShortened) {
  EXPECT_EQ(FormatIdList({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}),
            "1,2,3,4,5,6,7,8,... (10)");
}

TEST(RoundPlannerTest, WhoPlansTheNextRound) {
  const std::set<uint64_t> in_job = {1, 2, 5};
  auto member = [&](uint64_t id) { return in_job.count(id) > 0; };
  EXPECT_TRUE(DecidePlanNext(nullptr, 5, member).plan);
  EXPECT_EQ(DecidePlanNext(nullptr, 5, member).why,
            PlanDecision::Why::kFirstRound);
  const std::vector<uint64_t> latest = {1, 2};
  const PlanDecision in_round = DecidePlanNext(&latest, 2, member);
  EXPECT_TRUE(in_round.plan);
  EXPECT_EQ(in_round.why, PlanDecision::Why::kInLatestRound);
  const PlanDecision joiner = DecidePlanNext(&latest, 5, member);
  EXPECT_FALSE(joiner.plan);
  EXPECT_EQ(joiner.Reason(),
            "a new member waits for the members to reach the round boundary");
  const std::vector<uint64_t> gone = {3, 4};
  const PlanDecision orphan = DecidePlanNext(&gone, 5, member);
  EXPECT_TRUE(orphan.plan);
  EXPECT_EQ(orphan.why, PlanDecision::Why::kLatestRoundGone);
}

TEST(RoundPlannerTest, ARoundWaitsForTheSlowestMemberUpToTheLead) {
  const std::vector<MemberProgress> members = {{1, 4}, {2, 2}, {3, 3}, {4, -1}};
  // Lead 1: round 4 needs round 2 finished by everyone; worker 4 (no round
  // finished yet, its first is round 0) holds it, the furthest behind.
  LeadDecision d = DecideRoundLead(4, 1, members);
  EXPECT_TRUE(d.hold);
  EXPECT_EQ(d.slowest_worker, 4u);
  EXPECT_EQ(d.Reason(),
            "round 4 waits until every member has finished round 2 "
            "(max_round_lead 1): worker 4 has finished no round yet");
  // Without worker 4, worker 2 has finished round 2: round 4 may start,
  // round 5 may not.
  const std::vector<MemberProgress> three(members.begin(), members.end() - 1);
  EXPECT_FALSE(DecideRoundLead(4, 1, three).hold);
  d = DecideRoundLead(5, 1, three);
  EXPECT_TRUE(d.hold);
  EXPECT_EQ(d.slowest_worker, 2u);
  EXPECT_EQ(d.Reason(),
            "round 5 waits until every member has finished round 3 "
            "(max_round_lead 1): worker 2 has finished round 2");
  // Lockstep (0): the slowest member's next round is never held, anyone
  // else's next after it is.
  EXPECT_FALSE(DecideRoundLead(3, 0, three).hold);
  EXPECT_TRUE(DecideRoundLead(4, 0, three).hold);
  // Early rounds wait for nobody; a wide lead holds nothing here.
  EXPECT_FALSE(DecideRoundLead(0, 0, members).hold);
  EXPECT_FALSE(DecideRoundLead(1, 1, members).hold);
  EXPECT_FALSE(DecideRoundLead(5, 1000, members).hold);
}

TEST(RoundPlannerTest, BudgetDiffSkipsFirstBudgetsAndUnchanged) {
  std::vector<Budget> budgets(3);
  budgets[0].local_steps = 100;
  budgets[1].local_steps = 50;
  budgets[2].local_steps = 80;
  const std::vector<BudgetDiff> diffs = DiffBudgets({0, 100, 80}, budgets);
  ASSERT_EQ(diffs.size(), 1u);
  EXPECT_EQ(diffs[0].index, 1u);
  EXPECT_EQ(diffs[0].old_steps, 100u);
  EXPECT_EQ(diffs[0].new_steps, 50u);
}

}  // namespace
}  // namespace gasloc::coordinator
