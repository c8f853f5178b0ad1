// The oneDNN implementation of Model (docs/model.md). Besides the Model
// interface it exposes the pass split by part, each with explicit input and
// output activation buffers, so a caller can run any contiguous block range
// [first, last) on a detached input and put a loss on any block's output
// (bounded-horizon local training, algorithms.md section 6):
//
//   Prepare(params, B, T)                       once per call (weights, plan)
//   EmbedForward -> BlockForward(0..L-1) -> DecoderForward
//   DecoderBackward -> BlockBackward(L-1..0) -> EmbedBackward
//
// Saved activations of block l live in this object's workspace (slot l), so
// a block's backward must follow its own forward, with the same (B, T) plan,
// before that block's forward runs again.
//
// The set-up lives apart from the pass: the primitives and blocked weights
// of one (B, T) in transformer_plan.h, the activation buffers (with their
// shapes) in transformer_workspace.h.
//
// Thread safety: one thread at a time (as Model); compute threads inside.
#ifndef GASLOC_WORKER_MODEL_TRANSFORMER_H_
#define GASLOC_WORKER_MODEL_TRANSFORMER_H_

#include <array>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/model/kernels.h"
#include "worker/model/model.h"
#include "worker/model/transformer_plan.h"
#include "worker/model/transformer_workspace.h"

namespace gasloc {

class TransformerModel final : public Model {
 public:
  static absl::StatusOr<std::unique_ptr<TransformerModel>> Create(
      const ModelConfig& config, const ModelOptions& options);

  absl::StatusOr<float> ForwardBackward(const FloatArena& params,
                                        const uint8_t* tokens, int batch,
                                        int length, FloatArena* grads) override;
  absl::StatusOr<float> Forward(const FloatArena& params,
                                const uint8_t* tokens, int batch,
                                int length) override;
  absl::Status NextByteLogits(const FloatArena& params, const uint8_t* prefix,
                              int length, float* logits) override;
  double TrainingFlops(int batch, int length) const override;

  // The linear layers' matmul settings for M = batch * length rows, in the
  // order qkv, proj, fc, fc2, head: what the model builds its kernels::Linear
  // objects from (benchmarks time the same matmuls in isolation).
  using LinearShape = gasloc::LinearShape;
  static std::vector<LinearShape> LinearShapes(const ModelConfig& config,
                                               int M, kernels::dt cdt) {
    return TransformerLinearShapes(config, M, cdt);
  }

  // ---- the pass by part (see the header comment), each part's backward
  // right after its forward. Activations are f32 row-major, (B, T, C) with
  // C = d_model; `grads` pointers are the base of an arena with this
  // model's layout (only the part's own tensors are written).

  // Checks arguments, selects (or builds) the plan for (B, T), sets the
  // thread count and writes the weights, once, in the compute type and the
  // blocked layouts the matmuls run with.
  absl::Status Prepare(const FloatArena& params, int batch, int length);

  // tokens[b * token_stride + t] (B, T) -> x_out (B, T, C): token plus
  // position embedding.
  void EmbedForward(const uint8_t* tokens, int token_stride, float* x_out);
  // dx (B, T, C) -> the tok_emb and pos_emb gradients in grads.
  void EmbedBackward(const uint8_t* tokens, int token_stride, const float* dx,
                     float* grads);

  // x_in (B, T, C) -> x_out (B, T, C); saves block `layer`'s activations.
  void BlockForward(int layer, const float* x_in, float* x_out);
  // dx_out (B, T, C) -> dx_in (B, T, C) and the block's gradients in grads;
  // dx_in may alias dx_out.
  void BlockBackward(int layer, const float* dx_out, float* dx_in,
                     float* grads);

  // Final LayerNorm + head + fused cross-entropy on x (B, T, C) against
  // targets[b * target_stride + t]. With want_grad, keeps d loss / d logits
  // (B, T, 256) for DecoderBackward. Returns the mean loss in nats.
  double DecoderForward(const float* x, const uint8_t* targets,
                        int target_stride, bool want_grad);
  // x (B, T, C) as given to DecoderForward; dx (B, T, C) overwritten;
  // writes the ln_f and head gradients into grads.
  void DecoderBackward(const float* x, float* dx, float* grads);
  // As above, with the decoder's gradients written to separate buffers
  // (ln_f weight and bias: C floats each; head: 256 x C), e.g. one readout
  // gradient per stage.
  struct DecoderGrads {
    float* lnf_w = nullptr;
    float* lnf_b = nullptr;
    float* head_w = nullptr;
  };
  void DecoderBackward(const float* x, float* dx, const DecoderGrads& out);

  // Buffers of the residual stream: x(l) (B, T, C) is block l's input, x(L)
  // the decoder's input; dx(0), dx(1) two (B, T, C) gradient buffers. A
  // model of blocks [first, end) (ModelOptions.first_block / num_blocks)
  // holds x(first) .. x(end) only, and the per-part calls take only its
  // blocks.
  float* x(int l) { return workspace_.x[l]; }
  float* dx(int i) { return workspace_.dx[i]; }

