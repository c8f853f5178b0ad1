#include "worker/round/round_runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/wait_for.h"
#include "tests/worker/round/fail_step_transport.h"
#include "tests/worker/round/fake_trainer.h"
#include "tests/worker/round/sim_worker.h"
#include "worker/exchange/in_process_transport.h"
#include "worker/round/outer_optimizer.h"

namespace gasloc {
namespace {

using testing::FakeLayout;
using testing::FakeTrainer;
using testing::GossipAssignment;
using testing::kJob;
using testing::RingAssignment;
using testing::RunAll;
using testing::SimWorker;
using testing::Spec;

TEST(RoundRunner, GossipPairMovesTheWorkersTogether) {
  InProcessNetwork network;
  v1::JobSpec spec = Spec(v1::ALGORITHM_GASLOC);
  spec.mutable_outer()->set_momentum_placement(v1::MOMENTUM_PLACEMENT_LOCAL);
  std::vector<std::unique_ptr<SimWorker>> w;
  w.push_back(std::make_unique<SimWorker>(network, 1, spec, +1.0f));
  w.push_back(std::make_unique<SimWorker>(network, 2, spec, -1.0f));
  for (uint64_t round = 0; round < 3; ++round) {
    auto reports = RunAll(w, {GossipAssignment(round, 1, {2}, 0.5f, 5),
                              GossipAssignment(round, 2, {1}, 0.5f, 5)});
    for (auto& r : reports) {
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->failed_peers_size(), 0);
      EXPECT_GT(r->bytes_sent(), 0u);
      EXPECT_EQ(r->inner_steps(), 5u);
    }
    // Averaging removes the gap between the exchanged post-local iterates
    // (the pull to +1 / -1); what remains is the momentum term. In round 0
    // (y_prev = theta_0 on both) it is exactly gamma * ||y_1 - y_2||.
    const double after = L2Distance(w[0]->trainer.params().flat(),
                                    w[1]->trainer.params().flat());
    EXPECT_GT(reports[0]->peer_distance(), 0.0f);
    EXPECT_LT(after, reports[0]->peer_distance()) << "round " << round;
    if (round == 0) {
      EXPECT_NEAR(after, 0.9 * reports[0]->peer_distance(),
                  1e-4 * reports[0]->peer_distance());
    }
    EXPECT_EQ(w[0]->runner.next_round(), round + 1);
  }
}

// The report carries the wire time (bytes moving) beside the whole
// exchange time, one link sample per peer, and waiting = the rest
// (algorithms.md section 5). A model of 4 chunks, so the receive's wire
// time is measured by the worker that registered its receive first (the
// other one's bytes may have been buffered before it registered: then it
// reports no wire time and no sample, never a made-up one).
TEST(RoundRunner, GossipReportsWireTimeAndALinkSamplePerPeer) {
  InProcessNetwork network;
  const v1::JobSpec spec = Spec(v1::ALGORITHM_GASLOC);  // 4096-byte chunks
  FakeTrainer t1(FakeLayout(64, 64), +1.0f), t2(FakeLayout(64, 64), -1.0f);
  auto x1 = network.Join(1), x2 = network.Join(2);
  RoundRunner r1({kJob, spec, {}}, &t1, x1.get(), &RealClock::Get());
  RoundRunner r2({kJob, spec, {}}, &t2, x2.get(), &RealClock::Get());
  absl::StatusOr<v1::ReportRoundRequest> a = absl::UnknownError("not run"), b = a;
  std::thread other(
      [&] { b = r2.RunRound(GossipAssignment(0, 2, {1}, 0.5f, 2)); });
  a = r1.RunRound(GossipAssignment(0, 1, {2}, 0.5f, 2));
  other.join();
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_GT(a->link_samples_size() + b->link_samples_size(), 0);
  for (const auto* r : {&a, &b}) {
    const v1::ReportRoundRequest& rep = **r;
    if (rep.link_samples_size() == 0) {
      EXPECT_EQ(rep.wire_seconds(), 0);
      continue;
    }
    EXPECT_GT(rep.wire_seconds(), 0);
    EXPECT_LE(rep.wire_seconds(), rep.exchange_seconds());
    EXPECT_NEAR(rep.wait_seconds(), rep.exchange_seconds() - rep.wire_seconds(),
                1e-9);
    ASSERT_EQ(rep.link_samples_size(), 1);
    // The model's bytes (bytes_received also counts the 4-byte edge
    // confirmation, which is no link sample).
    EXPECT_EQ(rep.link_samples(0).bytes(), rep.bytes_received() - 4);
    EXPECT_GT(rep.link_samples(0).bytes(), 4096u) << "more than one chunk";
    EXPECT_DOUBLE_EQ(rep.link_samples(0).wire_seconds(), rep.wire_seconds());
  }
  if (a->link_samples_size() > 0) {
    EXPECT_EQ(a->link_samples(0).peer_id(), 2u);
  }
  if (b->link_samples_size() > 0) {
    EXPECT_EQ(b->link_samples(0).peer_id(), 1u);
  }
}

// Metrics see every inner step while the round runs: one TRAINING progress
// per step with its tokens, time and the running mean loss, which ends at
// the report's mean. Each step takes 10 ms of a fake clock, so the times
// are exact.
TEST(RoundRunner, ReportsEveryInnerStepAsItRuns) {
  FakeClock clock;
  InProcessNetwork network(MailboxOptions{.clock = &clock});
  const v1::JobSpec spec = Spec(v1::ALGORITHM_GASLOC);
  FakeTrainer trainer(FakeLayout(), 1.0f);
  trainer.TakeTimeOn(&clock, absl::Milliseconds(10));
  auto transport = network.Join(1);
  std::vector<RoundProgress> steps;
  RoundRunnerOptions options{kJob, spec, [&](const RoundProgress& p) {
                               if (p.step_tokens > 0) steps.push_back(p);
                             }};
  RoundRunner runner(options, &trainer, transport.get(), &clock);
  auto report = runner.RunRound(GossipAssignment(0, 1, {}, 0.5f, 6));
  ASSERT_TRUE(report.ok()) << report.status();
  ASSERT_EQ(steps.size(), 6u);
  uint64_t tokens = 0;
  for (size_t h = 0; h < steps.size(); ++h) {
    EXPECT_EQ(steps[h].inner_step, h + 1);
    EXPECT_DOUBLE_EQ(steps[h].step_seconds, 0.01) << "step " << h;
    EXPECT_NEAR(steps[h].steps_per_second, 100.0, 1e-9) << "step " << h;
    tokens += steps[h].step_tokens;
  }
  EXPECT_EQ(tokens, report->tokens());
  EXPECT_EQ(report->worker_id(), 1u);  // the transport's id
  EXPECT_NEAR(report->compute_seconds(), 0.06, 1e-12);
  EXPECT_NEAR(steps.back().round_mean_loss, report->train_loss(), 1e-5);
  EXPECT_TRUE(runner.failure_codes().empty());
}

// The learning-rate schedule follows the job's rounds, not a worker's own
// step count: with H = 8, a worker given 32 steps in round 0 and one given
// 2 both start round 1 at schedule step 8. Before, the schedule was the
// step count, so a fast worker computing through long rounds reached the
// end of the cosine (max_rounds * H) in a fraction of the job and ran the
// rest at the minimum rate, and a slow-link worker at H_min stayed in
// warmup (issue 16's one-slow-link sweep: fast workers at 1.7x the decay
// horizon).
TEST(RoundRunner, TheScheduleFollowsTheRoundsWhateverTheBudget) {
  v1::JobSpec spec = Spec(v1::ALGORITHM_GASLOC);
  spec.mutable_outer()->set_local_steps(8);
  for (const uint32_t budget : {32u, 8u, 2u}) {
    SCOPED_TRACE(absl::StrCat("H_i = ", budget));
    InProcessNetwork network;
    SimWorker w(network, 1, spec, 1.0f);
    ASSERT_TRUE(w.runner.RunRound(GossipAssignment(0, 1, {}, 0.5f, budget)).ok());
    ASSERT_TRUE(w.runner.RunRound(GossipAssignment(1, 1, {}, 0.5f, budget)).ok());
    const std::vector<uint64_t>& s = w.trainer.schedule_steps();
    ASSERT_EQ(s.size(), 2u * budget);
    EXPECT_EQ(s.front(), 0u);
    EXPECT_EQ(s[budget], 8u);  // round 1's first step
    EXPECT_EQ(s.back(), 8u + (budget - 1) * 8 / budget);
    EXPECT_TRUE(std::is_sorted(s.begin(), s.end()));
  }
  EXPECT_EQ(ScheduleStep(3, 80, 80, 5), 245u);  // H_i = H: the step count
  EXPECT_EQ(ScheduleStep(3, 80, 320, 160), 280u);
  EXPECT_EQ(ScheduleStep(3, 80, 0, 0), 240u);
}

// Issue 32 item 5: a round the coordinator placed on the job's horizon
// (wall-clock, tokens) has its steps' cosine follow the horizon fraction,
// from the round's start to its planned end, whatever the budget; the
// step positions (the warmup) are as before. Without a schedule the
// steps carry no fraction (the rounds x H schedule, unchanged).
TEST(RoundRunner, StepsTakeTheAssignmentsHorizonProgress) {
  v1::JobSpec spec = Spec(v1::ALGORITHM_GASLOC);
  spec.mutable_outer()->set_local_steps(8);
  InProcessNetwork network;
  SimWorker w(network, 1, spec, 1.0f);
  v1::Assignment placed = GossipAssignment(3, 1, {}, 0.5f, 4);
  placed.set_has_schedule(true);
  placed.set_schedule_progress_begin(0.25);
  placed.set_schedule_progress_end(0.5);
  ASSERT_TRUE(w.runner.RunRound(placed).ok());
  ASSERT_TRUE(w.runner.RunRound(GossipAssignment(4, 1, {}, 0.5f, 2)).ok());
  EXPECT_THAT(w.trainer.schedule_progress(),
              ::testing::ElementsAre(0.25, 0.3125, 0.375, 0.4375, -1, -1));
  EXPECT_THAT(w.trainer.schedule_steps(),
              ::testing::ElementsAre(24, 26, 28, 30, 32, 36));
  // Steps beside the exchange are at the round's planned end.
  EXPECT_EQ(ScheduleProgressAtEnd(placed), 0.5);
  EXPECT_EQ(ScheduleProgressAtEnd(GossipAssignment(3, 1, {}, 0.5f, 4)),
            std::nullopt);
}

TEST(RoundRunner, GossipWithoutMomentumAveragesExactly) {
  InProcessNetwork network;
  v1::JobSpec spec = Spec(v1::ALGORITHM_GASLOC);
  spec.mutable_outer()->set_gamma(0.0f);
  spec.mutable_outer()->set_eta(1.0f);
  std::vector<std::unique_ptr<SimWorker>> w;
  w.push_back(std::make_unique<SimWorker>(network, 1, spec, +1.0f));
  w.push_back(std::make_unique<SimWorker>(network, 2, spec, -1.0f));
  auto reports = RunAll(w, {GossipAssignment(0, 1, {2}, 0.5f, 3),
                            GossipAssignment(0, 2, {1}, 0.5f, 3)});
  ASSERT_TRUE(reports[0].ok() && reports[1].ok());
  // Both hold (y_1 + y_2) / 2, up to float rounding of the two orders.
  EXPECT_GT(reports[0]->peer_distance(), 1.0f);
  EXPECT_LT(L2Distance(w[0]->trainer.params().flat(),
                       w[1]->trainer.params().flat()),
            1e-5);
}

// With bf16 on the wire each end sees the other's y rounded to bf16. The
// gossip term uses the rounded value of BOTH ends (antisymmetric), so the
// pair's sum is what it was, to fp32 rounding, however many rounds run:
// rounds with no inner steps and no momentum move only by gossip.
TEST(RoundRunner, Bf16GossipPreservesThePairMean) {
  InProcessNetwork network;
  v1::JobSpec spec = Spec(v1::ALGORITHM_GASLOC);
  spec.mutable_outer()->set_gamma(0.0f);
  spec.mutable_outer()->set_eta(1.0f);
  spec.mutable_exchange()->set_encoding(v1::WIRE_ENCODING_BF16);
  std::vector<std::unique_ptr<SimWorker>> w;
  w.push_back(std::make_unique<SimWorker>(network, 1, spec, +1.3f));
  w.push_back(std::make_unique<SimWorker>(network, 2, spec, -0.7f));
  // Round 0 trains (the workers differ); no gossip yet (no peers).
  auto reports = RunAll(w, {GossipAssignment(0, 1, {}, 0.25f, 3),
                            GossipAssignment(0, 2, {}, 0.25f, 3)});
  ASSERT_TRUE(reports[0].ok() && reports[1].ok());
  const size_t n = w[0]->trainer.params().size();
  auto pair_sum = [&] {
    std::vector<double> sum(n);
    for (size_t k = 0; k < n; ++k)
      sum[k] = static_cast<double>(w[0]->trainer.params().data()[k]) +
               w[1]->trainer.params().data()[k];
    return sum;
  };
  const std::vector<double> before = pair_sum();
  for (uint64_t round = 1; round <= 40; ++round) {
    reports = RunAll(w, {GossipAssignment(round, 1, {2}, 0.25f, 0),
                         GossipAssignment(round, 2, {1}, 0.25f, 0)});
    ASSERT_TRUE(reports[0].ok() && reports[1].ok());
    ASSERT_EQ(reports[0]->failed_peers_size(), 0);
  }
  const std::vector<double> after = pair_sum();
  double worst = 0;
  for (size_t k = 0; k < n; ++k)
    worst = std::max(worst, std::abs(after[k] - before[k]) /
                                (1.0 + std::abs(before[k])));
  // fp32 rounding of 40 updates is ~40 * 6e-8; bf16 drift is ~1e-3.
  EXPECT_LT(worst, 1e-5);
  // And gossip still pulls them together (to within bf16 resolution).
  EXPECT_LT(L2Distance(w[0]->trainer.params().flat(),
                       w[1]->trainer.params().flat()),
            0.05);
}

// A worker with two peers reports the RMS of its distances to both (the
// neighbourhood estimate of the spread), not the distance to whichever
// peer came last. Round 1 has no inner steps and eta = 1, so the gossiped
// y's are the parameters after round 0.
TEST(RoundRunner, PeerDistanceIsTheRmsOverTheRoundsPeers) {
  InProcessNetwork network;
  v1::JobSpec spec = Spec(v1::ALGORITHM_GASLOC);
  spec.mutable_outer()->set_eta(1.0f);
  spec.mutable_outer()->set_gamma(0.0f);
  std::vector<std::unique_ptr<SimWorker>> w;
  for (uint64_t id = 1; id <= 3; ++id)
    w.push_back(std::make_unique<SimWorker>(network, id, spec,
                                            id == 3 ? 4.0f : 1.0f - id));
  auto reports = RunAll(w, {GossipAssignment(0, 1, {}, 0.25f, 3),
                            GossipAssignment(0, 2, {}, 0.25f, 3),
                            GossipAssignment(0, 3, {}, 0.25f, 3)});
  std::vector<FloatArena> y;
  for (auto& worker : w) y.push_back(worker->trainer.params());
  reports = RunAll(w, {GossipAssignment(1, 1, {2, 3}, 0.25f, 0),
                       GossipAssignment(1, 2, {1, 3}, 0.25f, 0),
                       GossipAssignment(1, 3, {1, 2}, 0.25f, 0)});
  ASSERT_TRUE(reports[0].ok()) << reports[0].status();
  const double d12 = L2Distance(y[0].flat(), y[1].flat());
  const double d13 = L2Distance(y[0].flat(), y[2].flat());
  EXPECT_NEAR(reports[0]->peer_distance(),
              std::sqrt((d12 * d12 + d13 * d13) / 2), 1e-4 * d13);
}

// Three ring workers (ids 1..3) pulled toward targets scale * id.
std::vector<std::unique_ptr<SimWorker>> RingWorkers(InProcessNetwork& network,
                                                    const v1::JobSpec& spec,
                                                    float scale) {
  std::vector<std::unique_ptr<SimWorker>> w;
  for (int i = 1; i <= 3; ++i)
    w.push_back(std::make_unique<SimWorker>(network, i, spec, i * scale));
  return w;
}

// Runs one ring round of `steps` inner steps on all three workers.
void RunRingRound(std::vector<std::unique_ptr<SimWorker>>& w, uint64_t round,
                  uint32_t steps) {
  auto reports = RunAll(w, {RingAssignment(round, 3, steps),
                            RingAssignment(round, 3, steps),
                            RingAssignment(round, 3, steps)});
  for (auto& r : reports) ASSERT_TRUE(r.ok()) << r.status();
}

// 0 if every worker's parameters equal worker 1's bit for bit, else the id
// of the first that differs.
int FirstDifferentWorker(const std::vector<std::unique_ptr<SimWorker>>& w) {
  for (size_t i = 1; i < w.size(); ++i)
    if (std::memcmp(w[0]->trainer.params().data(), w[i]->trainer.params().data(),
                    w[0]->trainer.params().size() * 4) != 0)
      return static_cast<int>(i + 1);
  return 0;
}

TEST(RoundRunner, DiLoCoLeavesWorkersBitIdentical) {
  InProcessNetwork network;
  auto w = RingWorkers(network, Spec(v1::ALGORITHM_DILOCO), 0.5f);
  for (uint64_t round = 0; round < 3; ++round) {
    ASSERT_NO_FATAL_FAILURE(RunRingRound(w, round, 4));
    ASSERT_EQ(FirstDifferentWorker(w), 0) << "after round " << round;
  }
}

// The MIXED and PSEUDO_GRADIENT momentum placements on the complete graph
// (alpha 1/3, weight 1, eta = lr, gamma = mu) run the same rounds as
// DiLoCo: every worker's parameters equal its DiLoCo counterpart's after
// every round (to float rounding: the ring sums in another order), though
// the workers pull toward different targets.
void ExpectCompleteGraphEqualsDiLoCoPerWorker(v1::MomentumPlacement placement) {
  SCOPED_TRACE(v1::MomentumPlacement_Name(placement));
  InProcessNetwork diloco_net, gossip_net;
  auto diloco = RingWorkers(diloco_net, Spec(v1::ALGORITHM_DILOCO), 0.5f);
  v1::JobSpec spec = Spec(v1::ALGORITHM_GASLOC);
  spec.mutable_outer()->set_eta(0.7f);
  spec.mutable_outer()->set_gamma(0.9f);
  spec.mutable_outer()->set_topology(v1::TOPOLOGY_COMPLETE);
  spec.mutable_outer()->set_momentum_placement(placement);
  auto gossip = RingWorkers(gossip_net, spec, 0.5f);
  for (uint64_t round = 0; round < 4; ++round) {
    ASSERT_NO_FATAL_FAILURE(RunRingRound(diloco, round, 4));
    std::vector<v1::Assignment> assignments;
    for (uint64_t i = 1; i <= 3; ++i) {
      std::vector<uint64_t> others;
      for (uint64_t j = 1; j <= 3; ++j)
        if (j != i) others.push_back(j);
      assignments.push_back(GossipAssignment(round, i, others, 1.0f / 3, 4));
    }
    for (auto& r : RunAll(gossip, assignments)) ASSERT_TRUE(r.ok()) << r.status();
    for (int i = 0; i < 3; ++i) {
      const FloatArena& a = diloco[i]->trainer.params();
      const FloatArena& b = gossip[i]->trainer.params();
      for (size_t k = 0; k < a.size(); ++k)
        ASSERT_NEAR(a.data()[k], b.data()[k], 1e-5)
            << "worker " << i + 1 << " round " << round << " element " << k;
    }
  }
}

TEST(RoundRunner, MixedPlacementOnTheCompleteGraphEqualsDiLoCoPerWorker) {
  ExpectCompleteGraphEqualsDiLoCoPerWorker(v1::MOMENTUM_PLACEMENT_MIXED);
}

TEST(RoundRunner, PseudoGradientPlacementOnTheCompleteGraphEqualsDiLoCoPerWorker) {
  ExpectCompleteGraphEqualsDiLoCoPerWorker(
      v1::MOMENTUM_PLACEMENT_PSEUDO_GRADIENT);
}

// The fault case the soak found (docs/benchmarks.md, "Fault-injection
// soak"): two workers that start apart and do no inner steps reach
// consensus in one gossip round (alpha 1/2), then lose their edges for
// three rounds. Nothing trains, so nothing should move. LOCAL and MIXED
// carry the mixing jump forward in y - y_prev: the workers part again and
// end 0.9 + 0.81 + 0.729 = 2.44 times as far apart as they started.
// PSEUDO_GRADIENT's momentum holds only pseudo-gradients (zero here), so
// the consensus stays.
double DistanceAfterConsensusThenFailedEdges(v1::MomentumPlacement placement) {
  InProcessNetwork network;
  v1::JobSpec spec = Spec(v1::ALGORITHM_GASLOC);
  spec.mutable_outer()->set_gamma(0.9f);
  spec.mutable_outer()->set_momentum_placement(placement);
  FakeTrainer t1(FakeLayout(), 0.0f), t2(FakeLayout(), 0.0f);
  for (size_t k = 0; k < t2.params().size(); ++k) t2.params().data()[k] += 1.0f;
  const double start = L2Distance(t1.params().flat(), t2.params().flat());
  auto x1 = network.Join(1), x2 = network.Join(2);
  RoundRunner r1({kJob, spec, {}}, &t1, x1.get(), &RealClock::Get());
  RoundRunner r2({kJob, spec, {}}, &t2, x2.get(), &RealClock::Get());
  for (uint64_t round = 0; round < 4; ++round) {
    const bool gossip = round == 0;
    absl::StatusOr<v1::ReportRoundRequest> a = absl::UnknownError("not run");
    absl::StatusOr<v1::ReportRoundRequest> b = a;
    std::thread other([&] {
      b = r2.RunRound(GossipAssignment(round, 2, gossip ? std::vector<uint64_t>{1}
                                                        : std::vector<uint64_t>{},
                                       0.5f, 0));
    });
    a = r1.RunRound(GossipAssignment(round, 1, gossip ? std::vector<uint64_t>{2}
                                                      : std::vector<uint64_t>{},
                                     0.5f, 0));
    other.join();
    EXPECT_TRUE(a.ok() && b.ok());
    if (round == 0) {
      EXPECT_LT(L2Distance(t1.params().flat(), t2.params().flat()), 1e-5 * start);
    }
  }
  return L2Distance(t1.params().flat(), t2.params().flat()) / start;
}

TEST(RoundRunner, PseudoGradientMomentumDoesNotRepeatAConsensusStep) {
  EXPECT_LT(DistanceAfterConsensusThenFailedEdges(
                v1::MOMENTUM_PLACEMENT_PSEUDO_GRADIENT),
            1e-5);
  // What the other placements do (the mechanism, measured): 2.44x apart.
  EXPECT_NEAR(DistanceAfterConsensusThenFailedEdges(v1::MOMENTUM_PLACEMENT_LOCAL),
              2.439, 1e-3);
  EXPECT_NEAR(DistanceAfterConsensusThenFailedEdges(v1::MOMENTUM_PLACEMENT_MIXED),
              2.439, 1e-3);
}

// Worker 1's all-reduce fails at the last step of round 1 while workers 2
// and 3 complete it: worker 1 applies nothing and fetches the model and
// momentum of a member that completed the round, so the DiLoCo replicas
// stay bit-identical through it and after it. (Before, it applied its own
// pseudo-gradient and the replicas parted for good.)
void ExpectDiLoCoReplicasResynchronise(v1::WireEncoding encoding) {
  InProcessNetwork network;
  v1::JobSpec spec = Spec(v1::ALGORITHM_DILOCO, 2000);
  spec.mutable_exchange()->set_encoding(encoding);
  struct Replica {
    explicit Replica(FakeTrainer t) : trainer(std::move(t)) {}
    FakeTrainer trainer;
    std::unique_ptr<PeerTransport> transport;
    std::unique_ptr<RoundRunner> runner;
    std::atomic<uint64_t> finished{0};
  };
  std::vector<std::unique_ptr<Replica>> w;
  for (uint64_t id = 1; id <= 3; ++id) {
    auto r = std::make_unique<Replica>(
        FakeTrainer(FakeLayout(), 0.5f * static_cast<float>(id)));
    if (id == 1) {
      r->transport = std::make_unique<testing::FailStepTransport<InProcessTransport>>(
          network.Join(id),
          TransferKey{.job_id = kJob,
                      .round = 1,
                      .phase = v1::EXCHANGE_PHASE_ALL_GATHER,
                      .step = 1});
    } else {
      r->transport = network.Join(id);
    }
    r->runner = std::make_unique<RoundRunner>(
        RoundRunnerOptions{kJob, spec, {}}, &r->trainer, r->transport.get(),
        &RealClock::Get());
    w.push_back(std::move(r));
  }
  for (size_t i = 0; i < w.size(); ++i) {
    w[i]->runner->set_resync_fetcher(
        [&, i](const v1::PeerAssignment& member) -> absl::StatusOr<FetchedModel> {
          Replica& source = *w[member.worker_id() - 1];
          // Like the daemon: served between the member's rounds.
          const uint64_t want = w[i]->finished.load() + 1;
          if (!WaitFor([&] { return source.finished.load() >= want; },
                       absl::Seconds(3)))
            return absl::UnavailableError("member still in its round");
          FetchedModel model;
          model.job_id = kJob;
          model.sender_id = member.worker_id();
          model.round = source.runner->next_round();
          const auto params = source.trainer.params().flat();
          const auto outer = source.runner->outer_state().flat();
          model.params.assign(params.begin(), params.end());
          model.outer_state.assign(outer.begin(), outer.end());
          return model;
        });
  }
  for (uint64_t round = 0; round < 4; ++round) {
    std::vector<absl::StatusOr<v1::ReportRoundRequest>> reports(
        w.size(), absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (size_t i = 0; i < w.size(); ++i)
      threads.emplace_back([&, i] {
        reports[i] = w[i]->runner->RunRound(RingAssignment(round, 3, 4));
        ++w[i]->finished;
      });
    for (auto& t : threads) t.join();
    for (size_t i = 0; i < w.size(); ++i) {
      ASSERT_TRUE(reports[i].ok()) << reports[i].status();
      EXPECT_EQ(reports[i]->failed_peers_size() > 0, round == 1 && i == 0)
          << "worker " << i + 1 << " round " << round;
      EXPECT_EQ(w[i]->runner->next_round(), round + 1);
      // The replicas agree, so their checksums do (the coordinator's view).
      EXPECT_NE(reports[i]->replica_checksum(), 0u);
      EXPECT_EQ(reports[i]->replica_checksum(), reports[0]->replica_checksum())
          << "worker " << i + 1 << " round " << round;
      EXPECT_FALSE(reports[i]->replica_behind());
      EXPECT_EQ(reports[i]->resynced_from() != 0, round == 1 && i == 0);
    }
    for (size_t i = 1; i < w.size(); ++i) {
      const size_t bytes = w[0]->trainer.params().size() * 4;
      ASSERT_EQ(0, std::memcmp(w[0]->trainer.params().data(),
                               w[i]->trainer.params().data(), bytes))
          << "worker " << i + 1 << " after round " << round;
      ASSERT_EQ(0, std::memcmp(w[0]->runner->momentum().data(),
                               w[i]->runner->momentum().data(), bytes))
          << "momentum of worker " << i + 1 << " after round " << round;
    }
  }
  EXPECT_EQ(w[0]->runner->resyncs(), 1u);
  EXPECT_EQ(w[1]->runner->resyncs(), 0u);
}

TEST(RoundRunner, DiLoCoReplicasResynchroniseAfterARingFailure) {
  ExpectDiLoCoReplicasResynchronise(v1::WIRE_ENCODING_FP32);
}

// The same with INT8 and error feedback: the failed worker's residual is
// reset and its replica re-synchronised; all three stay bit-identical.
TEST(RoundRunner, Int8DiLoCoReplicasResynchroniseAfterARingFailure) {
  ExpectDiLoCoReplicasResynchronise(v1::WIRE_ENCODING_INT8);
}

// INT8 for every all-reduce algorithm: the replicas stay bit-identical
// round after round (each segment's mean is rounded once, by its owner,
// and re-encodes to the same bytes at every hop), the bytes sent are
// about a quarter of FP32's, and the result stays near FP32's.
TEST(RoundRunner, Int8AllReduceStaysBitIdenticalOnAQuarterOfTheBytes) {
  for (v1::Algorithm algorithm :
       {v1::ALGORITHM_DILOCO, v1::ALGORITHM_LOCAL_SGD,
        v1::ALGORITHM_DATA_PARALLEL}) {
    SCOPED_TRACE(v1::Algorithm_Name(algorithm));
    const uint32_t steps = algorithm == v1::ALGORITHM_DATA_PARALLEL ? 1 : 4;
    InProcessNetwork fp32_net, int8_net;
    v1::JobSpec spec = Spec(algorithm);
    auto fp32 = RingWorkers(fp32_net, spec, 0.5f);
    spec.mutable_exchange()->set_encoding(v1::WIRE_ENCODING_INT8);
    auto int8 = RingWorkers(int8_net, spec, 0.5f);
    uint64_t fp32_bytes = 0, int8_bytes = 0;
    for (uint64_t round = 0; round < 6; ++round) {
      for (auto* w : {&fp32, &int8}) {
        auto reports = RunAll(*w, {RingAssignment(round, 3, steps),
                                   RingAssignment(round, 3, steps),
                                   RingAssignment(round, 3, steps)});
        for (auto& r : reports) {
          ASSERT_TRUE(r.ok()) << r.status();
          ASSERT_EQ(r->failed_peers_size(), 0);
          (w == &fp32 ? fp32_bytes : int8_bytes) += r->bytes_sent();
        }
      }
      ASSERT_EQ(FirstDifferentWorker(int8), 0) << "after round " << round;
    }
    // 360 floats in segments of 112-128: 3.88x with a scale per segment.
    EXPECT_GT(static_cast<double>(fp32_bytes) / int8_bytes, 3.8);
    const FloatArena& a = fp32[0]->trainer.params();
    const FloatArena& b = int8[0]->trainer.params();
    for (size_t k = 0; k < a.size(); ++k)
      ASSERT_NEAR(a.data()[k], b.data()[k], 0.02) << k;
  }
}

TEST(RoundRunner, DataParallelAveragesGradientsEveryStep) {
  InProcessNetwork network;
  auto w = RingWorkers(network, Spec(v1::ALGORITHM_DATA_PARALLEL), 1.0f);
  for (uint64_t round = 0; round < 4; ++round)
    ASSERT_NO_FATAL_FAILURE(RunRingRound(w, round, 1));
  EXPECT_EQ(FirstDifferentWorker(w), 0);
  // The average gradient pulls toward the mean target (2.0).
  EXPECT_GT(w[0]->trainer.params().data()[0], 0.3f);
}

// Worker 2 never shows up: the round waits for it until the exchange
// deadline of the runner's clock, not longer, then applies the update
// without it. The clock is fake: the test moves it to the deadline.
TEST(RoundRunner, AbsentPeerIsDroppedAtTheDeadline) {
  FakeClock clock;
  InProcessNetwork network(MailboxOptions{.clock = &clock});
  const v1::JobSpec spec = Spec(v1::ALGORITHM_GASLOC, /*deadline_ms=*/400);
  FakeTrainer trainer(FakeLayout(), 1.0f);
  auto transport = network.Join(1);
  RoundRunner runner({kJob, spec, {}}, &trainer, transport.get(), &clock);
  absl::StatusOr<v1::ReportRoundRequest> report;
  std::thread round(
      [&] { report = runner.RunRound(GossipAssignment(0, 1, {2}, 0.5f, 2)); });
  clock.AwaitWaiters(1);  // the receive from worker 2 waits
  clock.Advance(absl::Milliseconds(400));
  round.join();
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_THAT(report->failed_peers(), ::testing::ElementsAre(2u));
  // The send to the absent worker fails first (sends come first), at once;
  // the receive from it ended at the deadline, not before.
  EXPECT_THAT(runner.failure_codes(),
              ::testing::ElementsAre(absl::StatusCode::kUnavailable));
  EXPECT_FALSE(report->failure_reason().empty());
  EXPECT_DOUBLE_EQ(report->exchange_seconds(), 0.4);
  EXPECT_TRUE(AllFinite(trainer.params().flat()));
  EXPECT_EQ(runner.next_round(), 1u);
}

TEST(RoundRunner, CorruptedPeerDataNeverReachesTheModel) {
  InProcessNetwork network;
  v1::JobSpec spec = Spec(v1::ALGORITHM_GASLOC, 2000);
  spec.mutable_outer()->set_gamma(0.0f);
  std::vector<std::unique_ptr<SimWorker>> w;
  w.push_back(std::make_unique<SimWorker>(network, 1, spec, +1.0f));
  w.push_back(std::make_unique<SimWorker>(network, 2, spec, -1.0f));
  network.AddFault(InProcessFault::CorruptChunk(2, 1, 0));
  auto reports = RunAll(w, {GossipAssignment(0, 1, {2}, 0.5f, 2),
                            GossipAssignment(0, 2, {1}, 0.5f, 2)});
  ASSERT_TRUE(reports[0].ok() && reports[1].ok());
  // Both ends drop the edge: each applies the no-peer update, so neither
  // saw the other's state.
  EXPECT_THAT(reports[0]->failed_peers(), ::testing::ElementsAre(2u));
  EXPECT_THAT(reports[1]->failed_peers(), ::testing::ElementsAre(1u));
  EXPECT_EQ(w[0]->runner.failure_codes().size(), 1u);
  EXPECT_EQ(w[1]->runner.failure_codes().size(), 1u);
  EXPECT_GT(w[0]->trainer.params().data()[0], 0.0f);
  EXPECT_LT(w[1]->trainer.params().data()[0], 0.0f);
}

// Poisoning guard: after honest rounds, worker 2 gossips a model far from
// everything it sent before (its parameters overwritten). Worker 1 refuses
// it for the round (counted, reported in refused_peers and failed_peers,
// its model untouched by it), the edge is dropped at both ends, and the
// next honest round is used again.
TEST(RoundRunner, FarAwayModelIsRefusedAndCounted) {
  InProcessNetwork network;
  v1::JobSpec spec = Spec(v1::ALGORITHM_GASLOC, 2000);
  ASSERT_EQ(spec.exchange().poison_distance_ratio(), 10.0f);  // the default
  std::vector<std::unique_ptr<SimWorker>> w;
  w.push_back(std::make_unique<SimWorker>(network, 1, spec, +1.0f));
  w.push_back(std::make_unique<SimWorker>(network, 2, spec, -1.0f));
  uint64_t round = 0;
  for (; round < 5; ++round) {
    auto reports = RunAll(w, {GossipAssignment(round, 1, {2}, 0.5f, 3),
                              GossipAssignment(round, 2, {1}, 0.5f, 3)});
    for (auto& r : reports) {
      ASSERT_TRUE(r.ok()) << r.status();
      EXPECT_EQ(r->failed_peers_size(), 0) << "honest round " << round;
      EXPECT_EQ(r->refused_peers_size(), 0);
    }
  }
  FloatArena& attacker = w[1]->trainer.params();
  const std::vector<float> honest(attacker.flat().begin(),
                                  attacker.flat().end());
  // Its outer state too: the poisoned round's pseudo-gradient enters the
  // PSEUDO_GRADIENT momentum, which the next round's gossiped point holds.
  FloatArena& attacker_outer = w[1]->runner.outer_state();
  const std::vector<float> honest_outer(attacker_outer.flat().begin(),
                                        attacker_outer.flat().end());
  for (float& v : attacker.flat()) v = 1000.0f;
  auto poisoned = RunAll(w, {GossipAssignment(round, 1, {2}, 0.5f, 3),
                             GossipAssignment(round, 2, {1}, 0.5f, 3)});
  ASSERT_TRUE(poisoned[0].ok()) << poisoned[0].status();
  EXPECT_THAT(poisoned[0]->refused_peers(), ::testing::ElementsAre(2u));
  EXPECT_THAT(poisoned[0]->failed_peers(), ::testing::ElementsAre(2u));
  EXPECT_THAT(poisoned[0]->failure_reason(),
              ::testing::HasSubstr("poisoning guard"));
  EXPECT_EQ(w[0]->runner.models_refused(), 1u);
  ASSERT_EQ(w[0]->runner.failure_codes().size(), 1u);
  EXPECT_EQ(w[0]->runner.failure_codes()[0],
            absl::StatusCode::kPermissionDenied);
  for (float v : w[0]->trainer.params().flat()) ASSERT_LT(std::abs(v), 10.0f);
  // Honest again: the edge is used by both ends.
  std::copy(honest.begin(), honest.end(), attacker.flat().begin());
  std::copy(honest_outer.begin(), honest_outer.end(),
            attacker_outer.flat().begin());
  ++round;
  auto after = RunAll(w, {GossipAssignment(round, 1, {2}, 0.5f, 3),
                          GossipAssignment(round, 2, {1}, 0.5f, 3)});
  for (auto& r : after) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->failed_peers_size(), 0);
  }
  EXPECT_EQ(w[0]->runner.models_refused(), 1u);
}

