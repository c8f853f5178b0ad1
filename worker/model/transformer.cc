// TransformerModel: the pass. The plan (primitives, blocked weights) is
// built in transformer_plan.cc, the activation buffers are carved in
// transformer_workspace.cc; what is here reads like a training step:
// Prepare, then each part's forward and backward side by side, then the
// Model API calls that chain them.
#include "worker/model/transformer.h"

#include <omp.h>

#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gasloc {

using kernels::dt;

namespace {
// Each plan holds its primitives and a blocked copy of the weights (two per
// matrix), so keep few: training uses one shape, generation a handful.
constexpr int kMaxPlans = 4;
constexpr int kQkv = TransformerPlan::kQkv, kProj = TransformerPlan::kProj,
              kFc = TransformerPlan::kFc, kFc2 = TransformerPlan::kFc2;
}  // namespace

// Adds the scope's duration to profile_[op] when profiling is on.
class TransformerModel::OpTimer {
 public:
  OpTimer(TransformerModel* model, Op op) : model_(model), op_(op) {
    if (model_->profile_on_) start_ = std::chrono::steady_clock::now();
  }
  ~OpTimer() {
    if (model_->profile_on_) {
      TransformerModel::OpProfile& p = model_->profile_;
      (model_->in_backward_ ? p.backward : p.forward)[op_] +=
          std::chrono::duration<double>(
                                   std::chrono::steady_clock::now() - start_)
                                   .count();
    }
  }

 private:
  TransformerModel* model_;
  Op op_;
  std::chrono::steady_clock::time_point start_;
};

const char* TransformerModel::OpName(int op) {
  static const char* const kNames[kOpCount] = {
      "embed", "layernorm", "qkv", "attention", "proj", "fc", "gelu",
      "fc2", "head", "cross_entropy", "convert"};
  return op >= 0 && op < kOpCount ? kNames[op] : "?";
}

bool TransformerModel::IsLinearOp(int op) {
  return op == kOpQkv || op == kOpProj || op == kOpFc || op == kOpFc2 ||
         op == kOpHead;
}

double TransformerModel::OpProfile::total() const {
  double sum = 0;
  for (int op = 0; op < kOpCount; ++op) sum += forward[op] + backward[op];
  return sum;
}

TransformerModel::TransformerModel(const ModelConfig& config,
                                   std::shared_ptr<const ArenaLayout> layout,
                                   const ModelOptions& options)
    : Model(config, std::move(layout)),
      options_(options),
      first_block_(options.first_block),
      end_block_(options.num_blocks > 0
                     ? options.first_block + options.num_blocks
                     : config.layers),
      index_(TensorIndex(config)),
      cdt_(options.precision == v1::PRECISION_BF16 ? dt::bf16 : dt::f32) {}

absl::StatusOr<std::unique_ptr<TransformerModel>> TransformerModel::Create(
    const ModelConfig& config, const ModelOptions& options) {
  RETURN_IF_ERROR(ValidateModelConfig(config));
  if (options.max_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ModelOptions.max_batch must be >= 1, got ",
                     options.max_batch));
  }
  if (options.first_block < 0 || options.first_block >= config.layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ModelOptions.first_block must be in [0, ", config.layers, "), got ",
        options.first_block));
  }
  if (options.num_blocks < 0 ||
      options.num_blocks > config.layers - options.first_block) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ModelOptions.num_blocks must be in [0, ",
        config.layers - options.first_block, "] (0 = the rest), got ",
        options.num_blocks));
  }
  if (options.threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ModelOptions.threads must be >= 0, got ", options.threads));
  }
  if (options.precision != v1::PRECISION_UNSPECIFIED &&
      options.precision != v1::PRECISION_FP32 &&
      options.precision != v1::PRECISION_BF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ModelOptions.precision: unknown value ", options.precision));
  }
  std::unique_ptr<TransformerModel> model(
      new TransformerModel(config, MakeModelLayout(config), options));
  RETURN_IF_ERROR(model->workspace_.Allocate(
      config, options.max_batch, model->cdt_, model->first_block_,
      model->end_block_));
  return model;
}