  // Optional per-operation timing (off by default; for benchmarks): seconds
  // spent in each kind of operation since the last ResetProfile(), split
  // by pass. The forward pass is Prepare (the weight conversion, counted as
  // kOpConvert) and the *Forward calls; the backward pass is the *Backward
  // calls (its kOpConvert: the gradients' bf16 copies).
  enum Op {
    kOpEmbed, kOpLayerNorm, kOpQkv, kOpAttention, kOpProj, kOpFc, kOpGelu,
    kOpFc2, kOpHead, kOpCrossEntropy, kOpConvert, kOpCount
  };
  static const char* OpName(int op);
  // True for the operation classes that are the linear layers' matmuls
  // (what bench/linear_floor.h times alone).
  static bool IsLinearOp(int op);
  struct OpProfile {
    std::array<double, kOpCount> forward{}, backward{};
    double total() const;
  };
  void EnableProfile(bool on) { profile_on_ = on; }
  void ResetProfile() { profile_ = OpProfile{}; }
  const OpProfile& profile() const { return profile_; }

  // What oneDNN picked for the main matmuls of the current plan (text).
  std::string KernelReport() const;
  // Bytes of workspace (activations, scratch, bf16 weights) this model owns.
  size_t workspace_bytes() const { return workspace_.bytes(); }
  // Bytes of the blocked weight copies of the current plan (0 before the
  // first Prepare).
  size_t plan_weight_bytes() const;
  // Compute threads of the next Prepare (0 = all cores); Prepare sets the
  // calling thread's OpenMP thread count from it.
  void set_threads(int threads) { options_.threads = threads; }
  // The block range this model keeps (ModelOptions.first_block, num_blocks).
  int first_block() const { return first_block_; }
  int end_block() const { return end_block_; }

 private:
  class OpTimer;
  TransformerModel(const ModelConfig& config,
                   std::shared_ptr<const ArenaLayout> layout,
                   const ModelOptions& options);
  bool bf16() const { return cdt_ == kernels::dt::bf16; }
  // bf16 computes GELU and its derivative in one pass (the derivative is
  // applied by fc2's backward-data matmul); fp32 keeps oneDNN's exact GELU
  // forward and backward.
  bool fused_gelu() const { return bf16(); }
  absl::StatusOr<TransformerPlan*> GetPlan(int batch, int length);
  absl::Status CheckArena(const FloatArena& arena, const char* what) const;
  absl::Status CheckWholeModel(const char* call) const;
  void SetThreads() const;
  const float* Param(int entry) const;            // f32 parameter
  float* Grad(float* grads, int entry) const;     // its gradient slot

  // The block's two halves, each backward right after its forward. The
  // backwards read what the forwards saved in workspace_.blocks[layer].
  // x_in -> LN1 -> attention -> proj (+ x_in) -> x_mid
  void AttentionForward(int layer, const float* x_in, float* x_mid);
  // dx_mid (its bf16 copy in workspace_.dx_bf16 in bf16 mode) -> dx_in
  // (and its bf16 copy); dx_in may alias the caller's dx_out.
  void AttentionBackward(int layer, const float* dx_mid, float* dx_in,
                         float* grads);
  // x_mid -> LN2 -> fc -> GELU -> fc2 (+ x_mid) -> x_out
  void MlpForward(int layer, const float* x_mid, float* x_out);
  // dx_out -> dx_mid (and its bf16 copy). dx_out_in_bf16: workspace_.dx_bf16
  // already holds dx_out in bf16 (written by the LayerNorm backward that
  // produced it), so no conversion is needed.
  void MlpBackward(int layer, const float* dx_out, bool dx_out_in_bf16,
                   float* dx_mid, float* grads);
  void BlockBackwardImpl(int layer, const float* dx_out, bool dx_out_in_bf16,
                         float* dx_in, float* grads);
  // LayerNorm of x (B, T, C) f32 with gain entry w and bias entry b,
  // written straight in the compute type; saves mean and variance (B, T).
  void LayerNormForward(const float* x, int w, int b, float* mean,
                        float* var, void* out);

  ModelOptions options_;
  int first_block_ = 0;
  int end_block_ = 0;
  ModelTensorIndex index_;
  kernels::dt cdt_;
  kernels::DnnlEnv env_;
  std::vector<dnnl::stream> thread_streams_;  // WriteWeights' reorders
  // Plans by (B, T); the plans use env_, so they are declared after it.
  std::map<std::pair<int, int>, std::unique_ptr<TransformerPlan>> plans_;
  TransformerPlan* plan_ = nullptr;  // the current call's
  const FloatArena* params_ = nullptr;
  TransformerWorkspace workspace_;
  bool profile_on_ = false;
  bool in_backward_ = false;  // which half of profile_ the timers add to
  OpProfile profile_;
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_MODEL_TRANSFORMER_H_
