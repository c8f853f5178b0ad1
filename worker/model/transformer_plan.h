// The set-up of TransformerModel's pass for one (batch, length) shape: the
// oneDNN primitives, built once and reused every step, and the blocked
// copies of the weights they run with, rewritten from the f32 arena once per
// step (docs/model.md, "Precision"). M = B * T rows, C = d_model,
// V = 256; "cdt" is the compute type.
//
// Thread safety: a plan is used by the one thread that runs its model;
// WriteWeights runs its own OpenMP threads inside.
#ifndef GASLOC_WORKER_MODEL_TRANSFORMER_PLAN_H_
#define GASLOC_WORKER_MODEL_TRANSFORMER_PLAN_H_

#include <array>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/arena.h"
#include "worker/model/attention.h"
#include "worker/model/kernels.h"
#include "worker/model/model.h"

namespace gasloc {

// One linear layer's matmul settings, named as in TransformerLinearShapes.
struct LinearShape {
  const char* name;
  kernels::Linear::Options options;
};
// The linear layers' matmul settings for M rows, in the order of
// TransformerPlan::LinearKind: qkv, proj, fc, fc2, head. In bf16, fc2's
// backward-data matmul multiplies by GELU'(h) (the fused GELU backward).
std::vector<LinearShape> TransformerLinearShapes(const ModelConfig& config,
                                                 int M, kernels::dt cdt);

struct TransformerPlan {
  enum LinearKind { kQkv = 0, kProj = 1, kFc = 2, kFc2 = 3, kHead = 4 };
  // A matrix in the layouts oneDNN chose (format_tag any).
  struct Weights {
    void* fwd = nullptr;  // for the forward matmul
    void* bwd = nullptr;  // for the backward-data matmul
  };

  // The primitives for blocks [first_block, end_block) of `config` at
  // (batch, length), and room for their blocked weights. INTERNAL when
  // oneDNN cannot build a primitive, RESOURCE_EXHAUSTED when the weight
  // buffer cannot be allocated.
  static absl::StatusOr<std::unique_ptr<TransformerPlan>> Build(
      kernels::DnnlEnv* env, const ModelConfig& config, kernels::dt cdt,
      int first_block, int end_block, int batch, int length);

  // Writes every matrix of the plan's blocks and the head from `params`
  // (the model's layout) into its blocked copies, all matrices in one
  // parallel loop, each reorder single-threaded on its thread's stream (one
  // fork/join per step instead of two per matrix). Adds streams to
  // `thread_streams` as the loop needs them. INTERNAL on a oneDNN error.
  absl::Status WriteWeights(const FloatArena& params,
                            const ModelTensorIndex& index,
                            kernels::DnnlEnv* env,
                            std::vector<dnnl::stream>* thread_streams);

  kernels::Linear* linear(int kind) const;
  // The blocked copy of block `layer`'s matrix `kind` (kQkv .. kFc2).
  const Weights& weights(int layer, int kind) const {
    return block_weights[layer][kind];
  }

  int B = 0, T = 0;
  int first_block = 0, end_block = 0;
  std::unique_ptr<kernels::Linear> qkv;   // (M, C) -> (M, 3C)
  std::unique_ptr<kernels::Linear> proj;  // (M, C) -> (M, C), + residual
  std::unique_ptr<kernels::Linear> fc;    // (M, C) -> (M, 4C)
  std::unique_ptr<kernels::Linear> fc2;   // (M, 4C) -> (M, C), + residual
  std::unique_ptr<kernels::Linear> head;  // (M, C) -> (M, V) f32, no bias
  std::unique_ptr<kernels::LayerNorm> ln;       // (M, C), every LayerNorm
  std::unique_ptr<kernels::Gelu> gelu;          // (M, 4C); fp32 mode only
  std::unique_ptr<kernels::CausalAttention> attn;
  std::unique_ptr<kernels::HeadLayout> heads;   // to and from head-major
  // bf16 mode only: f32 -> bf16 of a residual-stream gradient (M, C) and
  // of d logits (M, V).
  std::unique_ptr<kernels::Convert> dx_to_bf16;
  std::unique_ptr<kernels::Convert> dlogits_to_bf16;

  // Blocked weights: [layer][kQkv .. kFc2] (only the plan's blocks) and
  // the head, all in one allocation of weight_bytes.
  std::vector<std::array<Weights, 4>> block_weights;
  Weights head_weights;
  std::unique_ptr<char, decltype(&std::free)> weight_buffer{nullptr,
                                                            &std::free};
  size_t weight_bytes = 0;
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_MODEL_TRANSFORMER_PLAN_H_
