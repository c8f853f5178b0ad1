#include "bench/consensus_stats.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace gasloc::bench {
namespace {

TEST(ComputeConsensus, MeanSquaredDistanceToTheAverage) {
  // Three models of two parameters: the average is (2, 0); squared
  // distances 1 + 4, 0 + 0, 1 + 4 -> mean 10/3, max 5.
  const std::vector<float> a = {1, 2}, b = {2, 0}, c = {3, -2};
  std::vector<float> average;
  const ConsensusStats stats =
      ComputeConsensus({std::span<const float>(a), std::span<const float>(b),
                        std::span<const float>(c)},
                       &average);
  EXPECT_EQ(stats.models, 3u);
  EXPECT_EQ(stats.parameters, 2u);
  ASSERT_EQ(average.size(), 2u);
  EXPECT_FLOAT_EQ(average[0], 2);
  EXPECT_FLOAT_EQ(average[1], 0);
  EXPECT_DOUBLE_EQ(stats.consensus_distance, 10.0 / 3.0);  // mean square
  EXPECT_DOUBLE_EQ(stats.consensus_rms, std::sqrt(10.0 / 3.0));  // the spec's
  EXPECT_DOUBLE_EQ(stats.max_squared_distance, 5);
}

TEST(ComputeConsensus, IdenticalReplicasAreAtDistanceZero) {
  const std::vector<float> a = {0.1f, -7.25f, 3e-8f};
  std::vector<float> average;
  const ConsensusStats stats = ComputeConsensus(
      {std::span<const float>(a), std::span<const float>(a)}, &average);
  EXPECT_EQ(stats.consensus_distance, 0);
  EXPECT_EQ(average, a);
}

}  // namespace
}  // namespace gasloc::bench
