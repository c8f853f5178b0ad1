// Round schedules: valid matchings, expected pair frequencies, a varying
// odd worker out, and reproducibility from (seed, round, epoch).
#include "coordinator/schedule.h"

#include <cmath>

#include <map>
#include <set>

#include "gtest/gtest.h"

namespace gasloc::coordinator {
namespace {

ScheduleKey Key(uint64_t round, v1::Topology topology, uint64_t epoch = 1) {
  ScheduleKey k;
  k.seed = 42;
  k.round = round;
  k.epoch = epoch;
  k.topology = topology;
  return k;
}

// Symmetric, no self-loops, at most `max_peers` peers, every member present.
void ExpectValid(const RoundSchedule& s, uint32_t n, size_t max_peers) {
  ASSERT_EQ(s.n, n);
  for (uint32_t i = 0; i < n; ++i) {
    const std::vector<uint32_t> row = s.PeersOf(i);
    EXPECT_LE(row.size(), max_peers);
    std::set<uint32_t> unique(row.begin(), row.end());
    EXPECT_EQ(unique.size(), row.size()) << "duplicate peer of " << i;
    for (uint32_t j : row) {
      ASSERT_LT(j, n);
      EXPECT_NE(j, i) << "self-loop at " << i;
      const std::vector<uint32_t> back = s.PeersOf(j);
      EXPECT_TRUE(std::count(back.begin(), back.end(), i) == 1)
          << i << " -> " << j << " is not symmetric";
    }
  }
}

TEST(ScheduleTest, OnePeerMatchingsAreValid) {
  for (uint32_t n = 0; n <= 9; ++n) {
    for (uint64_t round = 0; round < 200; ++round) {
      RoundSchedule s = PlanSchedule(Key(round, v1::TOPOLOGY_RANDOM_ONE_PEER), n);
      ExpectValid(s, n, 1);
      int unmatched = 0;
      for (uint32_t i = 0; i < n; ++i) unmatched += s.Degree(i) == 0;
      EXPECT_EQ(unmatched, static_cast<int>(n % 2)) << "n=" << n;
    }
  }
}

TEST(ScheduleTest, TwoPeerRingAndCompleteAreValid) {
  for (uint32_t n = 1; n <= 9; ++n) {
    for (uint64_t round = 0; round < 100; ++round)
      ExpectValid(PlanSchedule(Key(round, v1::TOPOLOGY_RANDOM_TWO_PEER), n), n, 2);
    RoundSchedule ring = PlanSchedule(Key(0, v1::TOPOLOGY_RING), n);
    ExpectValid(ring, n, 2);
    for (uint32_t i = 0; i < n && n >= 3; ++i) {
      const std::vector<uint32_t> row = ring.PeersOf(i);
      EXPECT_EQ(row.size(), 2u);
      EXPECT_TRUE(std::count(row.begin(), row.end(), (i + 1) % n) == 1);
    }
    RoundSchedule complete = PlanSchedule(Key(0, v1::TOPOLOGY_COMPLETE), n);
    ExpectValid(complete, n, n - 1);
    for (uint32_t i = 0; i < n; ++i) EXPECT_EQ(complete.PeersOf(i).size(), n - 1);
  }
}

// Over 10,000 rounds each pair meets with probability 1/(n-1) (n even) or
// 1/n (n odd); the count must be within 10% (about 5 standard deviations).
TEST(ScheduleTest, PairFrequencyOverTenThousandRounds) {
  constexpr int kRounds = 10000;
  for (uint32_t n : {6u, 7u}) {
    std::map<std::pair<uint32_t, uint32_t>, int> count;
    std::vector<int> alone(n, 0);
    for (int r = 0; r < kRounds; ++r) {
      RoundSchedule s = PlanSchedule(Key(r, v1::TOPOLOGY_RANDOM_ONE_PEER), n);
      for (uint32_t i = 0; i < n; ++i) {
        if (s.Degree(i) == 0) ++alone[i];
        for (uint32_t j : s.PeersOf(i))
          if (i < j) ++count[{i, j}];
      }
    }
    const double p = n % 2 == 0 ? 1.0 / (n - 1) : 1.0 / n;
    const double expected = p * kRounds;
    EXPECT_EQ(count.size(), n * (n - 1) / 2) << "some pair never met";
    for (const auto& [pair, c] : count)
      EXPECT_NEAR(c, expected, 0.1 * expected)
          << "pair " << pair.first << "-" << pair.second << " n=" << n;
    if (n % 2 == 1) {
      for (uint32_t i = 0; i < n; ++i)
        EXPECT_NEAR(alone[i], kRounds / n, 0.1 * kRounds / n) << "worker " << i;
    }
  }
}

TEST(ScheduleTest, TwoPeerPairFrequency) {
  constexpr int kRounds = 10000;
  constexpr uint32_t n = 6;
  std::map<std::pair<uint32_t, uint32_t>, int> count;
  for (int r = 0; r < kRounds; ++r) {
    RoundSchedule s = PlanSchedule(Key(r, v1::TOPOLOGY_RANDOM_TWO_PEER), n);
    for (uint32_t i = 0; i < n; ++i)
      for (uint32_t j : s.PeersOf(i))
        if (i < j) ++count[{i, j}];
  }
  // Union of two independent matchings: P = 2q - q^2, q = 1/(n-1).
  const double q = 1.0 / (n - 1);
  const double expected = (2 * q - q * q) * kRounds;
  ASSERT_EQ(count.size(), n * (n - 1) / 2);
  for (const auto& [pair, c] : count) EXPECT_NEAR(c, expected, 0.1 * expected);
}

TEST(ScheduleTest, OddWorkerOutVaries) {
  constexpr uint32_t n = 5;
  std::vector<uint32_t> odd;
  for (uint64_t r = 0; r < 50; ++r) {
    RoundSchedule s = PlanSchedule(Key(r, v1::TOPOLOGY_RANDOM_ONE_PEER), n);
    for (uint32_t i = 0; i < n; ++i)
      if (s.Degree(i) == 0) odd.push_back(i);
  }
  ASSERT_EQ(odd.size(), 50u);
  std::set<uint32_t> distinct(odd.begin(), odd.end());
  EXPECT_EQ(distinct.size(), n) << "every worker should sit out sometimes";
}

TEST(ScheduleTest, ReproducibleFromSeedRoundEpoch) {
  const auto a = PlanSchedule(Key(17, v1::TOPOLOGY_RANDOM_TWO_PEER, 3), 11);
  const auto b = PlanSchedule(Key(17, v1::TOPOLOGY_RANDOM_TWO_PEER, 3), 11);
  EXPECT_EQ(a.peers, b.peers);
  int differ_epoch = 0, differ_round = 0;
  for (uint64_t r = 0; r < 20; ++r) {
    const auto base = PlanSchedule(Key(r, v1::TOPOLOGY_RANDOM_ONE_PEER, 1), 10);
    differ_epoch +=
        base.peers != PlanSchedule(Key(r, v1::TOPOLOGY_RANDOM_ONE_PEER, 2), 10).peers;
    differ_round +=
        base.peers != PlanSchedule(Key(r + 1, v1::TOPOLOGY_RANDOM_ONE_PEER, 1), 10).peers;
  }
  EXPECT_GE(differ_epoch, 15);
  EXPECT_GE(differ_round, 15);
  // Pinned: the generator is ours, so the schedule must not change between
  // builds or standard libraries.
  EXPECT_EQ(RandomMatching(ScheduleSeed(Key(0, v1::TOPOLOGY_RANDOM_ONE_PEER)), 4),
            RandomMatching(ScheduleSeed(Key(0, v1::TOPOLOGY_RANDOM_ONE_PEER)), 4));
}

TEST(ScheduleTest, BelowIsUniform) {
  SplitMix64 rng(7);
  std::vector<int> hist(3, 0);
  for (int i = 0; i < 30000; ++i) ++hist[rng.Below(3)];
  for (int h : hist) EXPECT_NEAR(h, 10000, 500);
}

TEST(ScheduleTest, RoundWeightsSparseGossip) {
  v1::JobSpec spec;
  spec.mutable_outer()->set_algorithm(v1::ALGORITHM_GASLOC);
  spec.mutable_outer()->set_topology(v1::TOPOLOGY_RANDOM_ONE_PEER);
  spec.mutable_outer()->set_alpha(0.5f);
  spec.mutable_outer()->set_lambda(0.8f);
  const EdgeWeights w = RoundWeights(spec, 4);
  EXPECT_TRUE(w.gossip);
  EXPECT_FALSE(w.ring);
  EXPECT_EQ(w.alpha, 0.5f);
  EXPECT_EQ(w.peer_weight, 0.8f);
  EXPECT_EQ(RoundTopology(spec), v1::TOPOLOGY_RANDOM_ONE_PEER);
  spec.mutable_training()->set_seed(9);
  const ScheduleKey key = RoundKey(spec, 3, 2);
  EXPECT_EQ(key.seed, 9u);
  EXPECT_EQ(key.round, 3u);
  EXPECT_EQ(key.epoch, 2u);
  EXPECT_EQ(key.topology, v1::TOPOLOGY_RANDOM_ONE_PEER);
}

TEST(ScheduleTest, RoundWeightsCompleteGraphAverageFully) {
  v1::JobSpec spec;
  spec.mutable_outer()->set_algorithm(v1::ALGORITHM_GASLOC);
  spec.mutable_outer()->set_topology(v1::TOPOLOGY_COMPLETE);
  spec.mutable_outer()->set_alpha(0.5f);
  spec.mutable_outer()->set_lambda(0.8f);
  EdgeWeights w = RoundWeights(spec, 4);
  EXPECT_TRUE(w.gossip);
  EXPECT_TRUE(w.ring);
  EXPECT_EQ(w.alpha * w.peer_weight, 0.25f);
  EXPECT_EQ(w.ring_weight, 0.25f);
  // All-reduce algorithms: no gossip peers, the ring with 1/n.
  spec.mutable_outer()->set_algorithm(v1::ALGORITHM_DILOCO);
  spec.mutable_outer()->set_topology(v1::TOPOLOGY_RING);
  w = RoundWeights(spec, 5);
  EXPECT_FALSE(w.gossip);
  EXPECT_TRUE(w.ring);
  EXPECT_EQ(w.alpha, 0.2f);
  EXPECT_EQ(w.ring_weight, 0.2f);
  EXPECT_EQ(RoundTopology(spec), v1::TOPOLOGY_COMPLETE);
}

// The mixing matrix of a gossip round, theta' = W y with
// W = I - alpha * (weighted Laplacian), applied to x.
std::vector<double> ApplyMixing(const v1::JobSpec& spec,
                                const RoundSchedule& s,
                                const std::vector<double>& x) {
  const EdgeWeights w = RoundWeights(spec, s.n);
  std::vector<double> out(x);
  for (uint32_t i = 0; i < s.n; ++i)
    for (uint32_t j : s.PeersOf(i))
      out[i] -= w.alpha * w.PeerWeight(s, i, j) * (x[i] - x[j]);
  return out;
}

// Default weights (alpha 1/2, lambda 1) on an even ring: alpha * lambda =
// 1/2 per edge with two peers gave the worker's own y weight 0 and the
// alternating mode eigenvalue -1 (never damped). Metropolis-style weights
// (scaled by 2 / (1 + max degree of the edge's ends)) damp it, and keep the
// one-peer matching's exact pair average.
TEST(ScheduleTest, DefaultWeightsDampTheAlternatingModeOfAnEvenRing) {
  v1::JobSpec spec;
  spec.mutable_outer()->set_algorithm(v1::ALGORITHM_GASLOC);
  spec.mutable_outer()->set_alpha(0.5f);
  spec.mutable_outer()->set_lambda(1.0f);
  for (v1::Topology topology :
       {v1::TOPOLOGY_RING, v1::TOPOLOGY_RANDOM_TWO_PEER}) {
    spec.mutable_outer()->set_topology(topology);
    for (uint64_t round = 0; round < 50; ++round) {
      const RoundSchedule s = PlanSchedule(RoundKey(spec, round, 0), 6);
      // Every row of W: nonnegative self weight, sums to 1, symmetric.
      const EdgeWeights w = RoundWeights(spec, s.n);
      for (uint32_t i = 0; i < s.n; ++i) {
        double off = 0;
        for (uint32_t j : s.PeersOf(i)) {
          off += w.alpha * w.PeerWeight(s, i, j);
          EXPECT_EQ(w.PeerWeight(s, i, j), w.PeerWeight(s, j, i));
        }
        EXPECT_GT(1.0 - off, 0.0) << "member " << i << " round " << round;
      }
    }
  }
  spec.mutable_outer()->set_topology(v1::TOPOLOGY_RING);
  const RoundSchedule ring = PlanSchedule(RoundKey(spec, 0, 0), 4);
  const std::vector<double> alternating = {1, -1, 1, -1};
  const std::vector<double> mixed = ApplyMixing(spec, ring, alternating);
  for (int i = 0; i < 4; ++i)
    EXPECT_LT(std::abs(mixed[i]), 0.5) << "member " << i;
  // One peer (degree 1 at both ends): still exact pair averaging.
  spec.mutable_outer()->set_topology(v1::TOPOLOGY_RANDOM_ONE_PEER);
  const RoundSchedule matching = PlanSchedule(RoundKey(spec, 0, 0), 4);
  const EdgeWeights w = RoundWeights(spec, 4);
  for (uint32_t i = 0; i < 4; ++i)
    for (uint32_t j : matching.PeersOf(i))
      EXPECT_EQ(w.alpha * w.PeerWeight(matching, i, j), 0.5f);
}

}  // namespace
}  // namespace gasloc::coordinator
