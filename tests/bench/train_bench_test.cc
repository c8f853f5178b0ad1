// gasloc-bench train end to end on a tiny shape: our run, the linear floor
// and two alternating rounds against the PyTorch reference (real processes),
// checked through the one JSON line the bench ends with.
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/bench_run.h"

namespace gasloc::bench {
namespace {

using testing::JsonNumber;

TEST(TrainBenchTest, TinyShapeReportsFloorAndMedianRatioOverRounds) {
  const testing::BenchRun run = testing::RunBench(
      "train --layers=1 --d-model=32 --heads=2 --ctx=32 --batch=2 "
      "--threads=2 --steps=3 --warmup=1 --dtype=bf16 --linear-floor "
      "--compare-torch --rounds=2");
  ASSERT_EQ(run.status, 0) << run.output;
  const std::string& out = run.output;
  const std::string& last = run.json;
  EXPECT_NE(out.find("linear floor of one step"), std::string::npos) << out;
  EXPECT_NE(out.find("round 2: ours"), std::string::npos) << out;
  EXPECT_GT(JsonNumber(last, "tokens_per_s"), 0) << last;
  EXPECT_GT(JsonNumber(last, "linear_floor_ms"), 0) << last;
  EXPECT_EQ(JsonNumber(last, "rounds"), 2) << last;
  EXPECT_GT(JsonNumber(last, "speedup_vs_torch"), 0) << last;
  EXPECT_GT(JsonNumber(last, "speedup_bound_from_linear_floor"), 0) << last;
  // Two per-round ratios, and the reported one is their median (mean of 2).
  const size_t at = last.find("\"speedup_vs_torch_by_round\": [");
  ASSERT_NE(at, std::string::npos) << last;
  char* end = nullptr;
  const double r1 = std::strtod(last.c_str() + last.find('[', at) + 1, &end);
  const double r2 = std::strtod(end + 1, nullptr);
  EXPECT_GT(r1, 0);
  EXPECT_GT(r2, 0);
  EXPECT_NEAR(JsonNumber(last, "speedup_vs_torch"), (r1 + r2) / 2, 1e-3) << last;
}

}  // namespace
}  // namespace gasloc::bench