absl::Status TransformerModel::CheckArena(const FloatArena& arena,
                                          const char* what) const {
  if (arena.layout().fingerprint() != layout_->fingerprint()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " arena has a different layout than the model (",
                     arena.layout().entries().size(), " tensors, ",
                     arena.layout().total_floats(), " floats; expected ",
                     layout_->entries().size(), ", ",
                     layout_->total_floats(), ")"));
  }
  return absl::OkStatus();
}

absl::Status TransformerModel::CheckWholeModel(const char* call) const {
  if (first_block_ != 0 || end_block_ != config_.layers) {
    return absl::FailedPreconditionError(absl::StrCat(
        call, ": this model keeps blocks [", first_block_, ", ", end_block_,
        ") only; use the pass by part"));
  }
  return absl::OkStatus();
}

size_t TransformerModel::plan_weight_bytes() const {
  return plan_ == nullptr ? 0 : plan_->weight_bytes;
}

void TransformerModel::SetThreads() const {
  omp_set_num_threads(options_.threads > 0 ? options_.threads
                                           : omp_get_num_procs());
}

// ---------------------------------------------------------------- set-up

absl::Status TransformerModel::Prepare(const FloatArena& params, int batch,
                                       int length) {
  RETURN_IF_ERROR(CheckArena(params, "params"));
  if (batch < 1 || batch > options_.max_batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch must be in [1, ", options_.max_batch, "], got ", batch));
  }
  if (length < 1 || length > config_.context) {
    return absl::InvalidArgumentError(absl::StrCat(
        "length must be in [1, ", config_.context, "], got ", length));
  }
  SetThreads();
  in_backward_ = false;
  ASSIGN_OR_RETURN(plan_, GetPlan(batch, length));
  params_ = &params;
  OpTimer timer(this, kOpConvert);
  return plan_->WriteWeights(params, index_, &env_, &thread_streams_);
}

absl::StatusOr<TransformerPlan*> TransformerModel::GetPlan(int batch,
                                                           int length) {
  auto it = plans_.find({batch, length});
  if (it != plans_.end()) return it->second.get();
  if (plans_.size() >= kMaxPlans) plans_.clear();
  absl::StatusOr<std::unique_ptr<TransformerPlan>> plan =
      TransformerPlan::Build(&env_, config_, cdt_, first_block_, end_block_,
                             batch, length);
  if (!plan.ok()) return plan.status();
  TransformerPlan* raw = plan->get();
  plans_[{batch, length}] = *std::move(plan);
  return raw;
}

const float* TransformerModel::Param(int entry) const {
  return params_->data() + layout_->entries()[entry].offset;
}

float* TransformerModel::Grad(float* grads, int entry) const {
  return grads + layout_->entries()[entry].offset;
}

void TransformerModel::LayerNormForward(const float* x, int w, int b,
                                        float* mean, float* var, void* out) {
  OpTimer timer(this, kOpLayerNorm);
  plan_->ln->Forward(x, Param(w), Param(b), out, mean, var);
}

// ---------------------------------------------------------------- embedding

void TransformerModel::EmbedForward(const uint8_t* tokens, int token_stride,
                                    float* x_out) {
  in_backward_ = false;
  OpTimer timer(this, kOpEmbed);
  kernels::EmbeddingForward(tokens, token_stride, Param(index_.tok_emb),
                            Param(index_.pos_emb), plan_->B, plan_->T,
                            config_.d_model, x_out);
}

void TransformerModel::EmbedBackward(const uint8_t* tokens, int token_stride,
                                     const float* dx, float* grads) {
  in_backward_ = true;
  OpTimer timer(this, kOpEmbed);
  kernels::EmbeddingBackward(tokens, token_stride, dx, plan_->B, plan_->T,
                             config_.d_model, kVocabSize, config_.context,
                             Grad(grads, index_.tok_emb),
                             Grad(grads, index_.pos_emb));
}

// ---------------------------------------------------------------- attention