// Worker 2 commits worker 1's y but its acknowledgement is lost: worker 1
// sees its send fail, worker 2 sees nothing wrong. Both ends must still
// make the same decision about the edge (here: use it, since each
// received the other's y intact and said so), or one applies the average
// and the other does not and the pair's sum jumps.
TEST(RoundRunner, LostAckLeavesBothEndsAgreeingOnTheEdge) {
  InProcessNetwork network;
  v1::JobSpec spec = Spec(v1::ALGORITHM_GASLOC, 2000);
  spec.mutable_outer()->set_gamma(0.0f);
  spec.mutable_outer()->set_eta(1.0f);
  std::vector<std::unique_ptr<SimWorker>> w;
  w.push_back(std::make_unique<SimWorker>(network, 1, spec, +1.0f));
  w.push_back(std::make_unique<SimWorker>(network, 2, spec, -1.0f));
  network.AddFault(InProcessFault::DropAck(1, 2));
  auto reports = RunAll(w, {GossipAssignment(0, 1, {2}, 0.5f, 2),
                            GossipAssignment(0, 2, {1}, 0.5f, 2)});
  ASSERT_TRUE(reports[0].ok() && reports[1].ok());
  EXPECT_EQ(reports[0]->failed_peers_size(), reports[1]->failed_peers_size());
  // Both used it: both hold the pair average.
  EXPECT_LT(L2Distance(w[0]->trainer.params().flat(),
                       w[1]->trainer.params().flat()),
            1e-5);
}

