// gasloc-bench train end to end on a tiny shape: our run, the linear floor
// and two alternating rounds against the PyTorch reference (real processes),
// checked through the one JSON line the bench ends with.
#include <cstdlib>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "tests/support/bench_run.h"

namespace gasloc::bench {
namespace {

using testing::JsonNumber;

// fp32, which PyTorch computes on every CPU (its bf16 needs AVX-512).
TEST(TrainBenchTest, TinyShapeReportsFloorAndMedianRatioOverRounds) {
  const testing::BenchRun run = testing::RunBench(
      "train --layers=1 --d-model=32 --heads=2 --ctx=32 --batch=2 "
      "--threads=2 --steps=3 --warmup=1 --dtype=fp32 --linear-floor "
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
  EXPECT_NE(last.find("\"computed_precision\": \"fp32\""), std::string::npos)
      << last;
}

// bf16 on any CPU (run capped to AVX2 in CI too): the figures carry the
// precision actually computed, native or emulated; what oneDNN cannot do
// here (its own bf16 matmul peak on AVX2) is skipped with the reason, and
// a PyTorch that cannot run bf16 skips the comparison, never the run.
TEST(TrainBenchTest, Bf16ReportsTheComputedPrecisionOnEveryCpu) {
  const testing::BenchRun run = testing::RunBench(
      "train --layers=1 --d-model=32 --heads=2 --ctx=32 --batch=2 "
      "--threads=2 --steps=2 --warmup=1 --dtype=bf16 --linear-floor "
      "--matmul-peak --compare-torch");
  ASSERT_EQ(run.status, 0) << run.output;
  const std::string& last = run.json;
  const bool native =
      last.find("\"computed_precision\": \"bf16 native\"") != std::string::npos;
  const bool emulated =
      last.find("\"computed_precision\": \"bf16 emulated\"") != std::string::npos;
  EXPECT_TRUE(native != emulated) << last;
  const std::string tag = native ? "[bf16 native]" : "[bf16 emulated]";
  EXPECT_NE(run.output.find("linear floor of one step " + tag),
            std::string::npos) << run.output;
  EXPECT_NE(run.output.find("tok/s"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find(tag), std::string::npos) << run.output;
  EXPECT_GT(JsonNumber(last, "tokens_per_s"), 0) << last;
  EXPECT_GT(JsonNumber(last, "linear_floor_ms"), 0) << last;
  EXPECT_GT(JsonNumber(last, "step_over_linear_floor"), 0) << last;
  EXPECT_NE(run.output.find("x its linear floor"), std::string::npos)
      << run.output;
  EXPECT_GT(JsonNumber(last, "matmul_peak_fp32_gflops"), 0) << last;
  if (native) {
    EXPECT_GT(JsonNumber(last, "matmul_peak_bf16_gflops"), 0) << last;
  } else {
    EXPECT_NE(last.find("\"matmul_peak_bf16_skipped\": \"INTERNAL: bf16 matmul "
                        "peak in bf16 on this CPU (oneDNN isa "),
              std::string::npos) << last;
  }
  // Either PyTorch ran bf16 here, or the comparison says why it did not.
  EXPECT_TRUE(JsonNumber(last, "speedup_vs_torch") > 0 ||
              last.find("\"torch_skipped\": \"PyTorch bf16 run failed") !=
                  std::string::npos) << last;
}

// --profile: the step split by operation class and pass, every class of
// the model present, and the model's operations never more than the step
// they were timed in (what the step spends outside them is its remainder,
// so double counting would make that negative).
TEST(TrainBenchTest, ProfileSplitsTheStepByOperationAndPass) {
  const testing::BenchRun run = testing::RunBench(
      "train --layers=1 --d-model=32 --heads=2 --ctx=32 --batch=2 "
      "--threads=2 --steps=3 --warmup=1 --dtype=bf16 --nolinear-floor "
      "--profile");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("time by operation class, ms per step (mean of 2 "
                            "steps"),
            std::string::npos) << run.output;
  const std::string& last = run.json;
  const size_t at = last.find("\"profile_ms_fwd_bwd\": {");
  ASSERT_NE(at, std::string::npos) << last;
  // [forward, backward] of one class.
  const auto pair = [&](const std::string& name) {
    const size_t key = last.find("\"" + name + "\": [", at);
    EXPECT_NE(key, std::string::npos) << name << " in " << last;
    if (key == std::string::npos) return std::pair<double, double>(-1, -1);
    char* end = nullptr;
    const double fwd = std::strtod(last.c_str() + last.find('[', key) + 1, &end);
    return std::pair<double, double>(fwd, std::strtod(end + 1, nullptr));
  };
  for (const char* name : {"qkv", "attention", "proj", "fc", "fc2", "head",
                           "layernorm", "embed"}) {
    const auto [fwd, bwd] = pair(name);
    EXPECT_GT(fwd, 0) << name;
    EXPECT_GT(bwd, 0) << name;
  }
  EXPECT_GT(pair("gelu").first, 0);
  EXPECT_GT(pair("optimizer").second, 0);
  EXPECT_GE(pair("data_and_grad_norm").second, -0.01) << last;
}

}  // namespace
}  // namespace gasloc::bench
