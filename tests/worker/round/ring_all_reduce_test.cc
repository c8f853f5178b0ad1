#include "worker/round/ring_all_reduce.h"

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/exchange/in_process_transport.h"

namespace gasloc {
namespace {

std::vector<RingMember> Ring(int n) {
  std::vector<RingMember> ring;
  for (int i = 0; i < n; ++i)
    ring.push_back({static_cast<uint64_t>(i + 1),
                    InProcessNetwork::Address(i + 1)});
  return ring;
}

TEST(RingSegment, CoversTheBufferWithoutOverlap) {
  for (uint64_t size : {1u, 15u, 16u, 1000u, 4097u}) {
    for (int n : {1, 2, 3, 7}) {
      uint64_t next = 0;
      for (int s = 0; s < n; ++s) {
        auto [b, e] = RingSegment(size, n, s);
        EXPECT_EQ(b, next) << size << " " << n << " " << s;
        EXPECT_LE(b, e);
        next = e;
      }
      EXPECT_EQ(next, size);
    }
  }
}

// A worker that reaches the all-reduce 400 ms before its partner counts
// that time as waiting for peers; the late one waits nothing. The 400 ms
// pass on a fake clock while the early worker waits.
TEST(RingAllReduce, EarlyWorkerCountsItsWaitForThePeer) {
  const size_t size = 4096;
  FakeClock clock;
  InProcessNetwork network(MailboxOptions{.clock = &clock});
  auto t1 = network.Join(1);
  auto t2 = network.Join(2);
  std::vector<float> d1(size, 1.0f), d2(size, 3.0f), s1(size), s2(size);
  ExchangeOptions options;
  options.chunk_bytes = 4096;
  options.deadline = clock.Now() + absl::Seconds(20);
  RingAllReduceResult early, late;
  std::thread first([&] {
    early = RingAllReduceMean(*t1, clock, TransferKey{7, 3}, Ring(2), 0, d1,
                              s1, options);
  });
  clock.AwaitWaiters(1);  // worker 1 waits in its first step
  clock.Advance(absl::Milliseconds(400));
  late = RingAllReduceMean(*t2, clock, TransferKey{7, 3}, Ring(2), 1, d2, s2,
                           options);
  first.join();
  ASSERT_TRUE(early.status.ok()) << early.status;
  ASSERT_TRUE(late.status.ok()) << late.status;
  EXPECT_EQ(d1[0], 2.0f);
  EXPECT_DOUBLE_EQ(early.wait_seconds, 0.4);
  EXPECT_DOUBLE_EQ(early.seconds, 0.4);
  EXPECT_EQ(late.wait_seconds, 0.0);
}

// The wire time of a ring all-reduce is the sum of its steps' receive
// wire times (bytes from the predecessor moving), which the round report
// turns into a link sample of the predecessor (algorithms.md section 5).
// A receive registered after the predecessor began sending is not measured
// (its bytes were buffered), but in every step the member that registered
// first measured its receive, so at least one of the two has a wire time.
TEST(RingAllReduce, ReportsWireTimeFromThePredecessor) {
  const size_t size = 8192;  // segments of 16 KB: 4 chunks each
  InProcessNetwork network;
  auto t1 = network.Join(1);
  auto t2 = network.Join(2);
  std::vector<float> d1(size, 1.0f), d2(size, 3.0f), s1(size), s2(size);
  ExchangeOptions options;
  options.chunk_bytes = 4096;
  options.deadline = absl::Now() + absl::Seconds(20);
  RingAllReduceResult r1, r2;
  std::thread first([&] {
    r1 = RingAllReduceMean(*t1, RealClock::Get(), TransferKey{7, 3}, Ring(2),
                           0, d1, s1, options);
  });
  r2 = RingAllReduceMean(*t2, RealClock::Get(), TransferKey{7, 3}, Ring(2), 1,
                         d2, s2, options);
  first.join();
  ASSERT_TRUE(r1.status.ok()) << r1.status;
  ASSERT_TRUE(r2.status.ok()) << r2.status;
  EXPECT_EQ(r1.predecessor_id, 2u);
  EXPECT_EQ(r2.predecessor_id, 1u);
  EXPECT_GT(r1.wire_seconds + r2.wire_seconds, 0);
  for (const RingAllReduceResult* r : {&r1, &r2}) {
    EXPECT_GE(r->wire_seconds, 0);
    EXPECT_LE(r->wire_seconds, r->seconds);
  }
}

class RingAllReduceTest
    : public ::testing::TestWithParam<std::tuple<int, v1::WireEncoding>> {};

TEST_P(RingAllReduceTest, EveryoneGetsTheSameMean) {
  const auto [n, encoding] = GetParam();
  const size_t size = 1001;
  InProcessNetwork network;
  std::vector<std::unique_ptr<InProcessTransport>> transports;
  std::vector<std::vector<float>> data(n, std::vector<float>(size));
  std::vector<std::vector<float>> scratch(n, std::vector<float>(size));
  std::vector<double> expected(size, 0.0);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist;
  for (int i = 0; i < n; ++i) {
    transports.push_back(network.Join(i + 1));
    for (size_t k = 0; k < size; ++k) {
      data[i][k] = dist(rng);
      expected[k] += data[i][k] / n;
    }
  }
  std::vector<RingAllReduceResult> results(n);
  std::vector<std::thread> threads;
  ExchangeOptions options;
  options.encoding = encoding;
  options.chunk_bytes = 4096;
  options.deadline = absl::Now() + absl::Seconds(20);
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      results[i] = RingAllReduceMean(*transports[i], RealClock::Get(),
                                     TransferKey{7, 3}, Ring(n), i, data[i],
                                     scratch[i], options);
    });
  }
  for (auto& t : threads) t.join();
  // INT8: each hop's rounding is at most max-abs / 127 of its partial sum.
  const double tol = encoding == v1::WIRE_ENCODING_INT8   ? 5e-2
                     : encoding == v1::WIRE_ENCODING_BF16 ? 2e-2
                                                          : 1e-5;
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(results[i].status.ok()) << i << ": " << results[i].status;
    EXPECT_EQ(0, std::memcmp(data[i].data(), data[0].data(), size * 4))
        << "worker " << i << " differs from worker 0";
    if (n > 1) {
      EXPECT_GT(results[i].bytes_sent, 0u);
    }
  }
  for (size_t k = 0; k < size; ++k)
    ASSERT_NEAR(data[0][k], expected[k], tol * (1 + std::abs(expected[k])))
        << k;
}

