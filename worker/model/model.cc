// The tensor table, initialisation and config helpers of model.h. The
// compute lives in transformer.cc.
#include "worker/model/model.h"

#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/model/transformer.h"

namespace gasloc {

ModelConfig ModelConfigFromSpec(const v1::ModelSpec& spec) {
  ModelConfig config;
  if (spec.has_layers()) config.layers = static_cast<int>(spec.layers());
  if (spec.has_d_model()) config.d_model = static_cast<int>(spec.d_model());
  if (spec.has_heads()) config.heads = static_cast<int>(spec.heads());
  if (spec.has_context()) config.context = static_cast<int>(spec.context());
  return config;
}

absl::Status ValidateModelConfig(const ModelConfig& config) {
  if (config.layers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model layers must be >= 1, got ", config.layers));
  }
  if (config.d_model < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model d_model must be >= 1, got ", config.d_model));
  }
  if (config.heads < 1 || config.d_model % config.heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model heads must be >= 1 and divide d_model ",
                     config.d_model, ", got ", config.heads));
  }
  if (config.context < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("model context must be >= 1, got ", config.context));
  }
  return absl::OkStatus();
}

std::vector<TensorSpec> ModelTensors(const ModelConfig& config) {
  const int64_t d = config.d_model;
  std::vector<TensorSpec> t;
  t.push_back({"tok_emb.weight", {kVocabSize, d}, true});
  t.push_back({"pos_emb.weight", {config.context, d}, true});
  for (int l = 0; l < config.layers; ++l) {
    const std::string p = absl::StrCat("blocks.", l, ".");
    t.push_back({p + "ln1.weight", {d}, false});
    t.push_back({p + "ln1.bias", {d}, false});
    t.push_back({p + "attn.qkv.weight", {3 * d, d}, true});
    t.push_back({p + "attn.qkv.bias", {3 * d}, false});
    t.push_back({p + "attn.proj.weight", {d, d}, true});
    t.push_back({p + "attn.proj.bias", {d}, false});
    t.push_back({p + "ln2.weight", {d}, false});
    t.push_back({p + "ln2.bias", {d}, false});
    t.push_back({p + "mlp.fc.weight", {4 * d, d}, true});
    t.push_back({p + "mlp.fc.bias", {4 * d}, false});
    t.push_back({p + "mlp.fc2.weight", {d, 4 * d}, true});
    t.push_back({p + "mlp.fc2.bias", {d}, false});
  }
  t.push_back({"ln_f.weight", {d}, false});
  t.push_back({"ln_f.bias", {d}, false});
  t.push_back({"head.weight", {kVocabSize, d}, true});
  return t;
}

std::shared_ptr<const ArenaLayout> MakeModelLayout(const ModelConfig& config) {
  return std::make_shared<const ArenaLayout>(ModelTensors(config));
}

ModelTensorIndex TensorIndex(const ModelConfig& config) {
  ModelTensorIndex index;
  int next = 2;
  for (int l = 0; l < config.layers; ++l) {
    BlockTensorIndex b;
    b.ln1_w = next++;
    b.ln1_b = next++;
    b.qkv_w = next++;
    b.qkv_b = next++;
    b.proj_w = next++;
    b.proj_b = next++;
    b.ln2_w = next++;
    b.ln2_b = next++;
    b.fc_w = next++;
    b.fc_b = next++;
    b.fc2_w = next++;
    b.fc2_b = next++;
    index.blocks.push_back(b);
  }
  index.lnf_w = next++;
  index.lnf_b = next++;
  index.head_w = next++;
  return index;
}

namespace {

// splitmix64: a tiny, portable generator so a seed gives the same theta_0
// on every platform (std::normal_distribution is implementation-defined).
class InitRng {
 public:
  explicit InitRng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1).
  double Uniform() { return (static_cast<double>(Next() >> 11) + 0.5) / 9007199254740992.0; }
  // Standard normal (Box-Muller, one value per call).
  double Normal() {
    const double u1 = Uniform(), u2 = Uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  uint64_t state_;
};

}  // namespace

void InitParameters(const ModelConfig& config, uint64_t seed,
                    FloatArena* params) {
  params->SetZero();
  const ModelTensorIndex index = TensorIndex(config);
  const double residual_std = 0.02 / std::sqrt(2.0 * config.layers);
  const auto& entries = params->layout().entries();
  for (size_t i = 0; i < entries.size(); ++i) {
    // One stream per tensor: a tensor's values do not depend on the others.
    InitRng rng(seed * 0x100000001b3ull + i);
    std::span<float> v = params->view(i);
    const TensorSpec& spec = entries[i].spec;
    if (spec.shape.size() == 2) {
      double stddev = 0.02;
      for (const BlockTensorIndex& b : index.blocks) {
        if (static_cast<int>(i) == b.proj_w || static_cast<int>(i) == b.fc2_w) {
          stddev = residual_std;
        }
      }
      for (float& x : v) x = static_cast<float>(stddev * rng.Normal());
    } else if (spec.name.ends_with(".weight")) {  // LayerNorm gains
      for (float& x : v) x = 1.0f;
    }  // biases stay 0
  }
}

absl::StatusOr<std::unique_ptr<Model>> Model::Create(
    const ModelConfig& config, const ModelOptions& options) {
  ASSIGN_OR_RETURN(std::unique_ptr<TransformerModel> model,
                   TransformerModel::Create(config, options));
  return std::unique_ptr<Model>(std::move(model));
}

}  // namespace gasloc
