// Compressed gossip against per-edge public copies (CHOCO-gossip,
// worker/round/public_copies.h; exchange.encoding INT8 for GASLoC): what
// is sent, what both ends add to their copies, the mixing over the
// copies, and the two ends' copies staying identical through dropped
// edges and one-sided losses.
#include "worker/round/public_copies.h"

#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/exchange/int8_codec.h"
#include "worker/round/outer_optimizer.h"
#include "tests/worker/round/fail_step_transport.h"
#include "tests/worker/round/fake_trainer.h"
#include "tests/worker/round/sim_worker.h"

namespace gasloc {
namespace {

using testing::FakeLayout;

// What a receiver decodes from the INT8 of `values`, from the codec's
// plain-loop reference (code times scale, block by block).
std::vector<float> ReferenceInt8(const std::vector<float>& values) {
  const Int8Reference ref = QuantizeInt8Reference(values);
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i)
    out[i] = static_cast<float>(ref.codes[i]) *
             ref.scales[i / kInt8BlockElements];
  return out;
}

std::vector<float> Values(std::span<const float> span) {
  return std::vector<float>(span.begin(), span.end());
}

std::vector<float> Point(size_t n, float phase) {
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i)
    x[i] = std::sin(0.37f * static_cast<float>(i) + phase) *
           (i % 3 == 0 ? 2.0f : 0.01f);
  return x;
}

// Worker A sends to B twice. Each q is the INT8 of the point minus A's
// copy (the plain-loop reference), both ends end with the same floats in
// A's copy (A's own, B's peer), and the digests agree crosswise; the
// copy's error shrinks on the second exchange.
TEST(PublicCopiesTest, SendsTheInt8OfTheDifferenceAndBothEndsAddIt) {
  const auto layout = FakeLayout();
  const size_t n = layout->total_floats();
  PublicCopies a(layout), b(layout);
  const uint64_t kA = 1, kB = 2;
  std::vector<float> send(n), received(n);
  std::vector<float> x = Point(n, 0.0f);
  double previous_error = INFINITY;
  std::vector<float> copy(n, 0.0f);  // A's public copy, by the reference
  for (int exchange = 0; exchange < 2; ++exchange) {
    SCOPED_TRACE(exchange);
    std::vector<float> difference(n);
    for (size_t i = 0; i < n; ++i) difference[i] = x[i] - copy[i];
    const std::vector<float> expected_q = ReferenceInt8(difference);
    const std::vector<float> q =
        Values(a.PrepareSend(kB, x, std::span<float>(send), exchange));
    EXPECT_EQ(q, expected_q);
    // The wire: q re-encodes to itself, so B decodes the same floats.
    std::vector<float> wire = q;
    RoundToInt8(wire);
    EXPECT_EQ(wire, q);
    received = wire;
    b.PrepareSend(kA, std::vector<float>(n, 0.0f), std::span<float>(send),
                  exchange);  // B's side of the edge exists too
    b.AddPeerCopy(kA, std::span<float>(received));
    EXPECT_EQ(a.Digests(kB).own, b.Digests(kA).peer);
    a.Commit(kB, q, a.Peer(kB));  // B sent zeros: A's copy of B stays 0
    b.Commit(kA, Values(b.Own(kA)), received);
    for (size_t i = 0; i < n; ++i) copy[i] += expected_q[i];
    EXPECT_EQ(Values(a.Own(kB)), copy);
    EXPECT_EQ(Values(b.Peer(kA)), copy);
    EXPECT_EQ(a.Digests(kB).own, b.Digests(kA).peer);
    EXPECT_EQ(a.Digests(kB).peer, b.Digests(kA).own);
    double error = 0;
    for (size_t i = 0; i < n; ++i)
      error = std::max(error, std::abs(static_cast<double>(x[i] - copy[i])));
    EXPECT_LT(error, previous_error / 50);
    previous_error = error;
  }
  // A reset forgets the edge: zero copies, the digest of a new edge.
  const EdgeDigests fresh = PublicCopies(layout).Digests(kB);
  a.Reset(kB);
  EXPECT_TRUE(a.Own(kB).empty());
  EXPECT_EQ(a.Digests(kB).own, fresh.own);
  EXPECT_EQ(a.Digests(kB).peer, fresh.peer);
  EXPECT_NE(b.Digests(kA).peer, fresh.peer);  // B still holds A's copy
}

