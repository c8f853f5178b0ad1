#include "worker/round/ring_all_reduce.h"

#include <cstring>
#include <random>
#include <thread>
#include <vector>

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
      results[i] = RingAllReduceMean(*transports[i], TransferKey{7, 3}, Ring(n),
                                     i, data[i], scratch[i], options);
    });
  }
  for (auto& t : threads) t.join();
  const double tol = encoding == v1::WIRE_ENCODING_BF16 ? 2e-2 : 1e-5;
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
                                         v1::WIRE_ENCODING_BF16)));

TEST(RingAllReduce, DeadPeerFailsWithinTheDeadlineAndIsNamed) {
  const int n = 3;
  const size_t size = 300;
  InProcessNetwork network;
  std::vector<std::unique_ptr<InProcessTransport>> transports;
  for (int i = 0; i < n; ++i) transports.push_back(network.Join(i + 1));
  network.AddFault(InProcessFault::DropPeer(3));
  std::vector<std::vector<float>> data(n, std::vector<float>(size, 1.0f));
  std::vector<std::vector<float>> scratch(n, std::vector<float>(size));
  ExchangeOptions options;
  options.deadline = absl::Now() + absl::Milliseconds(500);
  const absl::Time start = absl::Now();
  std::vector<RingAllReduceResult> results(2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i)
    threads.emplace_back([&, i] {
      results[i] = RingAllReduceMean(*transports[i], TransferKey{1, 1}, Ring(n),
                                     i, data[i], scratch[i], options);
    });
  for (auto& t : threads) t.join();
  EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << "deadline not respected";
  for (int i = 0; i < 2; ++i) {
    EXPECT_FALSE(results[i].status.ok());
    EXPECT_FALSE(results[i].failed_peers.empty());
  }
}

}  // namespace
}  // namespace gasloc
