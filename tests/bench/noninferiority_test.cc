// gasloc-bench noninferiority: the statistics against hand-computed values,
// and the --quick preset end to end (real training in child processes).
#include "bench/noninferiority_stats.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/bench_run.h"

namespace gasloc::bench {
namespace {

TEST(NonInferiorityStatsTest, UpperBoundIsMeanPlusTSdOverRootN) {
  EXPECT_DOUBLE_EQ(StudentT95(4), 2.132);
  EXPECT_DOUBLE_EQ(StudentT95(1), 6.314);
  EXPECT_NEAR(StudentT95(1000), 1.645, 0.01);
  // d = 1, 2, 3, 4, 5 %: mean 3 %, sd sqrt(2.5) %, bound 3 + 2.132 *
  // 1.5811 / 2.2361 = 4.5075 %.
  const NonInferiority r =
      TestNonInferiority({0.01, 0.02, 0.03, 0.04, 0.05}, 0.01);
  EXPECT_EQ(r.n, 5);
  EXPECT_NEAR(r.mean_gap, 0.03, 1e-12);
  EXPECT_NEAR(r.sd_gap, std::sqrt(2.5) / 100, 1e-12);
  EXPECT_NEAR(r.upper_bound, 0.045075, 1e-5);
  EXPECT_FALSE(r.pass);
  // Below the margin: better than global on every seed.
  EXPECT_TRUE(TestNonInferiority({-0.01, -0.012, -0.008, -0.011, -0.009}, 0.01)
                  .pass);
  // A mean below the margin is not enough when the spread is wide.
  EXPECT_FALSE(TestNonInferiority({0.0, 0.02, -0.01, 0.03, -0.02}, 0.01).pass);
}

using testing::JsonNumber;

TEST(NonInferiorityBenchTest, QuickPresetPrintsTheTableAndVerdict) {
  const testing::BenchRun run =
      testing::RunBench("noninferiority --quick --stages=2");
  ASSERT_EQ(run.status, 0) << run.output;
  const std::string& out = run.output;
  const std::string& last = run.json;
  EXPECT_NE(out.find("| seed | tok/s BP | tok/s RGC |"), std::string::npos)
      << out;
  EXPECT_NE(out.find("upper bound"), std::string::npos) << out;
  EXPECT_TRUE(out.find(": PASS") != std::string::npos ||
              out.find(": FAIL") != std::string::npos)
      << out;
  EXPECT_EQ(JsonNumber(last, "seeds"), 5) << last;
  EXPECT_EQ(JsonNumber(last, "stages"), 2) << last;
  EXPECT_GT(JsonNumber(last, "throughput_ratio"), 0.05) << last;
  EXPECT_GT(JsonNumber(last, "memory_ratio"), 0.5) << last;
  // 30 steps learn something on both sides (uniform = 8 bits per byte).
  EXPECT_LT(JsonNumber(last, "bpb_global"), 7.0) << last;
  EXPECT_LT(JsonNumber(last, "bpb_rgc"), 7.0) << last;
  EXPECT_LT(std::fabs(JsonNumber(last, "mean_gap")), 0.5) << last;
}

}  // namespace
}  // namespace gasloc::bench
