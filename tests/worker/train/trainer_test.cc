#include "worker/train/trainer.h"

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/test_corpus.h"
#include "tests/worker/train/tiny_trainer.h"

namespace gasloc {
namespace {

constexpr const char* kShakespeare = gasloc::testing::kTinyShakespeare;

using gasloc::testing::TempPath;
using gasloc::testing::TinySpec;

std::unique_ptr<Trainer> MakeTrainer(const v1::JobSpec& spec, int rank = 0,
                                     int num_workers = 1) {
  TrainerOptions options;
  options.rank = rank;
  options.num_workers = num_workers;
  return gasloc::testing::MakeTrainerOf(spec, options);
}

TEST(TrainerTest, UsesTheDocumentedSplitAndStartsNearEightBitsPerByte) {
  EXPECT_EQ(TrainFractionFromSpec(0.9f), 0.9);
  auto trainer = MakeTrainer(TinySpec());
  ASSERT_NE(trainer, nullptr);
  EXPECT_EQ(trainer->corpus().train().size(), 1003854u);
  EXPECT_EQ(trainer->tokens_per_step(), 4 * 32);
  // Small initial weights give near-uniform predictions: log2(256) = 8.
  auto bpb = trainer->EvaluateBpb();
  ASSERT_TRUE(bpb.ok()) << bpb.status();
  EXPECT_NEAR(*bpb, 8.0, 0.1);
}

TEST(TrainerTest, StepEqualsComputePlusApplyAndLearns) {
  auto a = MakeTrainer(TinySpec());
  auto b = MakeTrainer(TinySpec());
  ASSERT_TRUE(a && b);
  EXPECT_EQ(b->ApplyGradients().status().code(),
            absl::StatusCode::kFailedPrecondition);
  double first = 0, last = 0;
  for (int i = 0; i < 20; ++i) {
    auto s = a->Step();
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->tokens, 128);
    EXPECT_FLOAT_EQ(s->lr, LearningRate(a->optimizer().options(), i));
    auto loss = b->ComputeGradients();
    ASSERT_TRUE(loss.ok());
    EXPECT_EQ(*loss, static_cast<float>(s->loss));
    ASSERT_TRUE(b->ApplyGradients().ok());
    if (i == 0) first = s->loss;
    last = s->loss;
  }
  EXPECT_EQ(a->step(), 20u);
  EXPECT_EQ(a->data_cursor(), 80u);
  for (size_t i = 0; i < a->params().size(); ++i)
    ASSERT_EQ(a->params().data()[i], b->params().data()[i]);
  EXPECT_LT(last, first - 0.3) << "20 steps should cut the loss";
  // The schedule's horizon is stop.max_rounds * local_steps = 20.
  EXPECT_EQ(a->optimizer().options().decay_steps, 20u);
}

TEST(TrainerTest, RanksDrawDifferentBatches) {
  auto r0 = MakeTrainer(TinySpec(), 0, 2);
  auto r1 = MakeTrainer(TinySpec(), 1, 2);
  ASSERT_TRUE(r0 && r1);
  auto l0 = r0->ComputeGradients();
  auto l1 = r1->ComputeGradients();
  ASSERT_TRUE(l0.ok() && l1.ok());
  EXPECT_NE(*l0, *l1);
  TrainerOptions bad;
  bad.spec = TinySpec();
  bad.rank = 2;
  bad.num_workers = 2;
  EXPECT_EQ(Trainer::Create(bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TrainerTest, CheckpointResumeReplaysTheSameLosses) {
  const std::string path = TempPath("trainer_resume.ckpt");
  auto a = MakeTrainer(TinySpec());
  ASSERT_NE(a, nullptr);
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(a->Step().ok());
  CheckpointExtras extras;
  extras.buffers["outer.y_prev"].assign(a->params().flat().begin(),
                                        a->params().flat().end());
  extras.values["round"] = "3";
  ASSERT_TRUE(a->SaveCheckpoint(path, extras).ok());
  std::vector<double> expected;
  for (int i = 0; i < 6; ++i) expected.push_back(a->Step()->loss);

  auto b = MakeTrainer(TinySpec());
  ASSERT_NE(b, nullptr);
  auto loaded = b->LoadCheckpoint(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->values.at("round"), "3");
  EXPECT_EQ(loaded->buffers.at("outer.y_prev").size(), b->params().size());
  EXPECT_EQ(b->step(), 6u);
  EXPECT_EQ(b->data_cursor(), 24u);
  for (int i = 0; i < 6; ++i) {
    auto s = b->Step();
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->loss, expected[i]) << "step " << 7 + i;
  }
  for (size_t i = 0; i < a->params().size(); ++i)
    ASSERT_EQ(a->params().data()[i], b->params().data()[i]);

  v1::JobSpec other = TinySpec();
  other.mutable_model()->set_d_model(64);
  auto c = MakeTrainer(other);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->LoadCheckpoint(path).status().code(),
            absl::StatusCode::kFailedPrecondition);
  std::filesystem::remove(path);
}

TEST(TrainerTest, GeneratesBytes) {
  auto trainer = MakeTrainer(TinySpec());
  ASSERT_NE(trainer, nullptr);
  auto text = trainer->Generate("ROMEO:", {.max_new_bytes = 20, .seed = 3});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->size(), 20u);
  EXPECT_EQ(*text, *trainer->Generate("ROMEO:", {.max_new_bytes = 20, .seed = 3}));
}

// A model whose loss is NaN: the trainer must refuse the step.
class NanModel : public Model {
 public:
  explicit NanModel(const ModelConfig& config)
      : Model(config, MakeModelLayout(config)) {}
  absl::StatusOr<float> ForwardBackward(const FloatArena&, const uint8_t*, int,
                                        int, FloatArena* grads) override {
    grads->SetZero();
    return std::numeric_limits<float>::quiet_NaN();
  }
  absl::StatusOr<float> Forward(const FloatArena&, const uint8_t*, int,
                                int) override {
    return std::numeric_limits<float>::quiet_NaN();
  }
  absl::Status NextByteLogits(const FloatArena&, const uint8_t*, int,
                              float*) override {
    return absl::OkStatus();
  }
  double TrainingFlops(int, int) const override { return 0; }
};

TEST(TrainerTest, NonFiniteLossIsAnErrorAndParamsStayUntouched) {
  const v1::JobSpec spec = TinySpec();
  TrainerOptions options;
  options.spec = spec;
  auto trainer = Trainer::CreateWithModel(
      options, std::make_unique<NanModel>(ModelConfigFromSpec(spec.model())));
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  (*trainer)->params().data()[0] = 1.25f;
  auto step = (*trainer)->Step();
  EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(step.status().message().find("not finite"), std::string::npos);
  EXPECT_EQ((*trainer)->params().data()[0], 1.25f);
  EXPECT_EQ((*trainer)->step(), 0u);
  EXPECT_FALSE((*trainer)->EvaluateBpb().ok());
  EXPECT_EQ((*trainer)->ApplyGradients().status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(TrainerTest, RefusesBadJobs) {
  v1::JobSpec spec = TinySpec();
  spec.mutable_data()->set_corpus_path("/nonexistent/corpus");
  TrainerOptions options;
  options.spec = spec;
  EXPECT_EQ(Trainer::Create(options).status().code(),
            absl::StatusCode::kNotFound);
  spec = TinySpec();
  spec.mutable_model()->set_heads(3);  // 32 % 3 != 0
  options.spec = spec;
  EXPECT_EQ(Trainer::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gasloc