void TransformerModel::AttentionForward(int layer, const float* x_in,
                                        float* x_mid) {
  const BlockTensorIndex& w = index_.blocks[layer];
  TransformerWorkspace& ws = workspace_;
  TransformerWorkspace::Block& a = ws.blocks[layer];
  TransformerPlan& p = *plan_;
  // x_in (B, T, C) -> ln1_out (B, T, C)
  LayerNormForward(x_in, w.ln1_w, w.ln1_b, a.ln1_mean, a.ln1_var, a.ln1_out);
  // -> qkv_out (B, T, 3C)
  {
    OpTimer timer(this, kOpQkv);
    p.qkv->Forward(a.ln1_out, p.weights(layer, kQkv).fwd, Param(w.qkv_b),
                   nullptr, ws.qkv_out);
  }
  // -> qkv_heads (B, 3, H, T, hd) -> attn_heads (B, H, T, hd)
  // -> attn_out (B, T, C)
  {
    OpTimer timer(this, kOpAttention);
    p.heads->qkv_to_heads.Run(ws.qkv_out, a.qkv_heads);
    p.attn->Forward(a.qkv_heads, p.B, ws.attn_heads, a.attn_lse);
    p.heads->out_from_heads.Run(ws.attn_heads, a.attn_out);
  }
  // x_mid = x_in + attn_out W_proj^T + b  (B, T, C)
  OpTimer timer(this, kOpProj);
  p.proj->Forward(a.attn_out, p.weights(layer, kProj).fwd, Param(w.proj_b),
                  x_in, x_mid);
}

void TransformerModel::AttentionBackward(int layer, const float* dx_mid,
                                         float* dx_in, float* grads) {
  const BlockTensorIndex& w = index_.blocks[layer];
  TransformerWorkspace& ws = workspace_;
  TransformerWorkspace::Block& a = ws.blocks[layer];
  TransformerPlan& p = *plan_;
  // d x_mid (B, T, C) -> d attn_out (B, T, C)
  const void* dy = bf16() ? ws.dx_bf16 : dx_mid;
  {
    OpTimer timer(this, kOpProj);
    p.proj->BackwardWeights(a.attn_out, dy, Grad(grads, w.proj_w),
                            Grad(grads, w.proj_b));
    p.proj->BackwardData(dy, p.weights(layer, kProj).bwd, ws.dattn_out);
  }
  // -> d attn_heads (B, H, T, hd) -> d qkv_heads (B, 3, H, T, hd)
  // -> d qkv (B, T, 3C)
  {
    OpTimer timer(this, kOpAttention);
    p.heads->dout_to_heads.Run(ws.dattn_out, ws.dattn_heads);
    p.attn->Backward(a.qkv_heads, a.attn_lse, ws.dattn_heads, p.B,
                     ws.dqkv_heads);
    p.heads->dqkv_from_heads.Run(ws.dqkv_heads, ws.dqkv);
  }
  // -> d ln1_out (B, T, C)
  {
    OpTimer timer(this, kOpQkv);
    p.qkv->BackwardWeights(a.ln1_out, ws.dqkv, Grad(grads, w.qkv_w),
                           Grad(grads, w.qkv_b));
    p.qkv->BackwardData(ws.dqkv, p.weights(layer, kQkv).bwd, ws.dln_out);
  }
  // d x_in = LN1 backward + d x_mid (residual) (B, T, C); in bf16 its copy
  // stays in dx_bf16 for the block below (ForwardBackward).
  OpTimer timer(this, kOpLayerNorm);
  p.ln->Backward(ws.x[layer], Param(w.ln1_w), a.ln1_mean, a.ln1_var,
                 ws.dln_out, dx_mid, dx_in, bf16() ? ws.dx_bf16 : nullptr,
                 Grad(grads, w.ln1_w), Grad(grads, w.ln1_b));
}

// ---------------------------------------------------------------- MLP