// Past kMaxPublicCopyEdges peers, the edge used longest ago goes.
TEST(PublicCopiesTest, EvictsTheEdgeUsedLongestAgo) {
  const auto layout = FakeLayout(2, 8);
  PublicCopies copies(layout);
  std::vector<float> x(layout->total_floats(), 1.0f), send(x.size());
  for (uint64_t peer = 1; peer <= kMaxPublicCopyEdges; ++peer)
    copies.PrepareSend(peer, x, std::span<float>(send), /*round=*/peer);
  copies.PrepareSend(1, x, std::span<float>(send), /*round=*/100);  // used
  copies.PrepareSend(99, x, std::span<float>(send), /*round=*/101);
  EXPECT_EQ(copies.edges(), kMaxPublicCopyEdges);
  EXPECT_FALSE(copies.Own(1).empty());
  EXPECT_TRUE(copies.Own(2).empty());  // round 2: the oldest
  EXPECT_FALSE(copies.Own(99).empty());
}

// The mixing over the copies: theta' = x - alpha w (own - peer) per edge,
// each edge with its own pair of copies.
TEST(PublicCopiesTest, GossipOuterStepMixesEachEdgesCopies) {
  const std::vector<float> x = {1, 2, 3}, own1 = {0.5f, 2, 4},
                           peer1 = {2, 0, 1}, own2 = {1, 1, 1},
                           peer2 = {3, 3, 3};
  std::vector<float> theta(3);
  const GossipNeighbor neighbors[] = {
      {.y = peer1, .weight = 1.0f, .own = own1},
      {.y = peer2, .weight = 0.5f, .own = own2}};
  GossipOuterStep(x, neighbors, 0.5f, 0.0f, x, theta);
  for (size_t i = 0; i < 3; ++i)
    EXPECT_FLOAT_EQ(theta[i], x[i] - 0.5f * (own1[i] - peer1[i]) -
                                  0.25f * (own2[i] - peer2[i]))
        << i;
}

// A worker whose transport fails the receives of some (round, step).
struct LossyWorker {
  LossyWorker(InProcessNetwork& network, uint64_t id, const v1::JobSpec& spec,
              std::vector<TransferKey> fail)
      : trainer(FakeLayout(), 0.5f * static_cast<float>(id)),
        transport(network.Join(id), std::move(fail)),
        runner({testing::kJob, spec, {}}, &trainer, &transport,
               &RealClock::Get()) {}
  testing::FakeTrainer trainer;
  testing::FailStepTransport<InProcessTransport> transport;
  RoundRunner runner;
};

