#include "worker/train/adamw.h"

#include <cmath>
#include <limits>
#include <memory>

#include "gtest/gtest.h"

namespace gasloc {
namespace {

std::shared_ptr<const ArenaLayout> SmallLayout() {
  return std::make_shared<ArenaLayout>(std::vector<TensorSpec>{
      {"w1", {7, 5}, true},
      {"b1", {5}, false},
      {"ln.gain", {3}, false},
      {"w2", {40000}, true},  // several pieces of the threaded loop
  });
}

void Fill(FloatArena* arena, uint64_t seed, float scale) {
  const auto& entries = arena->layout().entries();
  for (size_t e = 0; e < entries.size(); ++e) {
    auto view = arena->view(e);
    for (size_t i = 0; i < view.size(); ++i) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      view[i] = scale * (static_cast<float>(seed >> 40) / (1 << 24) - 0.5f);
    }
  }
}

TEST(LearningRateTest, WarmupThenCosineToMinimum) {
  AdamWOptions o;
  o.lr = 1e-3f;
  o.warmup_steps = 10;
  o.decay_steps = 110;
  o.min_lr_ratio = 0.1f;
  EXPECT_FLOAT_EQ(LearningRate(o, 0), 1e-4f);
  EXPECT_FLOAT_EQ(LearningRate(o, 4), 5e-4f);
  EXPECT_FLOAT_EQ(LearningRate(o, 9), 1e-3f);
  EXPECT_FLOAT_EQ(LearningRate(o, 10), 1e-3f);
  EXPECT_FLOAT_EQ(LearningRate(o, 60), 0.55e-3f);  // halfway: (max + min) / 2
  EXPECT_LT(LearningRate(o, 61), LearningRate(o, 60));
  EXPECT_FLOAT_EQ(LearningRate(o, 110), 1e-4f);
  EXPECT_FLOAT_EQ(LearningRate(o, 100000), 1e-4f);
  o.decay_steps = 0;  // no decay
  EXPECT_FLOAT_EQ(LearningRate(o, 500), 1e-3f);
  o.warmup_steps = 0;
  EXPECT_FLOAT_EQ(LearningRate(o, 0), 1e-3f);
}

TEST(AdamWTest, MatchesThePlainLoopReferenceOverSeveralSteps) {
  auto layout = SmallLayout();
  AdamWOptions o;
  o.warmup_steps = 2;
  o.decay_steps = 6;
  o.grad_clip = 0;  // no clipping: compare the update alone
  o.threads = 2;
  AdamW adamw(layout, o);
  FloatArena params(layout), grads(layout), ref_params(layout),
      ref_m(layout), ref_v(layout);
  Fill(&params, 1, 2.0f);
  ref_params.CopyFrom(params);
  for (uint64_t step = 0; step < 6; ++step) {
    Fill(&grads, 100 + step, 0.1f);
    auto stats = adamw.Step(&params, grads);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_FLOAT_EQ(stats->lr, LearningRate(o, step));
    AdamWReferenceUpdate(o, stats->lr, step + 1, 1.0f, &ref_params, grads,
                         &ref_m, &ref_v);
  }
  EXPECT_EQ(adamw.step(), 6u);
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_NEAR(params.data()[i], ref_params.data()[i],
                1e-6f * (1 + std::fabs(ref_params.data()[i])))
        << "element " << i;
    ASSERT_NEAR(adamw.m().data()[i], ref_m.data()[i], 1e-7f);
    ASSERT_NEAR(adamw.v().data()[i], ref_v.data()[i], 1e-9f);
  }
}