void TransformerModel::MlpForward(int layer, const float* x_mid,
                                  float* x_out) {
  const BlockTensorIndex& w = index_.blocks[layer];
  TransformerWorkspace::Block& a = workspace_.blocks[layer];
  TransformerPlan& p = *plan_;
  // x_mid (B, T, C) -> ln2_out (B, T, C)
  LayerNormForward(x_mid, w.ln2_w, w.ln2_b, a.ln2_mean, a.ln2_var, a.ln2_out);
  // -> h (B, T, 4C) -> gelu_out (B, T, 4C). Fused (bf16): h goes to scratch
  // and gelu_saved keeps GELU'(h) for the backward; otherwise it keeps h.
  void* const h = fused_gelu() ? workspace_.dgelu_out : a.gelu_saved;
  {
    OpTimer timer(this, kOpFc);
    p.fc->Forward(a.ln2_out, p.weights(layer, kFc).fwd, Param(w.fc_b),
                  nullptr, h);
  }
  {
    OpTimer timer(this, kOpGelu);
    if (fused_gelu()) {
      kernels::GeluWithDerivative(h, cdt_,
                                  int64_t{p.B} * p.T * 4 * config_.d_model,
                                  a.gelu_out, a.gelu_saved);
    } else {
      p.gelu->Forward(a.gelu_saved, a.gelu_out);
    }
  }
  // x_out = x_mid + gelu_out W_fc2^T + b  (B, T, C)
  OpTimer timer(this, kOpFc2);
  p.fc2->Forward(a.gelu_out, p.weights(layer, kFc2).fwd, Param(w.fc2_b),
                 x_mid, x_out);
}

void TransformerModel::MlpBackward(int layer, const float* dx_out,
                                   bool dx_out_in_bf16, float* dx_mid,
                                   float* grads) {
  const BlockTensorIndex& w = index_.blocks[layer];
  TransformerWorkspace& ws = workspace_;
  TransformerWorkspace::Block& a = ws.blocks[layer];
  TransformerPlan& p = *plan_;
  // d x_out (B, T, C), in the compute type
  const void* dy = dx_out;
  if (bf16() && dx_out_in_bf16) {
    dy = ws.dx_bf16;
  } else if (bf16()) {
    OpTimer timer(this, kOpConvert);
    p.dx_to_bf16->Run(dx_out, ws.dx_bf16);
    dy = ws.dx_bf16;
  }
  // -> d gelu_out (B, T, 4C) -> d h (B, T, 4C). Fused: d h =
  // (dy W_fc2) * GELU'(h) straight from the matmul.
  {
    OpTimer timer(this, kOpFc2);
    p.fc2->BackwardWeights(a.gelu_out, dy, Grad(grads, w.fc2_w),
                           Grad(grads, w.fc2_b));
    p.fc2->BackwardData(dy, p.weights(layer, kFc2).bwd,
                        fused_gelu() ? ws.dfc_out : ws.dgelu_out,
                        fused_gelu() ? a.gelu_saved : nullptr);
  }
  if (!fused_gelu()) {
    OpTimer timer(this, kOpGelu);
    p.gelu->Backward(a.gelu_saved, ws.dgelu_out, ws.dfc_out);
  }
  // -> d ln2_out (B, T, C)
  {
    OpTimer timer(this, kOpFc);
    p.fc->BackwardWeights(a.ln2_out, ws.dfc_out, Grad(grads, w.fc_w),
                          Grad(grads, w.fc_b));
    p.fc->BackwardData(ws.dfc_out, p.weights(layer, kFc).bwd, ws.dln_out);
  }
  // d x_mid = LN2 backward + d x_out (residual) (B, T, C), and its bf16 copy
  // in dx_bf16.
  OpTimer timer(this, kOpLayerNorm);
  p.ln->Backward(a.x_mid, Param(w.ln2_w), a.ln2_mean, a.ln2_var, ws.dln_out,
                 dx_out, dx_mid, bf16() ? ws.dx_bf16 : nullptr,
                 Grad(grads, w.ln2_w), Grad(grads, w.ln2_b));
}

// ---------------------------------------------------------------- block

void TransformerModel::BlockForward(int layer, const float* x_in,
                                    float* x_out) {
  in_backward_ = false;
  float* const x_mid = workspace_.blocks[layer].x_mid;
  AttentionForward(layer, x_in, x_mid);
  MlpForward(layer, x_mid, x_out);
}

void TransformerModel::BlockBackward(int layer, const float* dx_out,
                                     float* dx_in, float* grads) {
  BlockBackwardImpl(layer, dx_out, /*dx_out_in_bf16=*/false, dx_in, grads);
}

