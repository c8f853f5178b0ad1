// Local training with readout-gradient consensus (algorithms.md section 6,
// docs/local_rgc.md): K = 1 is global backprop, no gradient crosses a stage
// boundary, the decoder gradient is the mean of the stages' readout
// gradients, and the asynchronous pipeline is deterministic.
#include "worker/train/local_rgc_model.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/support/test_corpus.h"
#include "tests/worker/train/tiny_trainer.h"
#include "worker/train/stage_partition.h"
#include "worker/train/trainer.h"

namespace gasloc {
namespace {

constexpr const char* kShakespeare = gasloc::testing::kTinyShakespeare;

ModelConfig SmallConfig() {
  ModelConfig c;
  c.layers = 4;
  c.d_model = 32;
  c.heads = 2;
  c.context = 16;
  return c;
}

v1::JobSpec SmallSpec(v1::TrainMode mode, int stages, bool asynchronous) {
  v1::JobSpec spec;
  spec.set_name("local-rgc-test");
  spec.mutable_model()->set_layers(4);
  spec.mutable_model()->set_d_model(32);
  spec.mutable_model()->set_heads(2);
  spec.mutable_model()->set_context(32);
  spec.mutable_training()->set_batch(4);
  spec.mutable_training()->set_threads(2);
  spec.mutable_training()->set_seed(11);
  spec.mutable_training()->set_mode(mode);
  spec.mutable_training()->mutable_local_rgc()->set_stages(stages);
  spec.mutable_training()->mutable_local_rgc()->set_asynchronous(asynchronous);
  spec.mutable_training()->mutable_adamw()->set_warmup_steps(3);
  spec.mutable_data()->set_corpus_path(kShakespeare);
  spec.mutable_data()->set_eval_windows(8);
  spec.mutable_stop()->set_max_rounds(40);
  spec.mutable_outer()->set_local_steps(1);
  return spec;
}

std::unique_ptr<Trainer> MakeTrainer(const v1::JobSpec& spec) {
  return gasloc::testing::MakeTrainerOf(spec);
}

bool SameBits(const FloatArena& a, const FloatArena& b) {
  return a.size() == b.size() &&
         std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

std::vector<uint8_t> RandomWindows(int batch, int length, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> w(static_cast<size_t>(batch) * (length + 1));
  for (auto& b : w) b = static_cast<uint8_t>(rng() % 97 + 32);
  return w;
}

// Entries [first, last] of the layout as one flat range.
std::vector<float> Slice(const FloatArena& a, int first, int last) {
  const auto& e = a.layout().entries();
  const size_t begin = e[first].offset, end = e[last].offset + e[last].size;
  return std::vector<float>(a.data() + begin, a.data() + end);
}

TEST(StagePartitionTest, EqualWhenDivisibleBalancedByParametersOtherwise) {
  ModelConfig c = SmallConfig();
  c.layers = 24;
  auto four = PartitionStages(c, 4);
  ASSERT_TRUE(four.ok());
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ((*four)[k].first_block, 6 * k);
    EXPECT_EQ((*four)[k].num_blocks, 6);
  }
  // 5 blocks of d 32 (12 d^2 + 13 d = 12,704 each), embeddings of
  // (256 + 16) x 32 = 8,704 in stage 1: [2 | 3] would cost 34,112 in stage
  // 1 and 38,112 in stage 2; [3 | 2] 46,816 and 25,408. Smallest max: 2|3.
  c.layers = 5;
  auto two = PartitionStages(c, 2);
  ASSERT_TRUE(two.ok());
  EXPECT_EQ((*two)[0].num_blocks, 2);
  EXPECT_EQ((*two)[1].first_block, 2);
  EXPECT_EQ((*two)[1].num_blocks, 3);
  EXPECT_FALSE(PartitionStages(c, 0).ok());
  auto too_many = PartitionStages(c, 6);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(std::string(too_many.status().message()).find("stages"),
            std::string::npos);
}

// K = 1: the same kernels in the same order on one stage thread with all
// threads: losses and parameters equal global backprop's bit for bit, in
// both variants (a one-stage pipeline has nothing in flight).
TEST(LocalRgcTest, OneStageIsGlobalBackpropExactly) {
  for (bool asynchronous : {false, true}) {
    auto global = MakeTrainer(SmallSpec(v1::TRAIN_MODE_GLOBAL, 1, false));
    auto local =
        MakeTrainer(SmallSpec(v1::TRAIN_MODE_LOCAL_RGC, 1, asynchronous));
    ASSERT_TRUE(global && local);
    ASSERT_TRUE(SameBits(global->params(), local->params()));
    for (int step = 0; step < 6; ++step) {
      auto a = global->Step();
      auto b = local->Step();
      ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
      EXPECT_EQ(a->loss, b->loss) << "step " << step;
      EXPECT_EQ(a->grad_norm, b->grad_norm) << "step " << step;
    }
    EXPECT_TRUE(SameBits(global->params(), local->params()))
        << "asynchronous " << asynchronous;
    auto bpb_a = global->EvaluateBpb();
    auto bpb_b = local->EvaluateBpb();
    ASSERT_TRUE(bpb_a.ok() && bpb_b.ok());
    EXPECT_EQ(*bpb_a, *bpb_b);
  }
}

std::unique_ptr<LocalRgcModel> MakeLocal(const ModelConfig& c, int stages,
                                         bool asynchronous, int batch) {
  ModelOptions options;
  options.threads = 2;
  options.max_batch = batch;
  LocalRgcOptions rgc;
  rgc.stages = stages;
  rgc.asynchronous = asynchronous;
  auto model = LocalRgcModel::Create(c, options, rgc);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? std::move(*model) : nullptr;
}

// Changing the targets of stage 2 (of 3) changes stage 2's gradients and
// leaves stage 1's (embeddings, its blocks, its readout gradient) exactly
// as they were; stage 3 does not see stage 2's targets either.
TEST(LocalRgcTest, NoGradientCrossesAStageBoundary) {
  const ModelConfig c = SmallConfig();
  const int B = 3, T = c.context;
  auto model = MakeLocal(c, 3, false, B);
  ASSERT_NE(model, nullptr);
  ASSERT_EQ(model->ranges()[1].first_block, 1);  // 4 blocks: [1 | 1 | 2]
  FloatArena params(model->layout());
  InitParameters(c, 5, &params);
  const auto tokens = RandomWindows(B, T, 1);
  FloatArena before(model->layout()), after(model->layout());
  ASSERT_TRUE(model->ForwardBackward(params, tokens.data(), B, T, &before).ok());
  const std::vector<float> r1 = model->ReadoutGradient(0);
  const std::vector<float> r3 = model->ReadoutGradient(2);
  model->OverrideStageTargets(1, RandomWindows(B, T, 2));
  ASSERT_TRUE(model->ForwardBackward(params, tokens.data(), B, T, &after).ok());
  const ModelTensorIndex idx = TensorIndex(c);
  // Stage 1 = embeddings + block 0; stage 2 = block 1; stage 3 = blocks 2-3.
  EXPECT_EQ(Slice(before, idx.tok_emb, idx.blocks[0].fc2_b),
            Slice(after, idx.tok_emb, idx.blocks[0].fc2_b));
  EXPECT_EQ(r1, model->ReadoutGradient(0));
  EXPECT_EQ(Slice(before, idx.blocks[2].ln1_w, idx.blocks[3].fc2_b),
            Slice(after, idx.blocks[2].ln1_w, idx.blocks[3].fc2_b));
  EXPECT_EQ(r3, model->ReadoutGradient(2));
  EXPECT_NE(Slice(before, idx.blocks[1].ln1_w, idx.blocks[1].fc2_b),
            Slice(after, idx.blocks[1].ln1_w, idx.blocks[1].fc2_b));
  EXPECT_NE(Slice(before, idx.lnf_w, idx.head_w),
            Slice(after, idx.lnf_w, idx.head_w));
}

// The decoder gradient written by a synchronous step is the mean of the
// stages' readout gradients, and each stage's gradients are those of its
// own local loss: both checked against a separate computation with one
// whole TransformerModel driven part by part (loss on block 2's output,
// then on block 4's; a fresh backward for each).
TEST(LocalRgcTest, DecoderGradientIsTheMeanOfTheReadoutGradients) {
  const ModelConfig c = SmallConfig();
  const int B = 2, T = c.context, stride = T + 1;
  auto local = MakeLocal(c, 2, false, B);
  ASSERT_NE(local, nullptr);
  FloatArena params(local->layout());
  InitParameters(c, 9, &params);
  const auto tokens = RandomWindows(B, T, 3);
  FloatArena grads(local->layout());
  ASSERT_TRUE(local->ForwardBackward(params, tokens.data(), B, T, &grads).ok());

  ModelOptions options;
  options.threads = 1;
  options.max_batch = B;
  auto whole = TransformerModel::Create(c, options);
  ASSERT_TRUE(whole.ok());
  TransformerModel& m = **whole;
  ASSERT_TRUE(m.Prepare(params, B, T).ok());
  FloatArena ref(local->layout());
  const size_t d = c.d_model;
  std::vector<float> readout[2];
  const int cuts[3] = {0, 2, 4};
  m.EmbedForward(tokens.data(), stride, m.x(0));
  for (int k = 0; k < 2; ++k) {
    // Stage k's blocks on x(cut_k) (stage 1's backward leaves x(2) as is).
    for (int l = cuts[k]; l < cuts[k + 1]; ++l) {
      m.BlockForward(l, m.x(l), m.x(l + 1));
    }
    const float* h = m.x(cuts[k + 1]);
    m.DecoderForward(h, tokens.data() + 1, stride, true);
    readout[k].assign((2 + kVocabSize) * d, 0.0f);
    m.DecoderBackward(h, m.dx(0),
                      TransformerModel::DecoderGrads{
                          .lnf_w = readout[k].data(),
                          .lnf_b = readout[k].data() + d,
                          .head_w = readout[k].data() + 2 * d});
    for (int l = cuts[k + 1] - 1; l >= cuts[k]; --l) {
      m.BlockBackward(l, m.dx(0), m.dx(0), ref.data());
    }
    if (k == 0) m.EmbedBackward(tokens.data(), stride, m.dx(0), ref.data());
  }
  const ModelTensorIndex idx = TensorIndex(c);
  auto near = [](const std::vector<float>& a, const std::vector<float>& b,
                 const char* what) {
    ASSERT_EQ(a.size(), b.size());
    double max_ref = 0, max_diff = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      max_ref = std::max(max_ref, std::fabs(static_cast<double>(b[i])));
      max_diff = std::max(max_diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    }
    EXPECT_GT(max_ref, 0.0) << what;
    EXPECT_LE(max_diff, 1e-5 * max_ref + 1e-7) << what;
  };
  near(local->ReadoutGradient(0), readout[0], "r_1");
  near(local->ReadoutGradient(1), readout[1], "r_2");
  std::vector<float> mean(readout[0].size());
  for (size_t i = 0; i < mean.size(); ++i) {
    mean[i] = 0.5f * (readout[0][i] + readout[1][i]);
  }
  near(Slice(grads, idx.lnf_w, idx.head_w), [&] {
    // The arena's decoder slots include padding between ln_f and head.
    FloatArena tmp(local->layout());
    std::copy_n(mean.data(), d, tmp.view(idx.lnf_w).data());
    std::copy_n(mean.data() + d, d, tmp.view(idx.lnf_b).data());
    std::copy_n(mean.data() + 2 * d, kVocabSize * d, tmp.view(idx.head_w).data());
    return Slice(tmp, idx.lnf_w, idx.head_w);
  }(), "decoder = mean r_k");
  near(Slice(grads, idx.tok_emb, idx.blocks[3].fc2_b),
       Slice(ref, idx.tok_emb, idx.blocks[3].fc2_b), "stage gradients");
}

// Asynchronous: stage k works on the batch of k ticks ago; the first tick
// leaves stage 2 idle (its gradients zero, its loss NaN); two runs with the
// same seed and thread layout agree bit for bit, and differ from the
// synchronous variant.
TEST(LocalRgcTest, AsynchronousPipelineIsDeterministic) {
  const ModelConfig c = SmallConfig();
  const int B = 2, T = c.context;
  auto model = MakeLocal(c, 2, true, B);
  ASSERT_NE(model, nullptr);
  FloatArena params(model->layout());
  InitParameters(c, 4, &params);
  FloatArena grads(model->layout());
  for (float& g : grads.flat()) g = 1.0f;
  const auto t0 = RandomWindows(B, T, 10), t1 = RandomWindows(B, T, 11);
  ASSERT_TRUE(model->ForwardBackward(params, t0.data(), B, T, &grads).ok());
  EXPECT_FALSE(std::isnan(model->stage_losses()[0]));
  EXPECT_TRUE(std::isnan(model->stage_losses()[1]));
  const ModelTensorIndex idx = TensorIndex(c);
  for (float g : Slice(grads, idx.blocks[2].ln1_w, idx.blocks[3].fc2_b)) {
    ASSERT_EQ(g, 0.0f);
  }
  // Tick 2: stage 2's local loss is on batch t0 (stage 1's output of tick
  // 1); a synchronous step on t0 gives the same stage-2 loss, since the
  // parameters did not change in between.
  ASSERT_TRUE(model->ForwardBackward(params, t1.data(), B, T, &grads).ok());
  auto sync = MakeLocal(c, 2, false, B);
  FloatArena sync_grads(model->layout());
  ASSERT_TRUE(sync->ForwardBackward(params, t0.data(), B, T, &sync_grads).ok());
  EXPECT_NEAR(model->stage_losses()[1], sync->stage_losses()[1], 1e-6);

  // nullopt (with the failure recorded) when the trainer cannot be made.
  auto run = [](bool asynchronous)
      -> std::optional<std::pair<std::vector<double>, FloatArena>> {
    auto trainer =
        MakeTrainer(SmallSpec(v1::TRAIN_MODE_LOCAL_RGC, 2, asynchronous));
    if (trainer == nullptr) return std::nullopt;
    std::vector<double> losses;
    for (int i = 0; i < 8; ++i) {
      auto s = trainer->Step();
      EXPECT_TRUE(s.ok()) << s.status();
      losses.push_back(s.ok() ? s->loss : 0);
    }
    return std::make_pair(losses, FloatArena(trainer->params()));
  };
  auto run_a = run(true), run_b = run(true), run_s = run(false);
  ASSERT_TRUE(run_a && run_b && run_s);
  EXPECT_EQ(run_a->first, run_b->first);
  EXPECT_TRUE(SameBits(run_a->second, run_b->second));
  EXPECT_FALSE(SameBits(run_a->second, run_s->second));
}

TEST(LocalRgcTest, TrainerLearnsInBothVariantsAndEvaluatesTheFullModel) {
  for (bool asynchronous : {false, true}) {
    auto trainer =
        MakeTrainer(SmallSpec(v1::TRAIN_MODE_LOCAL_RGC, 2, asynchronous));
    ASSERT_NE(trainer, nullptr);
    auto start = trainer->EvaluateBpb();
    ASSERT_TRUE(start.ok());
    for (int i = 0; i < 40; ++i) ASSERT_TRUE(trainer->Step().ok());
    auto end = trainer->EvaluateBpb();
    ASSERT_TRUE(end.ok());
    EXPECT_LT(*end, *start - 1.0) << "asynchronous " << asynchronous;
    auto gen = trainer->Generate("a", GenerateOptions{});
    EXPECT_EQ(gen.status().code(), absl::StatusCode::kUnimplemented);
  }
}

TEST(LocalRgcTest, BadSettingsAreRefusedNamingTheField) {
  v1::JobSpec spec = SmallSpec(v1::TRAIN_MODE_LOCAL_RGC, 5, false);
  TrainerOptions options;
  options.spec = spec;
  auto trainer = Trainer::Create(options);
  ASSERT_FALSE(trainer.ok());
  EXPECT_NE(std::string(trainer.status().message())
                .find("training.local_rgc.stages"),
            std::string::npos)
      << trainer.status();
  ModelOptions model_options;
  model_options.first_block = 2;
  model_options.num_blocks = 3;
  auto model = TransformerModel::Create(SmallConfig(), model_options);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(std::string(model.status().message()).find("num_blocks"),
            std::string::npos);
  // A stage model refuses whole-model calls.
  model_options.num_blocks = 1;
  auto stage = TransformerModel::Create(SmallConfig(), model_options);
  ASSERT_TRUE(stage.ok());
  FloatArena params((*stage)->layout());
  const auto tokens = RandomWindows(1, 4, 1);
  EXPECT_EQ((*stage)->Forward(params, tokens.data(), 1, 4).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace gasloc