// A schedule position set for the next step picks its learning rate, for
// that step only; the bias correction still counts the steps taken.
TEST(AdamWTest, ScheduleStepSetsTheNextStepsRateOnce) {
  auto layout = SmallLayout();
  AdamWOptions o;
  o.warmup_steps = 10;
  o.decay_steps = 100;
  AdamW adamw(layout, o);
  FloatArena params(layout), grads(layout);
  Fill(&params, 1, 1.0f);
  Fill(&grads, 2, 0.1f);
  adamw.set_schedule_step(60);
  EXPECT_EQ(adamw.schedule_step(), 60u);
  auto first = adamw.Step(&params, grads);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FLOAT_EQ(first->lr, LearningRate(o, 60));
  EXPECT_EQ(adamw.step(), 1u);
  EXPECT_EQ(adamw.schedule_step(), 1u);
  auto second = adamw.Step(&params, grads);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_FLOAT_EQ(second->lr, LearningRate(o, 1));
}

// Issue 32 item 5: the progress form. Warmup by the step as before, then
// the cosine by the fraction of the job's horizon (wall-clock, tokens),
// whatever decay_steps says: peak at 0, halfway at 1/2, the floor at 1.
TEST(AdamWTest, ProgressFormAnnealsByTheHorizonFraction) {
  AdamWOptions o;
  o.lr = 1e-3f;
  o.min_lr_ratio = 0.1f;
  o.warmup_steps = 10;
  o.decay_steps = 0;  // the step form would stay at the peak
  EXPECT_FLOAT_EQ(LearningRate(o, 4, 0.9), LearningRate(o, 4));  // warmup
  EXPECT_FLOAT_EQ(LearningRate(o, 50, 0.0), 1e-3f);
  EXPECT_FLOAT_EQ(LearningRate(o, 50, 0.5), 0.55e-3f);
  EXPECT_FLOAT_EQ(LearningRate(o, 50, 1.0), 1e-4f);
  EXPECT_FLOAT_EQ(LearningRate(o, 50, 1.7), 1e-4f);   // clamped
  EXPECT_FLOAT_EQ(LearningRate(o, 50, -0.2), 1e-3f);  // clamped
  EXPECT_FLOAT_EQ(LearningRate(o, 50), 1e-3f);
  // Set for the next step only, as the schedule step.
  auto layout = SmallLayout();
  AdamW adamw(layout, o);
  adamw.set_step(50);
  FloatArena params(layout), grads(layout);
  Fill(&params, 1, 1.0f);
  Fill(&grads, 2, 0.1f);
  adamw.set_schedule_progress(1.0);
  EXPECT_FLOAT_EQ(adamw.next_lr(), 1e-4f);
  auto first = adamw.Step(&params, grads);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_FLOAT_EQ(first->lr, 1e-4f);
  EXPECT_FLOAT_EQ(adamw.next_lr(), 1e-3f);
}

TEST(AdamWTest, FirstStepByHandWithDecayOnMatricesOnly) {
  auto layout = SmallLayout();
  AdamWOptions o;
  o.lr = 0.01f;
  o.warmup_steps = 0;
  o.weight_decay = 0.1f;
  o.grad_clip = 0;
  AdamW adamw(layout, o);
  FloatArena params(layout), grads(layout);
  const size_t w1 = layout->entries()[0].offset, b1 = layout->entries()[1].offset;
  params.data()[w1] = 2.0f;
  params.data()[b1] = 2.0f;
  grads.data()[w1] = 0.5f;
  grads.data()[b1] = -0.5f;
  params.data()[w1 + 1] = 3.0f;  // zero gradient: only the decay moves it
  ASSERT_TRUE(adamw.Step(&params, grads).ok());
  // Step 1: m_hat = g, v_hat = g^2, update = lr * g / (|g| + eps).
  EXPECT_NEAR(params.data()[w1], 2.0f * (1 - 0.01f * 0.1f) - 0.01f, 3e-7f);
  EXPECT_NEAR(params.data()[b1], 2.0f + 0.01f, 3e-7f);
  EXPECT_FLOAT_EQ(params.data()[w1 + 1], 3.0f * (1 - 0.01f * 0.1f));
  EXPECT_NEAR(adamw.m().data()[w1], 0.05f, 3e-8f);
  EXPECT_NEAR(adamw.v().data()[w1], 0.05f * 0.25f, 3e-9f);
}