TEST(RoundRunner, NonFiniteLocalStateRestoresTheRoundStart) {
  InProcessNetwork network;
  const v1::JobSpec spec = Spec(v1::ALGORITHM_GASLOC, 300);
  FakeTrainer trainer(FakeLayout(), 1.0f);
  auto transport = network.Join(1);
  RoundRunner runner({kJob, spec, {}}, &trainer, transport.get(),
                     &RealClock::Get());
  const FloatArena before = trainer.params();
  trainer.PoisonNextStep();
  auto report = runner.RunRound(GossipAssignment(0, 1, {}, 0.5f, 3));
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(report.status().message()),
              ::testing::HasSubstr("non-finite"));
  EXPECT_EQ(0, std::memcmp(before.data(), trainer.params().data(),
                           before.size() * 4));
  EXPECT_EQ(runner.next_round(), 0u);
}

// The outer update itself overflows (a pull toward 3e38 with eta 1 and
// momentum 0.9 gives y + 0.9 (y - y_prev) > FLT_MAX): the round fails and
// leaves theta AND every outer buffer (y_prev, momentum) as they were, so
// the next round does not start from a poisoned outer state.
void ExpectOuterOverflowRollsBack(v1::Algorithm algorithm) {
  InProcessNetwork network;
  v1::JobSpec spec = Spec(algorithm, 300);
  spec.mutable_outer()->set_eta(1.0f);
  spec.mutable_outer()->set_gamma(0.9f);
  spec.mutable_outer()->set_lr(1.0f);
  spec.mutable_outer()->set_mu(0.9f);
  FakeTrainer trainer(FakeLayout(), 3e38f, /*step_size=*/1.0f);
  auto transport = network.Join(1);
  RoundRunner runner({kJob, spec, {}}, &trainer, transport.get(),
                     &RealClock::Get());
  const FloatArena theta = trainer.params();
  const FloatArena y_prev = runner.previous_iterate();
  const FloatArena momentum = runner.momentum();
  const v1::Assignment assignment = algorithm == v1::ALGORITHM_GASLOC
                                        ? GossipAssignment(0, 1, {}, 0.5f, 1)
                                        : RingAssignment(0, 1, 1);
  auto report = runner.RunRound(assignment);
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInternal);
  const size_t bytes = theta.size() * 4;
  EXPECT_EQ(0, std::memcmp(theta.data(), trainer.params().data(), bytes));
  EXPECT_EQ(0, std::memcmp(y_prev.data(), runner.previous_iterate().data(),
                           bytes));
  EXPECT_EQ(0, std::memcmp(momentum.data(), runner.momentum().data(), bytes));
  EXPECT_EQ(runner.next_round(), 0u);
}

