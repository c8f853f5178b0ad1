// Issue 3's training acceptance test: a seeded 300-step run of preset S
// (4 layers, d 256, 4 heads, ctx 256, batch 16; fp32, 2 compute threads) on
// tinyshakespeare.txt reaches a pinned validation bits per byte, and a
// fresh trainer resumed from the checkpoint written at step 150 reproduces
// the uninterrupted run's losses for steps 151-300 bit for bit.
//
// Cost: 450 preset-S steps (300 + the 150 resumed), 2-4 minutes on 2 quiet
// cores, so it is its own binary in the `integration` label (run serially).
// docs/training.md ("Acceptance run") records the pinned value and how the
// tolerance was chosen.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_corpus.h"
#include "worker/train/trainer.h"

namespace gasloc {
namespace {

struct AcceptanceConfig {
  int layers, d_model, heads, context, batch;
  int threads;
  int steps, resume_at, warmup;
  double pinned_bpb, tolerance;
};
// Preset S, seed 1234, fp32, 2 threads. pinned_bpb: two runs of this test
// (same binary) both printed "val_bpb 3.3637" (bit-identical runs). The
// tolerance is for kernel rounding, not for run-to-run noise (there is
// none at a fixed thread count): another CPU's oneDNN kernels (AVX2, AMX),
// another thread count or a reworked kernel change the summation order and
// so the trajectory; docs/training.md gives the measured spread. A real
// defect moves far more: the untrained model is at 8.1 bits per byte, and a
// broken schedule, gradient or resume misses by tenths.
constexpr AcceptanceConfig kConfig = {
    .layers = 4, .d_model = 256, .heads = 4, .context = 256, .batch = 16,
    .threads = 2, .steps = 300, .resume_at = 150, .warmup = 30,
    .pinned_bpb = 3.3637, .tolerance = 0.03};

v1::JobSpec AcceptanceSpec() {
  v1::JobSpec spec;
  spec.set_name("acceptance");
  spec.mutable_model()->set_layers(kConfig.layers);
  spec.mutable_model()->set_d_model(kConfig.d_model);
  spec.mutable_model()->set_heads(kConfig.heads);
  spec.mutable_model()->set_context(kConfig.context);
  spec.mutable_training()->set_batch(kConfig.batch);
  spec.mutable_training()->set_threads(kConfig.threads);
  spec.mutable_training()->set_precision(v1::PRECISION_FP32);
  spec.mutable_training()->set_seed(1234);
  spec.mutable_training()->mutable_adamw()->set_warmup_steps(kConfig.warmup);
  spec.mutable_training()->mutable_adamw()->set_decay_steps(kConfig.steps);
  spec.mutable_data()->set_corpus_path(gasloc::testing::kTinyShakespeare);
  spec.mutable_data()->set_eval_windows(64);
  spec.mutable_stop()->set_max_rounds(kConfig.steps);
  spec.mutable_outer()->set_local_steps(1);
  return spec;
}

TEST(AcceptanceTest, SeededRunReachesPinnedBpbAndResumesExactly) {
  const auto start = std::chrono::steady_clock::now();
  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("acceptance." + std::to_string(::getpid()) + ".ckpt"))
          .string();
  TrainerOptions options;
  options.spec = AcceptanceSpec();
  auto full = Trainer::Create(options);
  ASSERT_TRUE(full.ok()) << full.status();
  std::vector<double> losses;
  for (int step = 0; step < kConfig.steps; ++step) {
    if (step == kConfig.resume_at) {
      ASSERT_TRUE((*full)->SaveCheckpoint(path).ok());
    }
    auto s = (*full)->Step();
    ASSERT_TRUE(s.ok()) << s.status();
    losses.push_back(s->loss);
  }
  auto bpb = (*full)->EvaluateBpb();
  ASSERT_TRUE(bpb.ok()) << bpb.status();
  std::printf("val_bpb %.4f after %d steps (first loss %.4f, last %.4f)\n",
              *bpb, kConfig.steps, losses.front(), losses.back());
  EXPECT_NEAR(*bpb, kConfig.pinned_bpb, kConfig.tolerance);

  auto resumed = Trainer::Create(options);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  ASSERT_TRUE((*resumed)->LoadCheckpoint(path).ok());
  ASSERT_EQ((*resumed)->step(), static_cast<uint64_t>(kConfig.resume_at));
  for (int step = kConfig.resume_at; step < kConfig.steps; ++step) {
    auto s = (*resumed)->Step();
    ASSERT_TRUE(s.ok()) << s.status();
    ASSERT_EQ(s->loss, losses[step]) << "step " << step + 1;
  }
  auto resumed_bpb = (*resumed)->EvaluateBpb();
  ASSERT_TRUE(resumed_bpb.ok());
  EXPECT_EQ(*resumed_bpb, *bpb);
  std::filesystem::remove(path);
  std::printf("acceptance run took %.1f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                            start)
                  .count());
}

}  // namespace
}  // namespace gasloc