// Four GASLoC workers with INT8 gossip over 12 rounds of the three perfect
// matchings of four, with losses injected:
// - round 1: worker 1 loses its step-0 receive (1-3): both ends drop the
//   edge, neither commits;
// - round 3: worker 2 loses its step-1 receive (the confirmation, 1-2):
//   worker 1 commits and worker 2 does not, so their copies part;
// - round 6, 1-2 meet again: both see the digests differ, drop the edge,
//   say why, and reset; round 9 starts the edge again from zero.
// Every other edge holds, the bytes are INT8's, and at the end both ends
// of every edge hold the same copies (crosswise digests). A worker then
// joins: its first edge holds and the others' copies are untouched.
// Before, the job spec refused INT8 for gossip.
TEST(PublicCopiesTest, BothEndsKeepTheSameCopiesThroughDroppedEdges) {
  v1::JobSpec spec = testing::Spec(v1::ALGORITHM_GASLOC);
  spec.mutable_outer()->set_local_steps(4);
  spec.mutable_outer()->set_min_local_steps(1);
  spec.mutable_exchange()->set_encoding(v1::WIRE_ENCODING_INT8);
  ASSERT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  auto key = [](uint64_t round, uint32_t step) {
    return TransferKey{.job_id = testing::kJob,
                       .round = round,
                       .phase = v1::EXCHANGE_PHASE_GOSSIP,
                       .step = step};
  };
  InProcessNetwork network;
  std::vector<std::unique_ptr<LossyWorker>> w;
  const std::vector<std::vector<TransferKey>> losses = {
      {key(1, 0)}, {key(3, 1)}, {}, {}};
  for (uint64_t id = 1; id <= 4; ++id)
    w.push_back(std::make_unique<LossyWorker>(network, id, spec,
                                              losses[id - 1]));
  // Peer of worker i (1-based) in matching m.
  const uint64_t kMatchings[3][4] = {{2, 1, 4, 3}, {3, 4, 1, 2}, {4, 3, 2, 1}};
  const size_t n = w[0]->trainer.params().size();
  for (uint64_t round = 0; round < 12; ++round) {
    SCOPED_TRACE(round);
    std::vector<absl::StatusOr<v1::ReportRoundRequest>> reports(
        4, absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i)
      threads.emplace_back([&, i] {
        reports[i] = w[i]->runner.RunRound(testing::GossipAssignment(
            round, i + 1, {kMatchings[round % 3][i]}, 0.5f, 4));
      });
    for (auto& t : threads) t.join();
    for (int i = 0; i < 4; ++i) {
      SCOPED_TRACE(i + 1);
      ASSERT_TRUE(reports[i].ok()) << reports[i].status();
      const uint64_t peer = kMatchings[round % 3][i];
      const bool dropped_1_3 = round == 1 && (i + 1 == 1 || i + 1 == 3);
      const bool dropped_at_2 = round == 3 && i + 1 == 2;
      const bool disagree = round == 6 && (i + 1 == 1 || i + 1 == 2);
      if (dropped_1_3 || dropped_at_2 || disagree) {
        EXPECT_THAT(reports[i]->failed_peers(), ::testing::ElementsAre(peer));
        if (disagree) {
          EXPECT_THAT(reports[i]->failure_reason(),
                      ::testing::HasSubstr("public copies disagree"));
        }
      } else {
        EXPECT_EQ(reports[i]->failed_peers_size(), 0)
            << reports[i]->failure_reason();
        // INT8 of the arena and a 5-float confirmation: ~3.9x under FP32.
        EXPECT_EQ(reports[i]->bytes_sent(), Int8PayloadBytes(n) + 5 * 4);
      }
    }
  }
  auto expect_agreement = [&](uint64_t i, uint64_t j) {
    SCOPED_TRACE(absl::StrCat(i, "-", j));
    const auto mine = w[i - 1]->runner.public_copy_digests(j);
    const auto theirs = w[j - 1]->runner.public_copy_digests(i);
    ASSERT_TRUE(mine.has_value());
    ASSERT_TRUE(theirs.has_value());
    EXPECT_EQ(mine->own, theirs->peer);
    EXPECT_EQ(mine->peer, theirs->own);
  };
  for (uint64_t i = 1; i <= 4; ++i)
    for (uint64_t j = i + 1; j <= 4; ++j) expect_agreement(i, j);
  // Worker 5 joins and meets worker 1 (2-3 gossip, 4 sits out): its edge
  // starts at zero at both ends and holds, and the copies worker 1 holds
  // of its other edges are untouched.
  const auto before_2 = w[0]->runner.public_copy_digests(2);
  w.push_back(std::make_unique<LossyWorker>(network, 5, spec,
                                            std::vector<TransferKey>{}));
  const std::vector<std::vector<uint64_t>> join_round = {{5}, {3}, {2}, {},
                                                         {1}};
  std::vector<absl::StatusOr<v1::ReportRoundRequest>> reports(
      5, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < 5; ++i)
    threads.emplace_back([&, i] {
      reports[i] = w[i]->runner.RunRound(testing::GossipAssignment(
          12, i + 1, join_round[i], 0.5f, 4));
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(reports[i].ok()) << reports[i].status();
    EXPECT_EQ(reports[i]->failed_peers_size(), 0)
        << "worker " << i + 1 << ": " << reports[i]->failure_reason();
  }
  expect_agreement(1, 5);
  expect_agreement(2, 3);
  const auto after_2 = w[0]->runner.public_copy_digests(2);
  ASSERT_TRUE(before_2 && after_2);
  EXPECT_EQ(after_2->own, before_2->own);
  EXPECT_EQ(after_2->peer, before_2->peer);
}

}  // namespace
}  // namespace gasloc
