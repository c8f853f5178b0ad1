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
// Thread safety: one thread at a time (as Model); compute threads inside.
#ifndef GASLOC_WORKER_MODEL_TRANSFORMER_H_
#define GASLOC_WORKER_MODEL_TRANSFORMER_H_

#include <array>
#include <map>
#include <string>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/model/kernels.h"
#include "worker/model/model.h"

namespace gasloc {

class TransformerModel final : public Model {
 public:
  static absl::StatusOr<std::unique_ptr<TransformerModel>> Create(
      const ModelConfig& config, const ModelOptions& options);
  ~TransformerModel() override;

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
  struct LinearShape {
    const char* name;
    kernels::Linear::Options options;
  };
  static std::vector<LinearShape> LinearShapes(const ModelConfig& config,
                                               int M, kernels::dt cdt);

  // ---- the pass by part (see the header comment). All activations are
  // (B, T, d) f32 row-major; `grads` pointers are the base of an arena with
  // this model's layout (only the part's own tensors are written).

  // Checks arguments, selects (or builds) the primitives for (B, T), sets
  // the thread count and writes the weights, once, in the compute type and
  // the blocked layouts the matmuls run with.
  absl::Status Prepare(const FloatArena& params, int batch, int length);
  void EmbedForward(const uint8_t* tokens, int token_stride, float* x_out);
  void BlockForward(int layer, const float* x_in, float* x_out);
  // Final LayerNorm + head + fused cross-entropy on x (B, T, d) against
  // targets[b * target_stride + t]. With want_grad, keeps d loss / d logits
  // for DecoderBackward. Returns the mean loss in nats.
  double DecoderForward(const float* x, const uint8_t* targets,
                        int target_stride, bool want_grad);
  // dx (B, T, d) overwritten; writes ln_f and head gradients into grads.
  void DecoderBackward(const float* x, float* dx, float* grads);
  // As above, with the decoder's gradients written to separate buffers
  // (ln_f weight and bias: d floats each; head: 256 x d), e.g. one readout
  // gradient per stage.
  struct DecoderGrads {
    float* lnf_w = nullptr;
    float* lnf_b = nullptr;
    float* head_w = nullptr;
  };
  void DecoderBackward(const float* x, float* dx, const DecoderGrads& out);
  // dx_in may alias dx_out.
  void BlockBackward(int layer, const float* dx_out, float* dx_in,
                     float* grads);
  void EmbedBackward(const uint8_t* tokens, int token_stride, const float* dx,
                     float* grads);
  // Buffers of the residual stream: x(l) is block l's input, x(L) the
  // decoder's input; dx(0), dx(1) two (B, T, d) gradient buffers. A model
  // of blocks [first, end) (ModelOptions.first_block / num_blocks) holds
  // x(first) .. x(end) only, and the per-part calls take only its blocks.
  float* x(int l);
  float* dx(int i);

  // Optional per-operation timing (off by default; for benchmarks): seconds
  // spent in each kind of operation since the last ResetProfile().
  enum Op {
    kOpEmbed, kOpLayerNorm, kOpQkv, kOpAttention, kOpProj, kOpFc, kOpGelu,
    kOpFc2, kOpHead, kOpCrossEntropy, kOpConvert, kOpCount
  };
  static const char* OpName(int op);
  void EnableProfile(bool on) { profile_on_ = on; }
  void ResetProfile() { profile_.fill(0.0); }
  const std::array<double, kOpCount>& profile() const { return profile_; }

  // What oneDNN picked for the main matmuls of the current plan (text).
  std::string KernelReport() const;
  // Bytes of workspace (activations, scratch, bf16 weights) this model owns.
  size_t workspace_bytes() const { return workspace_bytes_; }
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
  struct Plan;
  class OpTimer;
  // h is the fc output, or GELU'(fc output) when fused_gelu().
  struct LayerActs {
    float* mean1; float* var1; float* mean2; float* var2;
    void* ln1; void* qkvh; void* att; float* x_mid; void* ln2; void* h;
    void* g;
    float* lse;  // (B, H, T) attention softmax log-sum-exp, for the backward
  };
  // bf16 computes GELU and its derivative in one pass (the derivative is
  // applied by fc2's backward-data matmul); fp32 keeps oneDNN's exact GELU
  // forward and backward.
  bool fused_gelu() const { return cdt_ == kernels::dt::bf16; }
  TransformerModel(const ModelConfig& config,
                   std::shared_ptr<const ArenaLayout> layout,
                   const ModelOptions& options);
  absl::Status AllocateWorkspace();
  absl::StatusOr<Plan*> GetPlan(int batch, int length);
  absl::Status CheckArena(const FloatArena& arena, const char* what) const;
  absl::Status CheckWholeModel(const char* call) const;
  void SetThreads() const;
  const float* P(int entry) const;         // f32 parameter
  float* G(float* grads, int entry) const; // gradient slot
  // dx_out_in_dres_c: dres_c_ already holds dx_out in the compute type
  // (written by the LayerNorm backward that produced dx_out).
  void BlockBackwardImpl(int layer, const float* dx_out, bool dx_out_in_dres_c,
                         float* dx_in, float* grads);
  // LayerNorm straight to the compute type.
  void LayerNormToCompute(const float* x, int w, int b, float* mean,
                          float* var, void* out);

  ModelOptions options_;
  int first_block_ = 0;
  int end_block_ = 0;
  ModelTensorIndex index_;
  kernels::dt cdt_;
  size_t csize_;
  kernels::DnnlEnv env_;
  std::vector<dnnl::stream> thread_streams_;  // Prepare's parallel reorders
  std::map<std::pair<int, int>, std::unique_ptr<Plan>> plans_;
  Plan* plan_ = nullptr;
  const FloatArena* params_ = nullptr;

  // Workspace: one allocation carved into the buffers below.
  char* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::vector<float*> x_;        // L + 1 residual-stream buffers
  std::vector<LayerActs> acts_;  // per block
  float* meanf_ = nullptr;
  float* varf_ = nullptr;
  void* lnf_ = nullptr;
  float* logits_ = nullptr;      // (M, 256) f32, then d loss / d logits
  void* dlogits_c_ = nullptr;    // bf16 copy of d logits
  float* dres_[2] = {nullptr, nullptr};
  float* dmid_ = nullptr;
  float* dln_ = nullptr;
  void* dres_c_ = nullptr;
  void* d4a_ = nullptr;
  void* d4b_ = nullptr;
  void* dqkv_ = nullptr;
  void* qkv_tmp_ = nullptr;    // (B, T, 3d) before the head permutation
  void* oh_ = nullptr;         // (B, H, T, hd) attention output
  void* doh_ = nullptr;        // (B, H, T, hd) its gradient
  void* dqkvh_ = nullptr;      // (B, 3, H, T, hd)
  void* datt_ = nullptr;
  bool profile_on_ = false;
  std::array<double, kOpCount> profile_{};
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_MODEL_TRANSFORMER_H_
