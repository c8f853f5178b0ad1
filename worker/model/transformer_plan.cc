#include "worker/model/transformer_plan.h"

#include <omp.h>

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace gasloc {

using kernels::dt;

namespace {
constexpr float kLayerNormEps = 1e-5f;
size_t Aligned(size_t bytes) { return (bytes + 63) / 64 * 64; }
}  // namespace

std::vector<LinearShape> TransformerLinearShapes(const ModelConfig& config,
                                                 int M, dt cdt) {
  const int C = config.d_model;
  struct Settings {
    int K, N;
    dt y_type, dx_type;
    bool residual, bias, bwd_data_mul;
  };
  auto shape = [&](const char* name, const Settings& s) {
    kernels::Linear::Options o;
    o.M = M;
    o.K = s.K;
    o.N = s.N;
    o.cdt = cdt;
    o.y_type = s.y_type;
    o.dx_type = s.dx_type;
    o.residual = s.residual;
    o.bias = s.bias;
    o.bwd_data_mul = s.bwd_data_mul;
    o.blocked_weights = true;
    return LinearShape{.name = name, .options = o};
  };
  const bool fused_gelu = cdt == dt::bf16;
  return {
      shape("qkv", {.K = C, .N = 3 * C, .y_type = cdt, .dx_type = dt::f32,
                    .residual = false, .bias = true, .bwd_data_mul = false}),
      shape("proj", {.K = C, .N = C, .y_type = dt::f32, .dx_type = cdt,
                     .residual = true, .bias = true, .bwd_data_mul = false}),
      shape("fc", {.K = C, .N = 4 * C, .y_type = cdt, .dx_type = dt::f32,
                   .residual = false, .bias = true, .bwd_data_mul = false}),
      shape("fc2", {.K = 4 * C, .N = C, .y_type = dt::f32, .dx_type = cdt,
                    .residual = true, .bias = true,
                    .bwd_data_mul = fused_gelu}),
      shape("head", {.K = C, .N = kVocabSize, .y_type = dt::f32,
                     .dx_type = dt::f32, .residual = false, .bias = false,
                     .bwd_data_mul = false})};
}

absl::StatusOr<std::unique_ptr<TransformerPlan>> TransformerPlan::Build(
    kernels::DnnlEnv* env, const ModelConfig& config, dt cdt, int first_block,
    int end_block, int batch, int length) {
  auto plan = std::make_unique<TransformerPlan>();
  plan->B = batch;
  plan->T = length;
  plan->first_block = first_block;
  plan->end_block = end_block;
  const int M = batch * length, C = config.d_model;
  try {
    const std::vector<LinearShape> shapes =
        TransformerLinearShapes(config, M, cdt);
    auto linear = [&](int kind) {
      return std::make_unique<kernels::Linear>(env, shapes[kind].options);
    };
    plan->qkv = linear(kQkv);
    plan->proj = linear(kProj);
    plan->fc = linear(kFc);
    plan->fc2 = linear(kFc2);
    plan->head = linear(kHead);
    plan->ln = std::make_unique<kernels::LayerNorm>(M, C, kLayerNormEps, cdt);
    if (cdt == dt::f32) {  // bf16 fuses GELU into its own loop and fc2
      plan->gelu = std::make_unique<kernels::Gelu>(env, int64_t{M} * 4 * C);
    }
    plan->attn = std::make_unique<kernels::CausalAttention>(
        env, length, C, config.heads, cdt);
    plan->heads = std::make_unique<kernels::HeadLayout>(batch, length, C,
                                                        config.heads, cdt);
    if (cdt == dt::bf16) {
      plan->dx_to_bf16 = std::make_unique<kernels::Convert>(
          env, int64_t{M} * C, dt::f32, cdt);
      plan->dlogits_to_bf16 = std::make_unique<kernels::Convert>(
          env, int64_t{M} * kVocabSize, dt::f32, cdt);
    }
  } catch (const dnnl::error& e) {
    return kernels::OneDnnStatus(
        absl::StrCat("oneDNN could not build the primitives for batch ", batch,
                     ", length ", length, ", d_model ", C),
        cdt, e);
  }
  // Blocked weight copies: one allocation for all blocks and the head.
  const int blocks = end_block - first_block;
  size_t total = 0;
  for (int kind = kQkv; kind <= kFc2; ++kind) {
    total += blocks * (Aligned(plan->linear(kind)->fwd_weights_bytes()) +
                       Aligned(plan->linear(kind)->bwd_weights_bytes()));
  }
  total += Aligned(plan->head->fwd_weights_bytes()) +
           Aligned(plan->head->bwd_weights_bytes());
  plan->weight_buffer.reset(static_cast<char*>(std::aligned_alloc(64, total)));
  if (plan->weight_buffer == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("blocked weights of ", total, " bytes"));
  }
  plan->weight_bytes = total;
  char* next = plan->weight_buffer.get();
  auto take = [&](size_t bytes) {
    char* p = next;
    next += Aligned(bytes);
    return p;
  };
  plan->block_weights.resize(config.layers);
  for (int l = first_block; l < end_block; ++l) {
    for (int kind = kQkv; kind <= kFc2; ++kind) {
      Weights& w = plan->block_weights[l][kind];
      w.fwd = take(plan->linear(kind)->fwd_weights_bytes());
      w.bwd = take(plan->linear(kind)->bwd_weights_bytes());
    }
  }
  plan->head_weights.fwd = take(plan->head->fwd_weights_bytes());
  plan->head_weights.bwd = take(plan->head->bwd_weights_bytes());
  return plan;
}

kernels::Linear* TransformerPlan::linear(int kind) const {
  switch (kind) {
    case kQkv: return qkv.get();
    case kProj: return proj.get();
    case kFc: return fc.get();
    case kFc2: return fc2.get();
    default: return head.get();
  }
}

absl::Status TransformerPlan::WriteWeights(
    const FloatArena& params, const ModelTensorIndex& index,
    kernels::DnnlEnv* env, std::vector<dnnl::stream>* thread_streams) {
  auto param = [&](int entry) {
    return params.data() + params.layout().entries()[entry].offset;
  };
  // One job per matrix: four per block, then the head.
  const int jobs = 4 * (end_block - first_block) + 1;
  const int nthreads = std::min(jobs, omp_get_max_threads());
  while (static_cast<int>(thread_streams->size()) < nthreads) {
    thread_streams->emplace_back(env->engine);
  }
  std::string error;
  const char* cdt_name = qkv->options().cdt == dt::bf16 ? "bf16" : "fp32";
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1)
  for (int job = 0; job < jobs; ++job) {
    try {
      dnnl::stream* stream = &(*thread_streams)[omp_get_thread_num()];
      if (job == jobs - 1) {
        head->PrepareWeights(param(index.head_w), head_weights.fwd,
                             head_weights.bwd, stream);
        continue;
      }
      const int l = first_block + job / 4, kind = job % 4;
      const BlockTensorIndex& w = index.blocks[l];
      const int entries[4] = {w.qkv_w, w.proj_w, w.fc_w, w.fc2_w};
      linear(kind)->PrepareWeights(param(entries[kind]), weights(l, kind).fwd,
                                   weights(l, kind).bwd, stream);
    } catch (const dnnl::error& e) {
#pragma omp critical(gasloc_prepare_error)
      error = e.what();
    }
  }
  if (!error.empty()) {
    return absl::InternalError(absl::StrCat(
        "oneDNN weight reorder (", cdt_name, ", oneDNN isa ",
        kernels::OneDnnIsaName(), "): ", error));
  }
  return absl::OkStatus();
}

}  // namespace gasloc