TEST(AdamWTest, ClipsToTheGlobalNorm) {
  auto layout = SmallLayout();
  AdamWOptions o;
  o.grad_clip = 1.0f;
  o.warmup_steps = 0;
  AdamW adamw(layout, o);
  FloatArena params(layout), grads(layout), ref_params(layout),
      ref_m(layout), ref_v(layout);
  Fill(&params, 3, 1.0f);
  ref_params.CopyFrom(params);
  Fill(&grads, 4, 1.0f);
  double sum = 0;
  for (size_t i = 0; i < grads.size(); ++i)
    sum += double{grads.data()[i]} * grads.data()[i];
  const double norm = std::sqrt(sum);
  ASSERT_GT(norm, 10.0);
  EXPECT_NEAR(GlobalGradNorm(grads, 2), norm, 1e-9 * norm);
  auto stats = adamw.Step(&params, grads);
  ASSERT_TRUE(stats.ok());
  EXPECT_NEAR(stats->grad_norm, norm, 1e-9 * norm);
  EXPECT_NEAR(stats->clip_scale, 1.0 / (norm + 1e-6), 1e-7);
  AdamWReferenceUpdate(o, stats->lr, 1, stats->clip_scale, &ref_params, grads,
                       &ref_m, &ref_v);
  for (size_t i = 0; i < params.size(); ++i) {
    ASSERT_NEAR(adamw.m().data()[i], ref_m.data()[i], 1e-8f) << i;
    ASSERT_NEAR(params.data()[i], ref_params.data()[i], 1e-6f) << i;
  }
  // Under the threshold nothing is scaled.
  FloatArena small(layout);
  small.data()[0] = 0.5f;
  auto unclipped = adamw.Step(&params, small);
  ASSERT_TRUE(unclipped.ok());
  EXPECT_EQ(unclipped->clip_scale, 1.0f);
}

TEST(AdamWTest, NonFiniteGradientLeavesEverythingUntouched) {
  auto layout = SmallLayout();
  AdamW adamw(layout, AdamWOptions{});
  FloatArena params(layout), grads(layout);
  Fill(&params, 5, 1.0f);
  const FloatArena before = params;
  grads.data()[3] = std::numeric_limits<float>::quiet_NaN();
  auto stats = adamw.Step(&params, grads);
  EXPECT_EQ(stats.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(stats.status().message().find("not finite"), std::string::npos);
  EXPECT_EQ(adamw.step(), 0u);
  for (size_t i = 0; i < params.size(); ++i)
    ASSERT_EQ(params.data()[i], before.data()[i]);
  for (size_t i = 0; i < params.size(); ++i) ASSERT_EQ(adamw.m().data()[i], 0);
}

TEST(AdamWTest, OptionsFromSpec) {
  v1::AdamWSpec spec;
  spec.set_lr(0.5f);
  spec.set_warmup_steps(7);
  spec.set_decay_steps(70);
  spec.set_min_lr_ratio(0.2f);
  spec.set_beta1(0.8f);
  spec.set_beta2(0.9f);
  spec.set_eps(1e-6f);
  spec.set_weight_decay(0.3f);
  spec.set_grad_clip(2.0f);
  const AdamWOptions o = AdamWOptionsFromSpec(spec);
  EXPECT_EQ(o.lr, 0.5f);
  EXPECT_EQ(o.warmup_steps, 7u);
  EXPECT_EQ(o.decay_steps, 70u);
  EXPECT_EQ(o.min_lr_ratio, 0.2f);
  EXPECT_EQ(o.beta1, 0.8f);
  EXPECT_EQ(o.beta2, 0.9f);
  EXPECT_EQ(o.eps, 1e-6f);
  EXPECT_EQ(o.weight_decay, 0.3f);
  EXPECT_EQ(o.grad_clip, 2.0f);
}

}  // namespace
}  // namespace gasloc