INSTANTIATE_TEST_SUITE_P(
    Sizes, RingAllReduceTest,
    ::testing::Combine(::testing::Values(1, 2, 3, 5),
                       ::testing::Values(v1::WIRE_ENCODING_FP32,
                                         v1::WIRE_ENCODING_BF16,
                                         v1::WIRE_ENCODING_INT8)));

// Rounds of an INT8 ring, each worker folding its residual into its next
// contribution (the residual argument) or not. Each worker's contribution
// has large values in every block (about 1, so a step of 2^-6 or more)
// and small ones (1e-3 .. 3e-3, below half a step even summed over the
// three workers) that INT8 rounds to 0 every time without error feedback.
struct Int8Rounds {
  std::vector<double> drift;     // |cumulated true mean - applied|, max
  double max_residual = 0;       // over rounds, workers, elements
  double identity_error = 0;     // |drift - sum_i e_i / n|, max
};

Int8Rounds RunInt8Rounds(bool feedback, int rounds) {
  const int n = 3;
  const size_t size = 1000;
  InProcessNetwork network;
  std::vector<std::unique_ptr<InProcessTransport>> transports;
  for (int i = 0; i < n; ++i) transports.push_back(network.Join(i + 1));
  std::vector<std::vector<float>> data(n, std::vector<float>(size)),
      scratch = data, residual = data;
  std::vector<double> true_sum(size, 0), applied_sum(size, 0);
  std::mt19937 rng(5);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  Int8Rounds out;
  out.drift.assign(size, 0);
  ExchangeOptions options;
  options.encoding = v1::WIRE_ENCODING_INT8;
  options.chunk_bytes = 4096;
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < n; ++i) {
      for (size_t k = 0; k < size; ++k) {
        const float g = k % 64 == 0 ? 1.0f + noise(rng) : 1e-3f * (1 + i);
        true_sum[k] += static_cast<double>(g) / n;
        data[i][k] = g + (feedback ? residual[i][k] : 0.0f);
      }
    }
    options.deadline = absl::Now() + absl::Seconds(20);
    std::vector<absl::Status> status(n);
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i)
      threads.emplace_back([&, i] {
        status[i] = RingAllReduceMean(
                        *transports[i], RealClock::Get(),
                        TransferKey{7, static_cast<uint64_t>(r + 1)}, Ring(n),
                        i, data[i], scratch[i], options,
                        feedback ? std::span<float>(residual[i])
                                 : std::span<float>())
                        .status;
      });
    for (auto& t : threads) t.join();
    for (int i = 0; i < n; ++i) {
      EXPECT_TRUE(status[i].ok()) << status[i];
      EXPECT_EQ(0, std::memcmp(data[i].data(), data[0].data(), size * 4))
          << "round " << r << ": worker " << i << " differs from worker 0";
    }
    for (size_t k = 0; k < size; ++k) {
      applied_sum[k] += data[0][k];
      const double drift = true_sum[k] - applied_sum[k];
      out.drift[k] = std::max(out.drift[k], std::fabs(drift));
      double residuals = 0;
      for (int i = 0; i < n; ++i) {
        residuals += residual[i][k];
        out.max_residual = std::max<double>(out.max_residual,
                                            std::fabs(residual[i][k]));
      }
      if (feedback)
        out.identity_error = std::max(out.identity_error,
                                      std::fabs(drift - residuals / n));
    }
  }
  return out;
}