void TransformerModel::BlockBackwardImpl(int layer, const float* dx_out,
                                         bool dx_out_in_bf16, float* dx_in,
                                         float* grads) {
  in_backward_ = true;
  float* const dx_mid = workspace_.dx_mid;
  MlpBackward(layer, dx_out, dx_out_in_bf16, dx_mid, grads);
  AttentionBackward(layer, dx_mid, dx_in, grads);
}

// ---------------------------------------------------------------- decoder

double TransformerModel::DecoderForward(const float* x,
                                        const uint8_t* targets,
                                        int target_stride, bool want_grad) {
  in_backward_ = false;
  TransformerWorkspace& ws = workspace_;
  // x (B, T, C) -> lnf_out (B, T, C)
  LayerNormForward(x, index_.lnf_w, index_.lnf_b, ws.lnf_mean, ws.lnf_var,
                   ws.lnf_out);
  // -> logits (B, T, 256) f32
  {
    OpTimer timer(this, kOpHead);
    plan_->head->Forward(ws.lnf_out, plan_->head_weights.fwd, nullptr,
                         nullptr, ws.logits);
  }
  // -> loss; with want_grad, logits become d loss / d logits
  OpTimer timer(this, kOpCrossEntropy);
  return kernels::FusedCrossEntropy(ws.logits, targets, target_stride,
                                    plan_->B, plan_->T, kVocabSize,
                                    want_grad);
}

void TransformerModel::DecoderBackward(const float* x, float* dx,
                                       float* grads) {
  DecoderBackward(x, dx,
                  DecoderGrads{.lnf_w = Grad(grads, index_.lnf_w),
                               .lnf_b = Grad(grads, index_.lnf_b),
                               .head_w = Grad(grads, index_.head_w)});
}

void TransformerModel::DecoderBackward(const float* x, float* dx,
                                       const DecoderGrads& out) {
  in_backward_ = true;
  TransformerWorkspace& ws = workspace_;
  TransformerPlan& p = *plan_;
  // d logits (B, T, 256), in the compute type
  const void* dlogits = ws.logits;
  if (bf16()) {
    OpTimer timer(this, kOpConvert);
    p.dlogits_to_bf16->Run(ws.logits, ws.dlogits_bf16);
    dlogits = ws.dlogits_bf16;
  }
  // -> d lnf_out (B, T, C)
  {
    OpTimer timer(this, kOpHead);
    p.head->BackwardWeights(ws.lnf_out, dlogits, out.head_w, nullptr);
    p.head->BackwardData(dlogits, p.head_weights.bwd, ws.dln_out);
  }
  // -> dx (B, T, C). In bf16 also leaves dx's bf16 copy in dx_bf16 for the
  // last block's first matmuls (ForwardBackward passes that on).
  OpTimer timer(this, kOpLayerNorm);
  p.ln->Backward(x, Param(index_.lnf_w), ws.lnf_mean, ws.lnf_var, ws.dln_out,
                 nullptr, dx, bf16() ? ws.dx_bf16 : nullptr, out.lnf_w,
                 out.lnf_b);
}

// ---------------------------------------------------------------- Model API:
// the pass by part chained into a training step, an evaluation, a
// generation step.

absl::StatusOr<float> TransformerModel::ForwardBackward(
    const FloatArena& params, const uint8_t* tokens, int batch, int length,
    FloatArena* grads) {
  if (tokens == nullptr || grads == nullptr) {
    return absl::InvalidArgumentError("ForwardBackward: null tokens or grads");
  }
  RETURN_IF_ERROR(CheckWholeModel("ForwardBackward"));
  RETURN_IF_ERROR(CheckArena(*grads, "grads"));
  RETURN_IF_ERROR(Prepare(params, batch, length));
  const int stride = length + 1;
  const int L = config_.layers;
  float* const g = grads->data();
  std::vector<float*>& x = workspace_.x;
  float* const dx = workspace_.dx[0];  // the residual gradient, in place
  try {
    EmbedForward(tokens, stride, x[0]);
    for (int l = 0; l < L; ++l) BlockForward(l, x[l], x[l + 1]);
    const double loss = DecoderForward(x[L], tokens + 1, stride, true);
    DecoderBackward(x[L], dx, g);
    // Each LayerNorm backward leaves the bf16 copy of its dx in
    // workspace_.dx_bf16, where the block below takes it.
    for (int l = L - 1; l >= 0; --l) {
      BlockBackwardImpl(l, dx, /*dx_out_in_bf16=*/true, dx, g);
    }
    EmbedBackward(tokens, stride, dx, g);
    return static_cast<float>(loss);
  } catch (const dnnl::error& e) {
    return kernels::OneDnnStatus(absl::StrCat(__func__, " of batch ", batch,
                                              ", length ", length),
                                 cdt_, e);
  }
}