TEST(RoundRunner, NonFiniteGossipUpdateLeavesTheOuterStateUntouched) {
  ExpectOuterOverflowRollsBack(v1::ALGORITHM_GASLOC);
}

TEST(RoundRunner, NonFiniteNesterovUpdateLeavesTheOuterStateUntouched) {
  ExpectOuterOverflowRollsBack(v1::ALGORITHM_DILOCO);
}

// One GASLoC worker alone (no peers) on the in-process network, with a
// FakeTrainer, after `rounds` rounds of 3 inner steps.
struct SoloGaslocWorker {
  explicit SoloGaslocWorker(uint64_t rounds)
      : spec(Spec(v1::ALGORITHM_GASLOC, 300)),
        trainer(FakeLayout(), 1.0f),
        transport(network.Join(1)),
        runner({kJob, spec, {}}, &trainer, transport.get(),
               &RealClock::Get()) {
    for (uint64_t r = 0; r < rounds; ++r)
      EXPECT_TRUE(runner.RunRound(GossipAssignment(r, 1, {}, 0.5f, 3)).ok());
  }
  InProcessNetwork network;
  const v1::JobSpec spec;
  FakeTrainer trainer;
  std::unique_ptr<InProcessTransport> transport;
  RoundRunner runner;
};

// A joiner installs a member's model taken after round 1 (next round 2);
// the coordinator may still hand it round 1. Running it again would apply
// that round twice: it is reported with no steps and the model is kept.
TEST(RoundRunner, RoundTheModelAlreadyIncludesIsSkippedUntouched) {
  SoloGaslocWorker w(/*rounds=*/2);
  const FloatArena before = w.trainer.params();
  auto report = w.runner.RunRound(GossipAssignment(1, 1, {}, 0.5f, 3));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->round(), 1u);
  EXPECT_EQ(report->inner_steps(), 0u);
  EXPECT_EQ(w.runner.next_round(), 2u);
  // Still evaluated when due (this spec evaluates every round): a joiner
  // whose only round is skipped reports the model it holds.
  EXPECT_FLOAT_EQ(report->val_bpb(), *w.trainer.EvaluateBpb());
  EXPECT_EQ(0, std::memcmp(before.data(), w.trainer.params().data(),
                           before.size() * 4));
  // The next round runs normally.
  report = w.runner.RunRound(GossipAssignment(2, 1, {}, 0.5f, 3));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->inner_steps(), 3u);
  EXPECT_EQ(w.runner.next_round(), 3u);
}

