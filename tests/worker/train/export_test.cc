// Export to safetensors + config.json and import back (worker/train/export.h):
// GPT-2's tensor names, the Conv1D transposition, exact fp32 round trips,
// bf16 rounding, the config's fields, and a checkpoint's export.
#include "worker/train/export.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/worker/train/tiny_trainer.h"
#include "worker/model/kernels.h"

namespace gasloc {
namespace {

const ModelConfig kConfig{.layers = 2, .d_model = 16, .heads = 2, .context = 8};

// Every parameter distinct: params[i] = i / total - 0.5.
FloatArena DistinctParams(const ModelConfig& config) {
  FloatArena params(MakeModelLayout(config));
  for (size_t i = 0; i < params.size(); ++i)
    params.data()[i] = static_cast<float>(i) / params.size() - 0.5f;
  return params;
}

std::vector<float> AsFloats(const SafetensorsView& view) {
  std::vector<float> out(view.data.size() / 4);
  std::memcpy(out.data(), view.data.data(), view.data.size());
  return out;
}

TEST(ExportTest, TensorsCarryGpt2NamesInArenaOrder) {
  std::vector<std::string> names;
  for (const ExportedTensor& t : ExportedTensors(kConfig)) names.push_back(t.name);
  std::vector<std::string> expected = {"transformer.wte.weight",
                                       "transformer.wpe.weight"};
  for (int l = 0; l < 2; ++l) {
    for (const char* s : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight",
                          "attn.c_attn.bias", "attn.c_proj.weight",
                          "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
                          "mlp.c_fc.weight", "mlp.c_fc.bias",
                          "mlp.c_proj.weight", "mlp.c_proj.bias"})
      expected.push_back(absl::StrCat("transformer.h.", l, ".", s));
  }
  for (const char* s : {"transformer.ln_f.weight", "transformer.ln_f.bias",
                        "lm_head.weight"})
    expected.push_back(s);
  EXPECT_EQ(names, expected);
}

// Our (out, in) matrices become GPT-2's Conv1D (in, out); q, k, v stay in
// their order along the output (docs/model.md's [q | k | v] is c_attn's).
TEST(ExportTest, BlockMatricesAreTransposedToConv1DLayout) {
  const FloatArena params = DistinctParams(kConfig);
  auto file_bytes = EncodeSafetensors(
      ExportTensors(kConfig, params, ExportDtype::kF32), {});
  auto file = ParseSafetensors(file_bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  const ModelTensorIndex index = TensorIndex(kConfig);
  const int d = kConfig.d_model;
  const SafetensorsView* c_attn = file->Find("transformer.h.1.attn.c_attn.weight");
  ASSERT_NE(c_attn, nullptr);
  EXPECT_EQ(c_attn->shape, (std::vector<int64_t>{d, 3 * d}));
  const std::vector<float> exported = AsFloats(*c_attn);
  const auto qkv = params.view(index.blocks[1].qkv_w);  // (3d, d)
  for (int in = 0; in < d; ++in) {
    for (int out = 0; out < 3 * d; ++out)
      ASSERT_EQ(exported[in * 3 * d + out], qkv[out * d + in]) << in << " " << out;
  }
  const SafetensorsView* fc2 = file->Find("transformer.h.0.mlp.c_proj.weight");
  ASSERT_NE(fc2, nullptr);
  EXPECT_EQ(fc2->shape, (std::vector<int64_t>{4 * d, d}));
  const SafetensorsView* head = file->Find("lm_head.weight");
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->shape, (std::vector<int64_t>{256, d}));
  const auto head_ours = params.view(index.head_w);
  EXPECT_EQ(AsFloats(*head), std::vector<float>(head_ours.begin(), head_ours.end()));
}

TEST(ExportTest, Fp32RoundTripIsExactAndBf16IsRounded) {
  const FloatArena params = DistinctParams(kConfig);
  for (ExportDtype dtype : {ExportDtype::kF32, ExportDtype::kBF16}) {
    const std::string bytes =
        EncodeSafetensors(ExportTensors(kConfig, params, dtype), {});
    FloatArena back(MakeModelLayout(kConfig));
    ASSERT_TRUE(ImportModelFromBytes(bytes, "mem", kConfig, &back).ok());
    for (size_t i = 0; i < params.size(); ++i) {
      const float want =
          dtype == ExportDtype::kF32
              ? params.data()[i]
              : kernels::Bf16ToFloat(kernels::FloatToBf16(params.data()[i]));
      ASSERT_EQ(back.data()[i], want) << i;
    }
  }
}

TEST(ExportTest, ConfigJsonHasGpt2FieldsAndTheJob) {
  ExportOptions options;
  options.spec = testing::TinySpec();
  options.metrics["val_bpb"] = 2.5;
  options.metrics["nan"] = std::nan("");
  options.values["job_id"] = "job \"7\"";
  const std::string json =
      ExportConfigJson({.layers = 4, .d_model = 256, .heads = 4, .context = 256},
                       options);
  for (const char* field :
       {"\"model_type\": \"gpt2\"", "\"vocab_size\": 256",
        "\"n_positions\": 256", "\"n_ctx\": 256", "\"n_embd\": 256",
        "\"n_layer\": 4", "\"n_head\": 4", "\"n_inner\": 1024",
        "\"activation_function\": \"gelu\"", "\"layer_norm_epsilon\": 1e-05",
        "\"tie_word_embeddings\": false", "\"torch_dtype\": \"float32\"",
        "\"metrics\": {\"val_bpb\": 2.5}", "\"job_id\": \"job \\\"7\\\"\"",
        "\"spec\": {\"name\":\"tiny-trainer\""})
    EXPECT_NE(json.find(field), std::string::npos) << field << "\n" << json;
}

TEST(ExportTest, ACheckpointExportsAndImportsIntoAnEqualModel) {
  auto trainer = testing::MakeTrainerOf(testing::TinySpec());
  ASSERT_NE(trainer, nullptr);
  ASSERT_TRUE(trainer->Step().ok());
  const std::string checkpoint = testing::TempPath("export_test.ckpt");
  const std::string dir = testing::TempPath("export_test.dir");
  ASSERT_TRUE(trainer->SaveCheckpoint(checkpoint).ok());
  ASSERT_TRUE(ExportCheckpoints({checkpoint}, dir, {}).ok());
  std::ifstream config_file(std::filesystem::path(dir) / kExportConfigFile);
  std::stringstream config;
  config << config_file.rdbuf();
  EXPECT_NE(config.str().find("\"metrics\": {\"step\": 1}"), std::string::npos)
      << config.str();
  FloatArena back(trainer->params().shared_layout());
  ASSERT_TRUE(ImportModel(dir, trainer->config(), &back).ok());
  EXPECT_EQ(std::memcmp(back.data(), trainer->params().data(),
                        back.size() * sizeof(float)),
            0);
  std::remove(checkpoint.c_str());
  std::filesystem::remove_all(dir);
  EXPECT_EQ(ImportModel(dir, trainer->config(), &back).code(),
            absl::StatusCode::kNotFound);
}

// Several checkpoints (a GASLoC job's members) export as the mean of their
// parameters; a checkpoint of another model config is refused.
TEST(ExportTest, SeveralCheckpointsExportTheirMean) {
  auto a = testing::MakeTrainerOf(testing::TinySpec());
  v1::JobSpec other_seed = testing::TinySpec();
  other_seed.mutable_training()->set_seed(8);
  auto b = testing::MakeTrainerOf(other_seed);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->Step().ok());
  const std::string pa = testing::TempPath("export_mean_a.ckpt");
  const std::string pb = testing::TempPath("export_mean_b.ckpt");
  const std::string dir = testing::TempPath("export_mean.dir");
  ASSERT_TRUE(a->SaveCheckpoint(pa).ok());
  ASSERT_TRUE(b->SaveCheckpoint(pb).ok());
  ASSERT_TRUE(ExportCheckpoints({pa, pb}, dir, {}).ok());
  FloatArena mean(a->params().shared_layout());
  ASSERT_TRUE(ImportModel(dir, a->config(), &mean).ok());
  for (size_t i = 0; i < mean.size(); ++i) {
    ASSERT_EQ(mean.data()[i],
              (a->params().data()[i] + b->params().data()[i]) * 0.5f)
        << i;
  }
  v1::JobSpec wider = testing::TinySpec();
  wider.mutable_model()->set_d_model(64);
  auto c = testing::MakeTrainerOf(wider);
  ASSERT_NE(c, nullptr);
  const std::string pc = testing::TempPath("export_mean_c.ckpt");
  ASSERT_TRUE(c->SaveCheckpoint(pc).ok());
  EXPECT_EQ(ExportCheckpoints({pa, pc}, dir, {}).code(),
            absl::StatusCode::kFailedPrecondition);
  for (const std::string& p : {pa, pb, pc}) std::remove(p.c_str());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gasloc