absl::StatusOr<float> TransformerModel::Forward(const FloatArena& params,
                                                const uint8_t* tokens,
                                                int batch, int length) {
  if (tokens == nullptr) {
    return absl::InvalidArgumentError("Forward: null tokens");
  }
  RETURN_IF_ERROR(CheckWholeModel("Forward"));
  RETURN_IF_ERROR(Prepare(params, batch, length));
  const int stride = length + 1;
  const int L = config_.layers;
  std::vector<float*>& x = workspace_.x;
  try {
    EmbedForward(tokens, stride, x[0]);
    for (int l = 0; l < L; ++l) BlockForward(l, x[l], x[l + 1]);
    return static_cast<float>(
        DecoderForward(x[L], tokens + 1, stride, /*want_grad=*/false));
  } catch (const dnnl::error& e) {
    return kernels::OneDnnStatus(absl::StrCat(__func__, " of batch ", batch,
                                              ", length ", length),
                                 cdt_, e);
  }
}

absl::Status TransformerModel::NextByteLogits(const FloatArena& params,
                                              const uint8_t* prefix,
                                              int length, float* logits) {
  if (prefix == nullptr || logits == nullptr) {
    return absl::InvalidArgumentError("NextByteLogits: null prefix or logits");
  }
  RETURN_IF_ERROR(CheckWholeModel("NextByteLogits"));
  RETURN_IF_ERROR(Prepare(params, 1, length));
  const int L = config_.layers;
  TransformerWorkspace& ws = workspace_;
  try {
    EmbedForward(prefix, length, ws.x[0]);
    for (int l = 0; l < L; ++l) BlockForward(l, ws.x[l], ws.x[l + 1]);
    // The decoder without the loss: x(L) -> lnf_out -> logits (1, T, 256);
    // the last position's row is the next byte's.
    LayerNormForward(ws.x[L], index_.lnf_w, index_.lnf_b, ws.lnf_mean,
                     ws.lnf_var, ws.lnf_out);
    plan_->head->Forward(ws.lnf_out, plan_->head_weights.fwd, nullptr,
                         nullptr, ws.logits);
    std::memcpy(logits, ws.logits + int64_t{length - 1} * kVocabSize,
                sizeof(float) * kVocabSize);
    return absl::OkStatus();
  } catch (const dnnl::error& e) {
    return kernels::OneDnnStatus(absl::StrCat("NextByteLogits of length ", length),
                                 cdt_, e);
  }
}

double TransformerModel::TrainingFlops(int batch, int length) const {
  const double d = config_.d_model, L = config_.layers;
  // Per token forward: the matmuls (2 flops per multiply-add) and the two
  // attention products over `length` keys; backward = 2x forward.
  const double fwd_per_token =
      2.0 * (L * 12.0 * d * d + kVocabSize * d) + L * 4.0 * length * d;
  return 3.0 * fwd_per_token * batch * length;
}

std::string TransformerModel::KernelReport() const {
  if (plan_ == nullptr) return "no plan yet";
  return absl::StrCat("attention: ", plan_->attn->impl(),
                      "\nqkv: ", plan_->qkv->impl(), "\nproj: ",
                      plan_->proj->impl(), "\nfc: ", plan_->fc->impl(),
                      "\nfc2: ", plan_->fc2->impl(), "\nhead: ",
                      plan_->head->impl());
}

}  // namespace gasloc