// Error feedback: the mean every worker applies, summed over the rounds,
// stays within the residuals of the sum of the true means (it is exactly
// that sum less sum_i e_i / n), the residual stays bounded, and the
// replicas stay bit-identical every round. Without it the small values
// are never sent and the drift grows with the rounds.
TEST(RingAllReduceInt8, ErrorFeedbackKeepsTheResidualBoundedAndTheSumTracking) {
  const int rounds = 120;
  const Int8Rounds with = RunInt8Rounds(true, rounds);
  const Int8Rounds without = RunInt8Rounds(false, rounds);
  double worst_with = 0, worst_without = 0;
  for (size_t k = 0; k < with.drift.size(); ++k) {
    worst_with = std::max(worst_with, with.drift[k]);
    worst_without = std::max(worst_without, without.drift[k]);
  }
  // Half a step of the largest blocks sent (partial sums up to about 4.5:
  // a step of 2^-4) bounds every residual, in every round (0.023
  // measured); the drift is the residuals' mean to fp32 rounding (6e-7).
  EXPECT_LT(with.max_residual, 1.0 / 32);
  EXPECT_LT(with.identity_error, 1e-5);
  EXPECT_LT(worst_with, 0.05);
  // Without: the small values are lost every round (a drift of 2e-3 a
  // round on those coordinates: 0.24 after 120 rounds).
  EXPECT_GT(worst_without, 0.2);
  double small_with = 0, small_without = 0;
  for (size_t k = 1; k < with.drift.size(); k += 64) {
    small_with = std::max(small_with, with.drift[k]);
    small_without = std::max(small_without, without.drift[k]);
  }
  EXPECT_LT(small_with, small_without / 10)
      << "with " << small_with << ", without " << small_without;
}

// Worker 3 is gone: worker 2's send to it fails at once, worker 1's
// receive from it at the deadline (moved there on a fake clock). Both name
// the dead peer.
TEST(RingAllReduce, DeadPeerFailsAtTheDeadlineAndIsNamed) {
  const int n = 3;
  const size_t size = 300;
  FakeClock clock;
  InProcessNetwork network(MailboxOptions{.clock = &clock});
  std::vector<std::unique_ptr<InProcessTransport>> transports;
  for (int i = 0; i < n; ++i) transports.push_back(network.Join(i + 1));
  network.AddFault(InProcessFault::DropPeer(3));
  std::vector<std::vector<float>> data(n, std::vector<float>(size, 1.0f));
  std::vector<std::vector<float>> scratch(n, std::vector<float>(size));
  ExchangeOptions options;
  options.deadline = clock.Now() + absl::Milliseconds(500);
  std::vector<RingAllReduceResult> results(2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([&, i] {
      results[i] = RingAllReduceMean(*transports[i], clock, TransferKey{1, 1},
                                     Ring(n), i, data[i], scratch[i], options);
    });
  threads[1].join();  // worker 2: its send to worker 3 failed at once
  EXPECT_EQ(results[1].status.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(results[1].failed_peers, ::testing::Contains(3u));
  clock.AwaitWaiters(1);  // worker 1 still waits for worker 3
  clock.Advance(absl::Milliseconds(500));
  threads[0].join();
  EXPECT_EQ(results[0].status.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(results[0].failed_peers, ::testing::ElementsAre(3u));
  EXPECT_DOUBLE_EQ(results[0].seconds, 0.5);
}

}  // namespace
}  // namespace gasloc
