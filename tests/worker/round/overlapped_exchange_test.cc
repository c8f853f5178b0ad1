// outer.overlap_exchange (worker/round/overlapped_exchange.h): steps taken
// beside a late peer's exchange, their place in the outer optimizer and
// on the schedule, and a pair that stays consistent when the round is
// cancelled or a step fails beside the exchange.
#include "worker/round/overlapped_exchange.h"

#include <cmath>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/wait_for.h"
#include "tests/worker/round/fail_step_transport.h"
#include "tests/worker/round/fake_trainer.h"
#include "tests/worker/round/sim_worker.h"

namespace gasloc {
namespace {

using testing::FakeLayout;
using testing::FakeTrainer;
using testing::GossipAssignment;
using testing::SimWorker;
using testing::Spec;

std::vector<float> Values(const FloatArena& arena) {
  return std::vector<float>(arena.flat().begin(), arena.flat().end());
}

// What a worker with the fake trainer's target +1 changes in `extra` steps
// taken after `planned` steps from theta_0: the change beside the exchange.
std::vector<float> ChangeOfSteps(uint32_t planned, uint32_t extra) {
  FakeTrainer solo(FakeLayout(), +1.0f);
  for (uint32_t h = 0; h < planned; ++h) EXPECT_TRUE(solo.Step().ok());
  const std::vector<float> before = Values(solo.params());
  for (uint32_t h = 0; h < extra; ++h) EXPECT_TRUE(solo.Step().ok());
  std::vector<float> change = Values(solo.params());
  for (size_t i = 0; i < change.size(); ++i) change[i] -= before[i];
  return change;
}

// Worker 1 (overlap on, 20 ms steps) and worker 2 (no overlap, 250 ms
// steps, starting once worker 1 is in its exchange) run round 0 with 2
// planned steps each; `before_late` runs on the test thread once worker 1
// exchanges, before worker 2 starts.
struct LatePair {
  explicit LatePair(const v1::JobSpec& spec, bool overlap) {
    v1::JobSpec first = spec;
    first.mutable_outer()->set_overlap_exchange(overlap);
    w.push_back(std::make_unique<SimWorker>(network, 1, first, +1.0f));
    w.push_back(std::make_unique<SimWorker>(network, 2, spec, -1.0f));
    w[0]->trainer.SleepOnEveryStep(absl::Milliseconds(20));
    w[1]->trainer.SleepOnEveryStep(absl::Milliseconds(250));
  }
  void RunRound0(const std::function<void()>& late_start = [] {}) {
    std::thread second([&] {
      EXPECT_TRUE(WaitFor([&] { return w[0]->exchanging.load(); },
                          absl::Seconds(30)));
      late_start();
      late = w[1]->runner.RunRound(GossipAssignment(0, 2, {1}, 0.5f, kBudget));
    });
    first = w[0]->runner.RunRound(GossipAssignment(0, 1, {2}, 0.5f, kBudget));
    second.join();
  }
  static constexpr uint32_t kBudget = 2;
  InProcessNetwork network;
  std::vector<std::unique_ptr<SimWorker>> w;
  absl::StatusOr<v1::ReportRoundRequest> first = absl::UnknownError("not run");
  absl::StatusOr<v1::ReportRoundRequest> late = absl::UnknownError("not run");
};

v1::JobSpec OverlapSpec() {
  v1::JobSpec spec = Spec(v1::ALGORITHM_GASLOC);
  spec.mutable_outer()->set_local_steps(10);
  spec.mutable_outer()->set_min_local_steps(1);
  spec.mutable_outer()->set_momentum_placement(v1::MOMENTUM_PLACEMENT_LOCAL);
  return spec;
}

// Worker 2 reaches the exchange 500 ms late (its 2 steps take 250 ms
// each). Worker 1 keeps stepping meanwhile (up to 8 H = 80 in the round)
// instead of waiting, and its result is exactly the round without overlap
// plus the change its extra steps made from theta at H_i: the mixing (so
// worker 2's model) is the same in both runs. The extra steps are the next
// round's first: they take the schedule position of round 1's start
// (before: that of round 0's last planned step, 5).
TEST(OverlappedExchange, ComputesThroughALatePeersExchange) {
  const v1::JobSpec spec = OverlapSpec();
  LatePair plain(spec, false);
  plain.RunRound0();
  LatePair overlapped(spec, true);
  overlapped.RunRound0();
  for (LatePair* run : {&plain, &overlapped}) {
    ASSERT_TRUE(run->first.ok()) << run->first.status();
    ASSERT_TRUE(run->late.ok()) << run->late.status();
  }
  const v1::ReportRoundRequest& report = *overlapped.first;
  EXPECT_EQ(plain.first->inner_steps(), LatePair::kBudget);
  EXPECT_GT(plain.first->exchange_seconds(), 0.2);  // the late peer
  // Steps while waiting: at least a few, at most 8 H in the round.
  const uint32_t extra = report.inner_steps() - LatePair::kBudget;
  EXPECT_GE(extra, 3u);
  EXPECT_LE(report.inner_steps(), kOverlapStepFactor * 10u);
  EXPECT_EQ(report.overlap_steps(), extra);
  EXPECT_GT(report.overlap_compute_seconds(), 0.0);
  EXPECT_LT(report.overlap_compute_seconds(), report.compute_seconds());
  // The round's wall time, not compute + exchange (they overlap).
  EXPECT_GT(report.round_seconds(), 0.4);
  EXPECT_LT(report.round_seconds(),
            report.compute_seconds() + report.exchange_seconds());
  EXPECT_EQ(report.failed_peers_size(), 0);
  // Idle only after the last step (the steps could have covered 760 ms).
  EXPECT_LT(report.wait_seconds(), 0.2);
  EXPECT_EQ(report.tokens(), 64u * report.inner_steps());
  const std::vector<uint64_t>& positions =
      overlapped.w[0]->trainer.schedule_steps();
  ASSERT_EQ(positions.size(), report.inner_steps());
  EXPECT_EQ(positions[0], 0u);
  EXPECT_EQ(positions[1], 5u);
  for (size_t k = LatePair::kBudget; k < positions.size(); ++k)
    EXPECT_EQ(positions[k], 10u) << "step beside the exchange " << k;
  // Worker 2 mixed the same copy of worker 1 (theta at H_i) in both runs.
  EXPECT_EQ(Values(overlapped.w[1]->trainer.params()),
            Values(plain.w[1]->trainer.params()));
  // theta_1 = plain result + (theta after H_i + extra steps - theta at H_i).
  const std::vector<float> change = ChangeOfSteps(LatePair::kBudget, extra);
  const std::vector<float> plain_1 = Values(plain.w[0]->trainer.params());
  const std::vector<float> params_1 = Values(overlapped.w[0]->trainer.params());
  for (size_t i = 0; i < params_1.size(); ++i)
    ASSERT_NEAR(params_1[i], plain_1[i] + change[i], 1e-6f) << "element " << i;
}

// The steps beside round 0's exchange enter round 1's pseudo-gradient:
// round 1 starts from the mixed point M (not from M + d, the parameters),
// so with eta = 1/2, gamma = 0 and no peer in round 1 its result is
// M + eta (theta_after_round_1_steps - M). Before, round 1 started from
// M + d and the d steps were added with weight 1, outside the outer
// optimizer: M + d + eta (theta - M - d).
TEST(OverlappedExchange, StepsBesideTheExchangeEnterTheNextPseudoGradient) {
  v1::JobSpec spec = OverlapSpec();
  spec.mutable_outer()->set_gamma(0.0f);
  spec.mutable_outer()->set_eta(0.5f);
  LatePair plain(spec, false);
  plain.RunRound0();
  LatePair overlapped(spec, true);
  overlapped.RunRound0();
  ASSERT_TRUE(plain.first.ok() && overlapped.first.ok());
  ASSERT_GT(overlapped.first->inner_steps(), LatePair::kBudget);
  const std::vector<float> mixed = Values(plain.w[0]->trainer.params());
  SimWorker& worker = *overlapped.w[0];
  // Round 1's one step, replayed from the parameters round 0 left.
  FakeTrainer replay(FakeLayout(), +1.0f);
  const std::vector<float> after_round_0 = Values(worker.trainer.params());
  std::copy(after_round_0.begin(), after_round_0.end(), replay.params().data());
  ASSERT_TRUE(replay.Step().ok());
  const std::vector<float> stepped = Values(replay.params());
  auto round1 = worker.runner.RunRound(GossipAssignment(1, 1, {}, 0.5f, 1));
  ASSERT_TRUE(round1.ok()) << round1.status();
  EXPECT_EQ(round1->inner_steps(), 1u);  // no peer: nothing to overlap
  const std::vector<float> result = Values(worker.trainer.params());
  for (size_t i = 0; i < result.size(); ++i)
    ASSERT_NEAR(result[i], mixed[i] + 0.5f * (stepped[i] - mixed[i]), 2e-6f)
        << "element " << i;
}

// A checkpoint taken after an overlapped round holds the next round's
// start (the mixed point, outer.round_start) beside the parameters, so a
// worker resumed from it runs the next round exactly as it would have:
// here the same runner runs round 1, goes back to the checkpoint and runs
// round 1 again. Without the saved start, the resumed round would start
// from the parameters (M + d) and end elsewhere.
TEST(OverlappedExchange, ACheckpointKeepsTheNextRoundsStart) {
  v1::JobSpec spec = OverlapSpec();
  spec.mutable_outer()->set_gamma(0.0f);
  spec.mutable_outer()->set_eta(0.5f);
  LatePair pair(spec, true);
  pair.RunRound0();
  ASSERT_TRUE(pair.first.ok()) << pair.first.status();
  ASSERT_GT(pair.first->inner_steps(), LatePair::kBudget);
  RoundRunner& runner = pair.w[0]->runner;
  ASSERT_TRUE(runner.SaveCheckpoint("after-round-0").ok());
  ASSERT_TRUE(runner.RunRound(GossipAssignment(1, 1, {}, 0.5f, 1)).ok());
  const std::vector<float> straight = Values(pair.w[0]->trainer.params());
  ASSERT_TRUE(runner.LoadCheckpoint("after-round-0", 1).ok());
  ASSERT_TRUE(runner.RunRound(GossipAssignment(1, 1, {}, 0.5f, 1)).ok());
  EXPECT_EQ(Values(pair.w[0]->trainer.params()), straight);
}

// A cancel that arrives while steps run beside the exchange stops those
// steps, but the exchange completes and the round stands, as a plain
// round's exchange does: worker 2 mixed worker 1's point, so worker 1
// keeps the mixed model too (plus the steps it took before the cancel).
// Before, the round returned CANCELLED and worker 1 went back to the
// round's start while worker 2 kept the pair average: the pair's mean
// moved by half their gap. gamma = 0, eta = 1: the mixing is the exact
// pair average, so worker 1 - (its steps' change) equals worker 2.
TEST(OverlappedExchange, ACancelBesideTheExchangeKeepsThePairConsistent) {
  v1::JobSpec spec = OverlapSpec();
  spec.mutable_outer()->set_gamma(0.0f);
  spec.mutable_outer()->set_eta(1.0f);
  LatePair pair(spec, true);
  pair.RunRound0([&] {
    EXPECT_TRUE(WaitFor([&] { return pair.w[0]->inner_step.load() > 3; },
                        absl::Seconds(30)));
    pair.w[0]->runner.Cancel();
  });
  ASSERT_TRUE(pair.first.ok()) << pair.first.status();
  ASSERT_TRUE(pair.late.ok()) << pair.late.status();
  const uint32_t extra = pair.first->overlap_steps();
  EXPECT_GE(extra, 2u);
  // Stopped at the cancel, long before the exchange ended (500 ms later).
  EXPECT_LT(extra, 10u);
  EXPECT_EQ(pair.first->failed_peers_size(), 0);
  const std::vector<float> change = ChangeOfSteps(LatePair::kBudget, extra);
  const std::vector<float> first = Values(pair.w[0]->trainer.params());
  const std::vector<float> second = Values(pair.w[1]->trainer.params());
  for (size_t i = 0; i < first.size(); ++i)
    ASSERT_NEAR(first[i] - change[i], second[i], 1e-6f) << "element " << i;
}

// A step that fails beside the exchange drops the steps taken beside it;
// the round keeps its exchange (worker 1 holds the pair average, as
// worker 2 does) and says why in the report. Before, the round failed and
// worker 1 went back to the round's start.
TEST(OverlappedExchange, AStepFailingBesideTheExchangeKeepsThePairConsistent) {
  v1::JobSpec spec = OverlapSpec();
  spec.mutable_outer()->set_gamma(0.0f);
  spec.mutable_outer()->set_eta(1.0f);
  LatePair pair(spec, true);
  pair.w[0]->trainer.FailStepsFrom(LatePair::kBudget + 2);
  pair.RunRound0();
  ASSERT_TRUE(pair.first.ok()) << pair.first.status();
  ASSERT_TRUE(pair.late.ok()) << pair.late.status();
  EXPECT_EQ(pair.first->overlap_steps(), 0u);
  EXPECT_EQ(pair.first->inner_steps(), LatePair::kBudget);
  EXPECT_THAT(pair.first->failure_reason(),
              ::testing::HasSubstr("an inner step beside the exchange failed"));
  EXPECT_THAT(pair.first->failure_reason(),
              ::testing::HasSubstr("injected failure of step 4"));
  const std::vector<float> first = Values(pair.w[0]->trainer.params());
  const std::vector<float> second = Values(pair.w[1]->trainer.params());
  for (size_t i = 0; i < first.size(); ++i)
    ASSERT_NEAR(first[i], second[i], 1e-6f) << "element " << i;
}


// DiLoCo with overlapped communication: three replicas, the third 250 ms
// a step, so the other two step beside the ring all-reduce while they wait
// for it. The round's result (the global model, next round's start) is
// the same on every replica and is exactly plain DiLoCo's (the same
// pseudo-gradients of theta at H_i went into the ring); each fast
// worker's parameters are ahead of it by its own steps; the replica
// checksums (over the shared point and the momentum) agree, and so does
// what a re-synchronising member would fetch. The fast ones take H_i
// steps beside the all-reduce, not more, then wait (more destabilised
// DiLoCo's momentum: ring_algorithm.h). Before, the registry refused the
// overlap for DiLoCo; then the fast workers stepped on to 8 H.
TEST(OverlappedExchange, DilocoReplicasAgreeOnTheRoundsResult) {
  v1::JobSpec spec = Spec(v1::ALGORITHM_DILOCO);
  spec.mutable_outer()->set_local_steps(10);
  spec.mutable_outer()->set_min_local_steps(1);
  constexpr uint32_t kSteps = 4;  // H_i: 80 ms fast, 1 s slow
  // Members in this order: the workers go before the network they use.
  struct Run {
    InProcessNetwork network;
    std::vector<std::unique_ptr<SimWorker>> w;
    std::vector<std::vector<absl::StatusOr<v1::ReportRoundRequest>>> reports;
  };
  auto run = [&](Run& r, bool overlap, int rounds) {
    v1::JobSpec job = spec;
    job.mutable_outer()->set_overlap_exchange(overlap);
    const float targets[] = {+1.0f, -1.0f, +0.5f};
    for (uint64_t id = 1; id <= 3; ++id)
      r.w.push_back(
          std::make_unique<SimWorker>(r.network, id, job, targets[id - 1]));
    r.w[0]->trainer.SleepOnEveryStep(absl::Milliseconds(20));
    r.w[1]->trainer.SleepOnEveryStep(absl::Milliseconds(20));
    r.w[2]->trainer.SleepOnEveryStep(absl::Milliseconds(250));
    for (int round = 0; round < rounds; ++round)
      r.reports.push_back(testing::RunAll(
          r.w, std::vector<v1::Assignment>(
                   3, testing::RingAssignment(round, 3, kSteps))));
  };
  Run plain, overlapped, once;
  run(plain, false, 1);
  run(overlapped, true, 2);
  run(once, true, 1);
  const auto& reports = overlapped.reports;
  const auto& w = overlapped.w;
  for (size_t round = 0; round < reports.size(); ++round) {
    SCOPED_TRACE(round);
    for (const auto& report : reports[round]) {
      ASSERT_TRUE(report.ok()) << report.status();
      EXPECT_EQ(report->failed_peers_size(), 0);
      EXPECT_NE(report->replica_checksum(), 0u);
      EXPECT_EQ(report->replica_checksum(),
                reports[round][0]->replica_checksum());
    }
    // The fast workers computed while the slow one was still stepping,
    // H_i steps beside the all-reduce and no more (MaxStepsBesideExchange:
    // before, up to 8 H - H_i, about 45 here), then waited for it.
    for (int fast = 0; fast < 2; ++fast) {
      EXPECT_EQ(reports[round][fast]->overlap_steps(), kSteps);
      EXPECT_GT(reports[round][fast]->wait_seconds(), 0.3);
    }
  }
  const std::vector<float> shared = Values(w[0]->runner.replicated_params());
  for (const auto& worker : w)
    EXPECT_EQ(Values(worker->runner.replicated_params()), shared);
  EXPECT_NE(Values(w[0]->trainer.params()), shared);  // ahead by its steps
  // Round 0's result is plain DiLoCo's, to the bit.
  ASSERT_TRUE(once.reports[0][0].ok()) << once.reports[0][0].status();
  ASSERT_TRUE(plain.reports[0][0].ok()) << plain.reports[0][0].status();
  EXPECT_EQ(Values(once.w[0]->runner.replicated_params()),
            Values(plain.w[0]->trainer.params()));
}

// One worker of DiLoCo with eager updates, replayed in plain loops from
// its reports: its own round start, momentum and live model; the rule
// ghat_t^i = g_t^i / n + sum_{j != i} g_{t-1}^j / n (algorithms.md
// section 5), the steps beside the all-reduce taken from the eager step's
// result.
struct EagerReplay {
  EagerReplay(float target, const v1::JobSpec& spec)
      : trainer(testing::FakeLayout(), target),
        start(Values(trainer.params())),
        v(start.size(), 0.0f),
        lr(spec.outer().lr()),
        mu(spec.outer().mu()) {}
  void Steps(uint32_t k) {
    for (uint32_t h = 0; h < k; ++h) ASSERT_TRUE(trainer.Step().ok());
  }
  // The planned steps; returns g_t^i.
  std::vector<float> Local(uint32_t planned) {
    Steps(planned);
    std::vector<float> g = Values(trainer.params());
    for (size_t k = 0; k < g.size(); ++k) g[k] -= start[k];
    return g;
  }
  // The eager step with `others` = sum_{j != i} g_{t-1}^j (empty in round
  // 0), then the steps beside the all-reduce.
  void Eager(const std::vector<float>& g, const std::vector<float>& others,
             int n, uint32_t beside) {
    float* live = trainer.params().data();
    for (size_t k = 0; k < g.size(); ++k) {
      const double ghat = (g[k] + (others.empty() ? 0.0 : others[k])) / n;
      v[k] = static_cast<float>(mu * v[k] + ghat);
      start[k] = static_cast<float>(start[k] + lr * (ghat + mu * v[k]));
      live[k] = start[k];
    }
    Steps(beside);
  }
  testing::FakeTrainer trainer;
  std::vector<float> start, v;
  double lr, mu;
};

// DiLoCo with eager updates (outer.overlap_update EAGER): three replicas,
// the third 250 ms a step. At H_i each takes its outer step at once with
// its own fresh pseudo-gradient standing in for its share of the missing
// mean, and the fast ones keep stepping from there beside the ring (H_i
// steps, then they wait). Over four rounds every replica reports the same
// checksum (over the all-reduced mean, the state the rule shares), while
// their parameters and round starts are their own; both match a replay
// of the rule in plain loops from the reports' step counts. Before, the
// factory ignored the option (the delayed rule): the steps beside started
// from theta at H_i and the result was carried onto the mean's step.
TEST(OverlappedExchange, DilocoEagerReplicasAgreeOnTheMeanAndFollowTheRule) {
  v1::JobSpec spec = Spec(v1::ALGORITHM_DILOCO);
  spec.mutable_outer()->set_local_steps(10);
  spec.mutable_outer()->set_min_local_steps(1);
  spec.mutable_outer()->set_overlap_exchange(true);
  spec.mutable_outer()->set_overlap_update(v1::OVERLAP_UPDATE_EAGER);
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  constexpr uint32_t kSteps = 4;
  constexpr int kRounds = 4;
  const float targets[] = {+1.0f, -1.0f, +0.5f};
  InProcessNetwork network;
  std::vector<std::unique_ptr<SimWorker>> w;
  for (uint64_t id = 1; id <= 3; ++id)
    w.push_back(std::make_unique<SimWorker>(network, id, spec, targets[id - 1]));
  w[0]->trainer.SleepOnEveryStep(absl::Milliseconds(20));
  w[1]->trainer.SleepOnEveryStep(absl::Milliseconds(20));
  w[2]->trainer.SleepOnEveryStep(absl::Milliseconds(250));
  std::vector<EagerReplay> replay;
  for (float target : targets) replay.emplace_back(target, spec);
  std::vector<std::vector<float>> g_prev;
  for (int round = 0; round < kRounds; ++round) {
    SCOPED_TRACE(round);
    const auto reports = testing::RunAll(
        w, std::vector<v1::Assignment>(
               3, testing::RingAssignment(round, 3, kSteps)));
    for (const auto& report : reports) {
      ASSERT_TRUE(report.ok()) << report.status();
      EXPECT_EQ(report->failed_peers_size(), 0);
      EXPECT_NE(report->replica_checksum(), 0u);
      EXPECT_EQ(report->replica_checksum(), reports[0]->replica_checksum());
      EXPECT_FALSE(report->replica_behind());
    }
    for (int fast = 0; fast < 2; ++fast)
      EXPECT_EQ(reports[fast]->overlap_steps(), kSteps);
    std::vector<std::vector<float>> g;
    for (auto& r : replay) g.push_back(r.Local(kSteps));
    for (size_t i = 0; i < replay.size(); ++i) {
      std::vector<float> others;
      if (!g_prev.empty()) {
        others.assign(g[i].size(), 0.0f);
        for (size_t j = 0; j < g_prev.size(); ++j)
          if (j != i)
            for (size_t k = 0; k < others.size(); ++k)
              others[k] += g_prev[j][k];
      }
      replay[i].Eager(g[i], others, 3, reports[i]->overlap_steps());
    }
    g_prev = g;
    for (size_t i = 0; i < w.size(); ++i) {
      SCOPED_TRACE(i);
      const std::vector<float> params = Values(w[i]->trainer.params());
      const std::vector<float> start = Values(w[i]->runner.replicated_params());
      const std::vector<float> expected = Values(replay[i].trainer.params());
      for (size_t k = 0; k < params.size(); ++k) {
        ASSERT_NEAR(params[k], expected[k], 1e-5f) << "element " << k;
        ASSERT_NEAR(start[k], replay[i].start[k], 1e-5f) << "element " << k;
      }
    }
  }
  // The rule gives each replica its own model (the checksum does not
  // cover it).
  EXPECT_NE(Values(w[0]->runner.replicated_params()),
            Values(w[1]->runner.replicated_params()));
}

// One worker of DiLoCo with Streaming DiLoCo's merge, replayed in plain
// loops: the shared round start G and momentum (every replica's), its own
// live model. Round t: g^i = live after H_i steps - G; the mean's Nesterov
// step gives G'; the live model takes the steps beside the all-reduce,
// then live = a live + (1 - a) G'.
struct MergeReplay {
  MergeReplay(float target, const v1::JobSpec& spec)
      : trainer(testing::FakeLayout(), target),
        start(Values(trainer.params())),
        v(start.size(), 0.0),
        lr(spec.outer().lr()),
        mu(spec.outer().mu()),
        alpha(spec.outer().overlap_merge_alpha()) {}
  std::vector<double> Local(uint32_t planned) {
    for (uint32_t h = 0; h < planned; ++h) EXPECT_TRUE(trainer.Step().ok());
    std::vector<double> g(start.size());
    for (size_t k = 0; k < g.size(); ++k)
      g[k] = trainer.params().flat()[k] - start[k];
    return g;
  }
  void OuterStepBesideAndMerge(const std::vector<double>& mean,
                               uint32_t beside) {
    for (size_t k = 0; k < mean.size(); ++k) {
      v[k] = mu * v[k] + mean[k];
      start[k] = static_cast<float>(start[k] + lr * (mean[k] + mu * v[k]));
    }
    for (uint32_t h = 0; h < beside; ++h) EXPECT_TRUE(trainer.Step().ok());
    float* live = trainer.params().data();
    for (size_t k = 0; k < mean.size(); ++k)
      live[k] = static_cast<float>(alpha * live[k] + (1 - alpha) * start[k]);
  }
  testing::FakeTrainer trainer;
  std::vector<float> start;
  std::vector<double> v;
  double lr, mu, alpha;
};

// DiLoCo with Streaming DiLoCo's merge (outer.overlap_update MERGE, a =
// 0.3): three replicas, the third 250 ms a step, so the fast two step
// beside the all-reduce. Over four rounds the replicas agree on the round
// start G (same checksum, same replicated parameters) and each live model
// is a live + (1 - a) G after its own steps beside, matching a replay in
// plain loops from the reports' step counts. Under the default DELAYED
// rule, round 0's G is the same and its live models are not the replay's
// (the option is what changes them).
TEST(OverlappedExchange, DilocoMergeFollowsStreamingDilocosRule) {
  v1::JobSpec spec = Spec(v1::ALGORITHM_DILOCO);
  spec.mutable_outer()->set_local_steps(10);
  spec.mutable_outer()->set_min_local_steps(1);
  spec.mutable_outer()->set_overlap_exchange(true);
  spec.mutable_outer()->set_overlap_update(v1::OVERLAP_UPDATE_MERGE);
  spec.mutable_outer()->set_overlap_merge_alpha(0.3f);
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  constexpr uint32_t kSteps = 4;
  constexpr int kRounds = 4;
  const float targets[] = {+1.0f, -1.0f, +0.5f};
  for (bool merge : {true, false}) {
    SCOPED_TRACE(merge ? "MERGE" : "DELAYED");
    v1::JobSpec job = spec;
    if (!merge) {
      job.mutable_outer()->set_overlap_update(v1::OVERLAP_UPDATE_DELAYED);
      job.mutable_outer()->clear_overlap_merge_alpha();
    }
    InProcessNetwork network;
    std::vector<std::unique_ptr<SimWorker>> w;
    for (uint64_t id = 1; id <= 3; ++id)
      w.push_back(
          std::make_unique<SimWorker>(network, id, job, targets[id - 1]));
    w[0]->trainer.SleepOnEveryStep(absl::Milliseconds(20));
    w[1]->trainer.SleepOnEveryStep(absl::Milliseconds(20));
    w[2]->trainer.SleepOnEveryStep(absl::Milliseconds(250));
    std::vector<MergeReplay> replay;
    for (float target : targets) replay.emplace_back(target, spec);
    // The delayed rule: round 0's G is the same, its live models are not.
    bool live_matches = true;
    for (int round = 0; round < (merge ? kRounds : 1); ++round) {
      SCOPED_TRACE(round);
      const auto reports = testing::RunAll(
          w, std::vector<v1::Assignment>(
                 3, testing::RingAssignment(round, 3, kSteps)));
      for (const auto& report : reports) {
        ASSERT_TRUE(report.ok()) << report.status();
        EXPECT_EQ(report->failed_peers_size(), 0);
        EXPECT_NE(report->replica_checksum(), 0u);
        EXPECT_EQ(report->replica_checksum(), reports[0]->replica_checksum());
      }
      for (int fast = 0; fast < 2; ++fast)
        EXPECT_EQ(reports[fast]->overlap_steps(), kSteps);
      std::vector<std::vector<double>> g;
      for (auto& r : replay) g.push_back(r.Local(kSteps));
      std::vector<double> mean(g[0].size(), 0.0);
      for (const auto& gi : g)
        for (size_t k = 0; k < mean.size(); ++k) mean[k] += gi[k] / 3;
      for (size_t i = 0; i < replay.size(); ++i)
        replay[i].OuterStepBesideAndMerge(mean, reports[i]->overlap_steps());
      const std::vector<float> shared =
          Values(w[0]->runner.replicated_params());
      for (size_t i = 0; i < w.size(); ++i) {
        SCOPED_TRACE(i);
        EXPECT_EQ(Values(w[i]->runner.replicated_params()), shared);
        const std::vector<float> params = Values(w[i]->trainer.params());
        const std::vector<float> expected = Values(replay[i].trainer.params());
        for (size_t k = 0; k < params.size(); ++k) {
          ASSERT_NEAR(shared[k], replay[i].start[k], 1e-5f) << "element " << k;
          if (merge) {
            ASSERT_NEAR(params[k], expected[k], 1e-5f) << "element " << k;
          } else if (std::abs(params[k] - expected[k]) > 1e-4f) {
            live_matches = false;
          }
        }
      }
    }
    if (!merge) {
      EXPECT_FALSE(live_matches);
    }
  }
}

// INT8 with error feedback under the overlap, the outer step DELAYED or
// EAGER: every round, the three replicas' checksums (over the round's
// result, or the all-reduced mean) agree.
TEST(OverlappedExchange, Int8DilocoReplicasAgreeDelayedOrEager) {
  for (v1::OverlapUpdate update :
       {v1::OVERLAP_UPDATE_DELAYED, v1::OVERLAP_UPDATE_EAGER}) {
    SCOPED_TRACE(v1::OverlapUpdate_Name(update));
    v1::JobSpec spec = Spec(v1::ALGORITHM_DILOCO);
    spec.mutable_outer()->set_overlap_exchange(true);
    spec.mutable_outer()->set_overlap_update(update);
    spec.mutable_exchange()->set_encoding(v1::WIRE_ENCODING_INT8);
    ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
    InProcessNetwork network;
    std::vector<std::unique_ptr<SimWorker>> w;
    const float targets[] = {+1.0f, -1.0f, +0.5f};
    for (uint64_t id = 1; id <= 3; ++id)
      w.push_back(
          std::make_unique<SimWorker>(network, id, spec, targets[id - 1]));
    for (int round = 0; round < 4; ++round) {
      SCOPED_TRACE(round);
      const auto reports = testing::RunAll(
          w, std::vector<v1::Assignment>(
                 3, testing::RingAssignment(round, 3, 4)));
      for (const auto& report : reports) {
        ASSERT_TRUE(report.ok()) << report.status();
        EXPECT_EQ(report->failed_peers_size(), 0);
        EXPECT_NE(report->replica_checksum(), 0u);
        EXPECT_EQ(report->replica_checksum(), reports[0]->replica_checksum());
      }
    }
  }
}

// Eager updates and a failed ring: worker 1's last all-gather step of
// round 0 fails while workers 2 and 3 complete the ring. Worker 1 drops
// the round, its eager step included (its round start is theta_0 again),
// and with no member to re-synchronise from it reports itself behind and
// no checksum: it holds no mean of the round. Before, the runner set
// replica_behind only beside a checksum, so the coordinator would not have
// known.
TEST(OverlappedExchange, DilocoEagerRoundWithAFailedRingIsDropped) {
  v1::JobSpec spec = Spec(v1::ALGORITHM_DILOCO, 2000);
  spec.mutable_outer()->set_local_steps(10);
  spec.mutable_outer()->set_min_local_steps(1);
  spec.mutable_outer()->set_overlap_exchange(true);
  spec.mutable_outer()->set_overlap_update(v1::OVERLAP_UPDATE_EAGER);
  InProcessNetwork network;
  FakeTrainer trainer(FakeLayout(), +1.0f);
  const std::vector<float> theta_0 = Values(trainer.params());
  testing::FailStepTransport<InProcessTransport> transport(
      network.Join(1), TransferKey{.job_id = testing::kJob,
                                   .round = 0,
                                   .phase = v1::EXCHANGE_PHASE_ALL_GATHER,
                                   .step = 1});
  RoundRunner first({testing::kJob, spec, {}}, &trainer, &transport,
                    &RealClock::Get());
  SimWorker second(network, 2, spec, -1.0f), third(network, 3, spec, 0.5f);
  const v1::Assignment assignment = testing::RingAssignment(0, 3, 4);
  absl::StatusOr<v1::ReportRoundRequest> failed = absl::UnknownError("not run");
  std::thread t([&] { failed = first.RunRound(assignment); });
  auto r2 = std::async(std::launch::async,
                       [&] { return second.runner.RunRound(assignment); });
  auto r3 = third.runner.RunRound(assignment);
  auto r2_report = r2.get();
  t.join();
  ASSERT_TRUE(failed.ok()) << failed.status();
  EXPECT_GT(failed->failed_peers_size(), 0);
  EXPECT_EQ(failed->replica_checksum(), 0u);
  EXPECT_TRUE(failed->replica_behind());
  EXPECT_EQ(Values(first.replicated_params()), theta_0);
  for (const auto* report : {&r2_report, &r3}) {
    ASSERT_TRUE(report->ok()) << report->status();
    EXPECT_NE((*report)->replica_checksum(), 0u);
    EXPECT_EQ((*report)->replica_checksum(), r2_report->replica_checksum());
    EXPECT_FALSE((*report)->replica_behind());
  }
}

}  // namespace
}  // namespace gasloc
