// The whole model: tensor table and init, the fp32 and bf16 oneDNN passes
// against the double-precision reference model, the reference model's
// gradients against central finite differences, parity with the
// independent PyTorch implementation (torch_reference.py), and argument
// checking.
#include "worker/model/model.h"

#include <omp.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "gtest/gtest.h"
#include "worker/model/reference_model.h"
#include "worker/model/transformer.h"

namespace gasloc {
namespace {

std::vector<uint8_t> RandomTokens(int batch, int length, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> tokens(static_cast<size_t>(batch) * (length + 1));
  for (auto& t : tokens) t = static_cast<uint8_t>(gen() % 256);
  return tokens;
}

// Parameters with a spread large enough that every gradient is well away
// from zero (the N(0, 0.02) init makes most of them tiny).
FloatArena RandomParams(const ModelConfig& config, uint32_t seed) {
  FloatArena params(MakeModelLayout(config));
  InitParameters(config, seed, &params);
  std::mt19937 gen(seed);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  for (size_t i = 0; i < params.layout().entries().size(); ++i) {
    for (float& x : params.view(i)) x += noise(gen);
  }
  return params;
}

std::vector<double> ToDouble(const FloatArena& arena) {
  return std::vector<double>(arena.data(), arena.data() + arena.size());
}

// Per tensor: max |got - want| / max |want| (printed with the name on
// failure).
void ExpectGradsNear(const FloatArena& got, const std::vector<double>& want,
                     double tol) {
  const auto& entries = got.layout().entries();
  for (size_t i = 0; i < entries.size(); ++i) {
    double max_err = 0, max_ref = 1e-30;
    for (size_t j = 0; j < entries[i].size; ++j) {
      const double w = want[entries[i].offset + j];
      max_err = std::max(max_err, std::fabs(got.view(i)[j] - w));
      max_ref = std::max(max_ref, std::fabs(w));
    }
    EXPECT_LE(max_err / max_ref, tol) << entries[i].spec.name;
  }
}

TEST(ModelLayoutTest, ParameterCountMatchesJobSpecFormula) {
  for (auto [L, d, H, T] : std::vector<std::array<int, 4>>{
           {4, 256, 4, 256}, {6, 384, 6, 256}, {24, 256, 8, 256},
           {1, 8, 2, 3}, {3, 48, 3, 100}}) {
    v1::ModelSpec spec;
    spec.set_layers(L);
    spec.set_d_model(d);
    spec.set_heads(H);
    spec.set_context(T);
    const ModelConfig config = ModelConfigFromSpec(spec);
    EXPECT_EQ(MakeModelLayout(config)->parameter_count(),
              ModelParameterCount(spec))
        << L << " " << d << " " << H << " " << T;
  }
}

TEST(ModelLayoutTest, WeightDecayExactlyOnMatrices) {
  const ModelConfig config{
      .layers = 2, .d_model = 16, .heads = 2, .context = 8};
  const auto layout = MakeModelLayout(config);
  int decayed = 0;
  for (const auto& e : layout->entries()) {
    EXPECT_EQ(e.spec.weight_decay, e.spec.shape.size() == 2) << e.spec.name;
    decayed += e.spec.weight_decay;
  }
  EXPECT_EQ(decayed, 2 + 4 * config.layers + 1);
  const ModelTensorIndex ix = TensorIndex(config);
  EXPECT_EQ(layout->entries()[ix.blocks[1].fc2_w].spec.name,
            "blocks.1.mlp.fc2.weight");
  EXPECT_EQ(layout->entries()[ix.head_w].spec.name, "head.weight");
  EXPECT_EQ(ix.head_w + 1, static_cast<int>(layout->entries().size()));
}

TEST(ModelLayoutTest, InitFollowsTheSpecAndIsDeterministic) {
  const ModelConfig config{
      .layers = 3, .d_model = 64, .heads = 4, .context = 32};
  const auto layout = MakeModelLayout(config);
  FloatArena a(layout), b(layout), c(layout);
  InitParameters(config, 7, &a);
  InitParameters(config, 7, &b);
  InitParameters(config, 8, &c);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
  EXPECT_NE(0, std::memcmp(a.data(), c.data(), a.size() * sizeof(float)));
  const ModelTensorIndex ix = TensorIndex(config);
  auto stddev = [&](int entry) {
    double s = 0, s2 = 0;
    for (float x : a.view(entry)) { s += x; s2 += double{x} * x; }
    const double n = a.view(entry).size();
    return std::sqrt(s2 / n - (s / n) * (s / n));
  };
  EXPECT_NEAR(stddev(ix.blocks[0].fc_w), 0.02, 0.001);
  EXPECT_NEAR(stddev(ix.tok_emb), 0.02, 0.001);
  EXPECT_NEAR(stddev(ix.blocks[2].proj_w), 0.02 / std::sqrt(6.0), 0.0005);
  EXPECT_NEAR(stddev(ix.blocks[1].fc2_w), 0.02 / std::sqrt(6.0), 0.0005);
  for (float x : a.view(ix.blocks[1].ln2_w)) EXPECT_EQ(x, 1.0f);
  for (float x : a.view(ix.blocks[1].qkv_b)) EXPECT_EQ(x, 0.0f);
  for (float x : a.view(ix.lnf_b)) EXPECT_EQ(x, 0.0f);
}

// The reference model against central differences, every parameter, in
// double: truncation error O(h^2) ~ 1e-10 and rounding ~1e-16/h ~ 1e-11, so
// a 1e-6 relative bound has a wide margin and still catches any real bug.
TEST(ReferenceModelTest, GradientsMatchCentralFiniteDifferences) {
  const ModelConfig config{
      .layers = 2, .d_model = 8, .heads = 2, .context = 6};
  const int B = 2, T = 5;
  const FloatArena params = RandomParams(config, 1);
  const std::vector<uint8_t> tokens = RandomTokens(B, T, 2);
  std::vector<double> p = ToDouble(params), grads;
  ref::ModelForwardBackward(config, p, tokens.data(), B, T, &grads);
  const double h = 1e-5;
  double max_err = 0, max_grad = 0;
  for (const auto& e : params.layout().entries()) {
    for (size_t j = 0; j < e.size; ++j) {
      const size_t k = e.offset + j;
      const double saved = p[k];
      p[k] = saved + h;
      const double up = ref::ModelForwardBackward(config, p, tokens.data(), B, T, nullptr);
      p[k] = saved - h;
      const double down = ref::ModelForwardBackward(config, p, tokens.data(), B, T, nullptr);
      p[k] = saved;
      const double fd = (up - down) / (2 * h);
      max_err = std::max(max_err, std::fabs(fd - grads[k]));
      max_grad = std::max(max_grad, std::fabs(grads[k]));
    }
  }
  EXPECT_GT(max_grad, 1e-2);
  EXPECT_LT(max_err / max_grad, 1e-6) << max_err << " / " << max_grad;
}

struct PrecisionCase {
  v1::Precision precision;
  double loss_tol;  // relative
  double grad_tol;  // per tensor, max error / max magnitude
};

void PrintTo(const PrecisionCase& c, std::ostream* os) {
  *os << (c.precision == v1::PRECISION_BF16 ? "bf16" : "fp32");
}

class ModelVsReferenceTest : public ::testing::TestWithParam<PrecisionCase> {};

// fp32: summation order only, 1e-4 per tensor. bf16: matmul inputs are
// rounded to 8 significant bits (0.4%) at every layer, and gradients of
// small tensors (biases, LayerNorm) sum many such products: 5% per tensor,
// 1% on the loss.
TEST_P(ModelVsReferenceTest, LossAndGradientsMatchReferenceModel) {
  const PrecisionCase pc = GetParam();
  const ModelConfig config{
      .layers = 2, .d_model = 32, .heads = 4, .context = 24};
  const int B = 3, T = 19;  // T < context: a plan smaller than the table
  ModelOptions options;
  options.precision = pc.precision;
  options.threads = 2;
  options.max_batch = 4;
  auto model = Model::Create(config, options);
  ASSERT_TRUE(model.ok()) << model.status();
  FloatArena params(MakeModelLayout(config));
  InitParameters(config, 3, &params);
  // Larger-than-init weights so that attention is far from uniform.
  std::mt19937 gen(4);
  std::normal_distribution<float> noise(0.0f, 0.1f);
  for (size_t i = 0; i < params.layout().entries().size(); ++i) {
    for (float& x : params.view(i)) x += noise(gen);
  }
  const std::vector<uint8_t> tokens = RandomTokens(B, T, 5);
  FloatArena grads(MakeModelLayout(config));
  auto loss = (*model)->ForwardBackward(params, tokens.data(), B, T, &grads);
  ASSERT_TRUE(loss.ok()) << loss.status();
  std::vector<double> want;
  const double want_loss =
      ref::ModelForwardBackward(config, ToDouble(params), tokens.data(), B, T, &want);
  EXPECT_NEAR(*loss, want_loss, pc.loss_tol * want_loss);
  ExpectGradsNear(grads, want, pc.grad_tol);
  // Twice gives the same (the workspace leaves no state behind).
  FloatArena again(MakeModelLayout(config));
  auto loss2 = (*model)->ForwardBackward(params, tokens.data(), B, T, &again);
  ASSERT_TRUE(loss2.ok());
  EXPECT_EQ(*loss, *loss2);
  EXPECT_EQ(0, std::memcmp(grads.data(), again.data(), grads.size() * 4));
  // Forward alone gives the same loss.
  auto eval = (*model)->Forward(params, tokens.data(), B, T);
  ASSERT_TRUE(eval.ok());
  EXPECT_FLOAT_EQ(*eval, *loss);
}

INSTANTIATE_TEST_SUITE_P(
    Precisions, ModelVsReferenceTest,
    ::testing::Values(PrecisionCase{.precision = v1::PRECISION_FP32,
                                    .loss_tol = 1e-5, .grad_tol = 1e-4},
                      PrecisionCase{.precision = v1::PRECISION_BF16,
                                    .loss_tol = 1e-2, .grad_tol = 5e-2}),
    [](const auto& info) {
      return info.param.precision == v1::PRECISION_BF16 ? "bf16" : "fp32";
    });

TEST(ModelTest, NextByteLogitsAgreeWithTheLoss) {
  const ModelConfig config{
      .layers = 2, .d_model = 16, .heads = 2, .context = 8};
  ModelOptions options;
  options.max_batch = 1;
  auto model = Model::Create(config, options);
  ASSERT_TRUE(model.ok());
  const FloatArena params = RandomParams(config, 6);
  const int T = 6;
  const std::vector<uint8_t> tokens = RandomTokens(1, T, 7);
  auto loss = (*model)->Forward(params, tokens.data(), 1, T);
  ASSERT_TRUE(loss.ok());
  double total = 0;
  for (int n = 1; n <= T; ++n) {
    float logits[kVocabSize];
    ASSERT_TRUE((*model)->NextByteLogits(params, tokens.data(), n, logits).ok());
    double mx = logits[0], sum = 0;
    for (float v : logits) mx = std::max<double>(mx, v);
    for (float v : logits) sum += std::exp(v - mx);
    total += mx + std::log(sum) - logits[tokens[n]];
  }
  EXPECT_NEAR(total / T, *loss, 1e-5);
}

// The profile (gasloc-bench train --profile) files each operation under the
// pass it ran in: a forward-only call leaves the backward half empty, and a
// training step fills both, with GELU and the cross-entropy forward only
// (their derivatives are taken in the forward) and the embedding in both.
TEST(ModelTest, ProfileSplitsOperationsByPass) {
  const ModelConfig config{
      .layers = 1, .d_model = 16, .heads = 2, .context = 8};
  const FloatArena params = RandomParams(config, 10);
  const std::vector<uint8_t> tokens = RandomTokens(2, 8, 11);
  FloatArena grads(MakeModelLayout(config));
  for (const v1::Precision precision :
       {v1::PRECISION_FP32, v1::PRECISION_BF16}) {
    SCOPED_TRACE(v1::Precision_Name(precision));
    ModelOptions options;
    options.max_batch = 2;
    options.precision = precision;
    auto model = TransformerModel::Create(config, options);
    ASSERT_TRUE(model.ok()) << model.status();
    TransformerModel& m = **model;
    ASSERT_TRUE(m.Forward(params, tokens.data(), 2, 8).ok());
    EXPECT_EQ(m.profile().total(), 0.0) << "profiling is off by default";
    m.EnableProfile(true);
    ASSERT_TRUE(m.Forward(params, tokens.data(), 2, 8).ok());
    using M = TransformerModel;
    for (int op : {M::kOpEmbed, M::kOpLayerNorm, M::kOpQkv, M::kOpAttention,
                   M::kOpProj, M::kOpFc, M::kOpFc2, M::kOpHead,
                   M::kOpCrossEntropy}) {
      EXPECT_GT(m.profile().forward[op], 0.0) << M::OpName(op);
    }
    for (int op = 0; op < M::kOpCount; ++op) {
      EXPECT_EQ(m.profile().backward[op], 0.0) << M::OpName(op);
    }
    m.ResetProfile();
    ASSERT_TRUE(m.ForwardBackward(params, tokens.data(), 2, 8, &grads).ok());
    for (int op : {M::kOpEmbed, M::kOpLayerNorm, M::kOpQkv, M::kOpAttention,
                   M::kOpProj, M::kOpFc, M::kOpFc2, M::kOpHead}) {
      EXPECT_GT(m.profile().forward[op], 0.0) << M::OpName(op);
      EXPECT_GT(m.profile().backward[op], 0.0) << M::OpName(op);
    }
    EXPECT_EQ(m.profile().backward[M::kOpCrossEntropy], 0.0);
    EXPECT_GT(m.profile().forward[M::kOpGelu], 0.0);
    // bf16 applies GELU's derivative inside fc2's backward matmul; fp32
    // runs oneDNN's GELU backward.
    EXPECT_EQ(m.profile().backward[M::kOpGelu] > 0.0,
              precision == v1::PRECISION_FP32);
    m.EnableProfile(false);
    const double total = m.profile().total();
    ASSERT_TRUE(m.ForwardBackward(params, tokens.data(), 2, 8, &grads).ok());
    EXPECT_EQ(m.profile().total(), total) << "disabled profile still counted";
  }
}

TEST(ModelTest, ThreadsOptionIsAppliedInTheCallPath) {
  const ModelConfig config{
      .layers = 1, .d_model = 16, .heads = 2, .context = 8};
  const FloatArena params = RandomParams(config, 8);
  const std::vector<uint8_t> tokens = RandomTokens(2, 8, 9);
  FloatArena grads(MakeModelLayout(config));
  for (int threads : {1, 2}) {
    ModelOptions options;
    options.threads = threads;
    options.max_batch = 2;
    auto model = Model::Create(config, options);
    ASSERT_TRUE(model.ok());
    omp_set_num_threads(5);
    ASSERT_TRUE((*model)->ForwardBackward(params, tokens.data(), 2, 8, &grads).ok());
    EXPECT_EQ(omp_get_max_threads(), threads);
  }
}

TEST(ModelTest, RejectsBadConfigsAndArguments) {
  ModelOptions options;
  EXPECT_EQ(Model::Create({0, 16, 2, 8}, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto bad_heads = Model::Create({1, 16, 3, 8}, options);
  EXPECT_EQ(bad_heads.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_heads.status().message().find("heads"), std::string::npos);
  options.max_batch = 0;
  EXPECT_EQ(Model::Create({1, 16, 2, 8}, options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.max_batch = 2;
  const ModelConfig config{
      .layers = 1, .d_model = 16, .heads = 2, .context = 8};
  auto model = Model::Create(config, options);
  ASSERT_TRUE(model.ok());
  FloatArena params(MakeModelLayout(config)), grads(MakeModelLayout(config));
  const std::vector<uint8_t> tokens = RandomTokens(3, 9, 1);
  auto too_big = (*model)->ForwardBackward(params, tokens.data(), 3, 8, &grads);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_big.status().message().find("batch"), std::string::npos);
  auto too_long = (*model)->Forward(params, tokens.data(), 1, 9);
  EXPECT_NE(too_long.status().message().find("length"), std::string::npos);
  FloatArena other(MakeModelLayout({2, 16, 2, 8}));
  auto wrong = (*model)->ForwardBackward(params, tokens.data(), 1, 8, &other);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("grads"), std::string::npos);
}

// Parity with the independent PyTorch model in fp32: same config, weights
// and tokens -> the same loss and gradients to 1e-4 relative (per tensor,
// max error over max magnitude).
TEST(TorchParityTest, LossAndGradientsMatchPyTorch) {
  const ModelConfig config{
      .layers = 2, .d_model = 32, .heads = 4, .context = 16};
  const int B = 3, T = 12;
  const FloatArena params = RandomParams(config, 11);
  const std::vector<uint8_t> tokens = RandomTokens(B, T, 12);
  ModelOptions options;
  options.max_batch = B;
  auto model = Model::Create(config, options);
  ASSERT_TRUE(model.ok());
  FloatArena grads(MakeModelLayout(config));
  auto loss = (*model)->ForwardBackward(params, tokens.data(), B, T, &grads);
  ASSERT_TRUE(loss.ok());

  char dir_template[] = "/tmp/gasloc_torch_parity_XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  const std::string in = dir + "/in.bin", out = dir + "/out.bin";
  {
    std::ofstream f(in, std::ios::binary);
    const int32_t header[6] = {config.layers, config.d_model, config.heads,
                               config.context, B, T};
    f.write(reinterpret_cast<const char*>(header), sizeof(header));
    f.write(reinterpret_cast<const char*>(params.data()), params.size() * 4);
    f.write(reinterpret_cast<const char*>(tokens.data()), tokens.size());
  }
  const std::string cmd =
      absl::StrCat("OMP_NUM_THREADS=1 /usr/bin/python3 ", GASLOC_SOURCE_DIR,
                   "/tests/worker/model/torch_reference.py ", in, " ", out);
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream f(out, std::ios::binary);
  double torch_loss = 0;
  f.read(reinterpret_cast<char*>(&torch_loss), 8);
  std::vector<float> torch_grads(grads.size());
  f.read(reinterpret_cast<char*>(torch_grads.data()), grads.size() * 4);
  ASSERT_TRUE(f.good()) << "short output from torch_reference.py";
  std::remove(in.c_str());
  std::remove(out.c_str());
  rmdir(dir.c_str());
  EXPECT_NEAR(*loss, torch_loss, 1e-4 * torch_loss);
  ExpectGradsNear(grads, std::vector<double>(torch_grads.begin(), torch_grads.end()), 1e-4);
}

}  // namespace
}  // namespace gasloc