TEST(RoundRunner, CheckpointRestoresTheOuterStateExactly) {
  SoloGaslocWorker w(/*rounds=*/2);
  auto& [network, spec, trainer, transport, runner] = w;
  ASSERT_TRUE(runner.SaveCheckpoint("mem://ckpt").ok());
  ASSERT_TRUE(runner.RunRound(GossipAssignment(2, 1, {}, 0.5f, 3)).ok());
  const FloatArena uninterrupted = trainer.params();

  // Resume in a fresh runner: the momentum buffer y_prev must come back,
  // or round 2 would differ.
  RoundRunner resumed({kJob, spec, {}}, &trainer, transport.get(),
                      &RealClock::Get());
  ASSERT_TRUE(resumed.LoadCheckpoint("mem://ckpt").ok());
  EXPECT_EQ(resumed.next_round(), 2u);
  ASSERT_TRUE(resumed.RunRound(GossipAssignment(2, 1, {}, 0.5f, 3)).ok());
  EXPECT_EQ(0, std::memcmp(uninterrupted.data(), trainer.params().data(),
                           uninterrupted.size() * 4));

  RoundRunner other_job({kJob + 1, spec, {}}, &trainer, transport.get(),
                        &RealClock::Get());
  EXPECT_EQ(other_job.LoadCheckpoint("mem://ckpt").code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(RoundRunner, EvaluatesOnTheLastRoundEvenWithoutAnInterval) {
  InProcessNetwork network;
  v1::JobSpec spec = Spec(v1::ALGORITHM_GASLOC, 300);
  spec.mutable_data()->set_eval_interval_rounds(0);  // "only at the end"
  spec.mutable_stop()->set_max_rounds(3);
  FakeTrainer trainer(FakeLayout(), 1.0f);
  auto transport = network.Join(1);
  RoundRunner runner({kJob, spec, {}}, &trainer, transport.get(),
                     &RealClock::Get());
  for (uint64_t r = 0; r < 3; ++r) {
    auto report = runner.RunRound(GossipAssignment(r, 1, {}, 0.5f, 2));
    ASSERT_TRUE(report.ok()) << report.status();
    if (r < 2) {
      EXPECT_EQ(report->val_bpb(), 0.0f) << "round " << r;
    } else {
      EXPECT_GT(report->val_bpb(), 0.0f) << "the last round must evaluate";
    }
  }
}

// A fake trainer that also keeps AdamW-like moments to share.
class FakeTrainerWithOptimizer : public FakeTrainer {
 public:
  FakeTrainerWithOptimizer() : FakeTrainer(FakeLayout(), 1.0f),
      m_(params().shared_layout()), v_(params().shared_layout()) {}
  FloatArena* optimizer_m() override { return &m_; }
  FloatArena* optimizer_v() override { return &v_; }
  uint64_t optimizer_step() const override { return step_; }
  void set_optimizer_step(uint64_t step) override { step_ = step; }

 private:
  FloatArena m_, v_;
  uint64_t step_ = 0;
};

std::vector<float> Filled(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + 0.25f * static_cast<float>(i);
  return v;
}

TEST(RoundRunner, InstallFetchedModelAdoptsEveryPart) {
  InProcessNetwork network;
  FakeTrainerWithOptimizer trainer;
  auto transport = network.Join(1);
  RoundRunner runner({kJob, Spec(v1::ALGORITHM_GASLOC), {}}, &trainer,
                     transport.get(), &RealClock::Get());
  const size_t n = trainer.params().size();
  FetchedModel model;
  model.round = 5;
  model.sender_id = 2;
  model.params = Filled(n, 1);
  model.outer_state = Filled(n, 2);
  model.optimizer_m = Filled(n, 3);
  model.optimizer_v = Filled(n, 4);
  model.optimizer_step = 77;
  ASSERT_TRUE(runner.InstallFetchedModel(model).ok());
  auto as_vector = [](FloatArena& a) {
    return std::vector<float>(a.flat().begin(), a.flat().end());
  };
  EXPECT_EQ(as_vector(trainer.params()), model.params);
  EXPECT_EQ(as_vector(runner.outer_state()), model.outer_state);
  EXPECT_EQ(as_vector(*trainer.optimizer_m()), model.optimizer_m);
  EXPECT_EQ(as_vector(*trainer.optimizer_v()), model.optimizer_v);
  EXPECT_EQ(trainer.optimizer_step(), 77u);
  EXPECT_EQ(runner.next_round(), 5u);

  // A part of the wrong size is refused and changes nothing.
  FetchedModel bad = model;
  bad.params = Filled(n, 9);
  bad.optimizer_v.pop_back();
  bad.round = 9;
  const absl::Status status = runner.InstallFetchedModel(bad);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), ::testing::HasSubstr("optimizer moments"));
  EXPECT_EQ(as_vector(trainer.params()), model.params);
  EXPECT_EQ(runner.next_round(), 5u);
}

TEST(RoundRunner, RejectsAssignmentsOfAnotherJob) {
  InProcessNetwork network;
  FakeTrainer trainer(FakeLayout(), 1.0f);
  auto transport = network.Join(1);
  RoundRunner runner({kJob, Spec(v1::ALGORITHM_GASLOC), {}}, &trainer,
                     transport.get(), &RealClock::Get());
  v1::Assignment other = GossipAssignment(0, 1, {}, 0.5f, 1);
  other.set_job_id(kJob + 1);
  EXPECT_EQ(runner.RunRound(other).status().code(),
            absl::StatusCode::kFailedPrecondition);
  other.set_kind(v1::ASSIGNMENT_KIND_STOP);
  EXPECT_EQ(runner.RunRound(other).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gasloc
