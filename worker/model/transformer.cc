#include "worker/model/transformer.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/model/attention.h"

namespace gasloc {

using kernels::dt;

namespace {
constexpr float kLayerNormEps = 1e-5f;
// Each plan holds its primitives and a blocked copy of the weights (two per
// matrix), so keep few: training uses one shape, generation a handful.
constexpr int kMaxPlans = 4;
enum LinearKind { kQkv = 0, kProj = 1, kFc = 2, kFc2 = 3, kHead = 4 };
}  // namespace

// The primitives for one (batch, length) shape. M = B * T rows.
struct TransformerModel::Plan {
  int B = 0, T = 0;
  std::unique_ptr<kernels::Linear> qkv, proj, fc, fc2, head;
  std::unique_ptr<kernels::LayerNorm> ln;
  std::unique_ptr<kernels::Gelu> gelu;
  std::unique_ptr<kernels::CausalAttention> attn;
  std::unique_ptr<kernels::HeadLayout> heads;
  std::unique_ptr<kernels::Convert> to_c_d;    // (M, d) f32 -> cdt
  std::unique_ptr<kernels::Convert> to_c_v;    // (M, 256) f32 -> cdt
  // This step's weights in the layouts the primitives chose (format_tag
  // any): forward and backward-data copies of every matrix, written by
  // Prepare() from the f32 arena.
  struct Weights {
    void* fwd = nullptr;
    void* bwd = nullptr;
  };
  std::vector<std::array<Weights, 4>> layer_w;  // [layer][LinearKind]
  Weights head_w;
  std::unique_ptr<char, decltype(&std::free)> wbuf{nullptr, &std::free};
  size_t wbuf_bytes = 0;
  kernels::Linear* linear(int kind) const {
    switch (kind) {
      case kQkv: return qkv.get();
      case kProj: return proj.get();
      case kFc: return fc.get();
      default: return fc2.get();
    }
  }
};

// Adds the scope's duration to profile_[op] when profiling is on.
class TransformerModel::OpTimer {
 public:
  OpTimer(TransformerModel* model, Op op) : model_(model), op_(op) {
    if (model_->profile_on_) start_ = std::chrono::steady_clock::now();
  }
  ~OpTimer() {
    if (model_->profile_on_) {
      model_->profile_[op_] += std::chrono::duration<double>(
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

TransformerModel::TransformerModel(const ModelConfig& config,
                                   std::shared_ptr<const ArenaLayout> layout,
                                   const ModelOptions& options)
    : Model(config, std::move(layout)),
      options_(options),
      first_block_(options.first_block),
      end_block_(options.num_blocks > 0 ? options.first_block + options.num_blocks
                                        : config.layers),
      index_(TensorIndex(config)),
      cdt_(options.precision == v1::PRECISION_BF16 ? dt::bf16 : dt::f32),
      csize_(kernels::DtSize(cdt_)) {}

TransformerModel::~TransformerModel() { std::free(workspace_); }

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
  RETURN_IF_ERROR(model->AllocateWorkspace());
  return model;
}

absl::Status TransformerModel::AllocateWorkspace() {
  const size_t M = static_cast<size_t>(options_.max_batch) * config_.context;
  const size_t d = config_.d_model, L = config_.layers, cs = csize_;
  const bool bf16 = cdt_ == dt::bf16;
  // Two passes: measure, then assign.
  std::vector<std::pair<void**, size_t>> slots;
  auto add = [&](void** p, size_t bytes) { slots.push_back({p, bytes}); };
  x_.assign(L + 1, nullptr);
  acts_.assign(L, LayerActs{});
  const size_t first = first_block_, end = end_block_;
  for (size_t l = first; l <= end; ++l) {
    add(reinterpret_cast<void**>(&x_[l]), 4 * M * d);
  }
  for (size_t l = first; l < end; ++l) {
    LayerActs& a = acts_[l];
    add(reinterpret_cast<void**>(&a.mean1), 4 * M);
    add(reinterpret_cast<void**>(&a.var1), 4 * M);
    add(reinterpret_cast<void**>(&a.mean2), 4 * M);
    add(reinterpret_cast<void**>(&a.var2), 4 * M);
    add(&a.ln1, cs * M * d);
    add(&a.qkvh, cs * M * 3 * d);
    add(&a.att, cs * M * d);
    add(reinterpret_cast<void**>(&a.x_mid), 4 * M * d);
    add(&a.ln2, cs * M * d);
    add(&a.h, cs * M * 4 * d);
    add(&a.g, cs * M * 4 * d);
    add(reinterpret_cast<void**>(&a.lse), 4 * M * config_.heads);
  }
  add(reinterpret_cast<void**>(&meanf_), 4 * M);
  add(reinterpret_cast<void**>(&varf_), 4 * M);
  add(&lnf_, cs * M * d);
  add(reinterpret_cast<void**>(&logits_), 4 * M * kVocabSize);
  if (bf16) {
    add(&dlogits_c_, cs * M * kVocabSize);
    add(&dres_c_, cs * M * d);
  }
  add(reinterpret_cast<void**>(&dres_[0]), 4 * M * d);
  add(reinterpret_cast<void**>(&dres_[1]), 4 * M * d);
  add(reinterpret_cast<void**>(&dmid_), 4 * M * d);
  add(reinterpret_cast<void**>(&dln_), 4 * M * d);
  add(&d4a_, cs * M * 4 * d);
  add(&d4b_, cs * M * 4 * d);
  add(&dqkv_, cs * M * 3 * d);
  add(&qkv_tmp_, cs * M * 3 * d);
  add(&oh_, cs * M * d);
  add(&doh_, cs * M * d);
  add(&dqkvh_, cs * M * 3 * d);
  add(&datt_, cs * M * d);
  size_t total = 0;
  for (auto& [p, bytes] : slots) total += (bytes + 63) / 64 * 64;
  workspace_ = static_cast<char*>(std::aligned_alloc(64, total));
  if (workspace_ == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("model workspace of ", total, " bytes"));
  }
  workspace_bytes_ = total;
  size_t offset = 0;
  for (auto& [p, bytes] : slots) {
    *p = workspace_ + offset;
    offset += (bytes + 63) / 64 * 64;
  }
  return absl::OkStatus();
}

std::vector<TransformerModel::LinearShape> TransformerModel::LinearShapes(
    const ModelConfig& config, int M, dt cdt) {
  const int d = config.d_model;
  auto shape = [&](const char* name, int K, int N, dt y_type, dt dx_type,
                   bool residual, bool bias, bool bwd_data_mul) {
    kernels::Linear::Options o;
    o.M = M;
    o.K = K;
    o.N = N;
    o.cdt = cdt;
    o.y_type = y_type;
    o.dx_type = dx_type;
    o.residual = residual;
    o.bias = bias;
    o.bwd_data_mul = bwd_data_mul;
    o.blocked_weights = true;
    return LinearShape{name, o};
  };
  // bf16: fc2's backward-data applies the GELU derivative (fused_gelu()).
  const bool fused = cdt == dt::bf16;
  return {shape("qkv", d, 3 * d, cdt, dt::f32, false, true, false),
          shape("proj", d, d, dt::f32, cdt, true, true, false),
          shape("fc", d, 4 * d, cdt, dt::f32, false, true, false),
          shape("fc2", 4 * d, d, dt::f32, cdt, true, true, fused),
          shape("head", d, kVocabSize, dt::f32, dt::f32, false, false, false)};
}

absl::StatusOr<TransformerModel::Plan*> TransformerModel::GetPlan(int batch,
                                                                  int length) {
  auto it = plans_.find({batch, length});
  if (it != plans_.end()) return it->second.get();
  if (plans_.size() >= kMaxPlans) plans_.clear();
  auto plan = std::make_unique<Plan>();
  plan->B = batch;
  plan->T = length;
  const int M = batch * length, d = config_.d_model;
  try {
    const std::vector<LinearShape> shapes = LinearShapes(config_, M, cdt_);
    auto linear = [&](int kind) {
      return std::make_unique<kernels::Linear>(&env_, shapes[kind].options);
    };
    plan->qkv = linear(kQkv);
    plan->proj = linear(kProj);
    plan->fc = linear(kFc);
    plan->fc2 = linear(kFc2);
    plan->head = linear(kHead);
    plan->ln = std::make_unique<kernels::LayerNorm>(M, d, kLayerNormEps, cdt_);
    plan->gelu =
        std::make_unique<kernels::Gelu>(&env_, int64_t{M} * 4 * d, cdt_);
    plan->attn = std::make_unique<kernels::CausalAttention>(
        &env_, length, d, config_.heads, cdt_);
    plan->heads = std::make_unique<kernels::HeadLayout>(
        &env_, batch, length, d, config_.heads, cdt_);
    if (cdt_ == dt::bf16) {
      plan->to_c_d = std::make_unique<kernels::Convert>(
          &env_, int64_t{M} * d, dt::f32, cdt_);
      plan->to_c_v = std::make_unique<kernels::Convert>(
          &env_, int64_t{M} * kVocabSize, dt::f32, cdt_);
    }
    // Blocked weight copies: one allocation for all layers and the head.
    size_t total = 0;
    auto bytes = [](size_t b) { return (b + 63) / 64 * 64; };
    const int blocks = end_block_ - first_block_;
    for (int kind = kQkv; kind <= kFc2; ++kind) {
      total += blocks * (bytes(plan->linear(kind)->fwd_weights_bytes()) +
                         bytes(plan->linear(kind)->bwd_weights_bytes()));
    }
    total += bytes(plan->head->fwd_weights_bytes()) +
             bytes(plan->head->bwd_weights_bytes());
    plan->wbuf.reset(static_cast<char*>(std::aligned_alloc(64, total)));
    if (plan->wbuf == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("blocked weights of ", total, " bytes"));
    }
    char* next = plan->wbuf.get();
    auto take = [&](size_t b) {
      char* p = next;
      next += bytes(b);
      return p;
    };
    plan->wbuf_bytes = total;
    plan->layer_w.resize(config_.layers);
    for (int l = first_block_; l < end_block_; ++l) {
      for (int kind = kQkv; kind <= kFc2; ++kind) {
        plan->layer_w[l][kind].fwd = take(plan->linear(kind)->fwd_weights_bytes());
        plan->layer_w[l][kind].bwd = take(plan->linear(kind)->bwd_weights_bytes());
      }
    }
    plan->head_w.fwd = take(plan->head->fwd_weights_bytes());
    plan->head_w.bwd = take(plan->head->bwd_weights_bytes());
  } catch (const dnnl::error& e) {
    return absl::InternalError(
        absl::StrCat("oneDNN could not build the primitives for batch ", batch,
                     ", length ", length, ": ", e.what()));
  }
  Plan* raw = plan.get();
  plans_[{batch, length}] = std::move(plan);
  return raw;
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
  return plan_ == nullptr ? 0 : plan_->wbuf_bytes;
}

void TransformerModel::SetThreads() const {
  omp_set_num_threads(options_.threads > 0 ? options_.threads
                                           : omp_get_num_procs());
}

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
  ASSIGN_OR_RETURN(plan_, GetPlan(batch, length));
  params_ = &params;
  // All matrices in one parallel loop (each reorder single-threaded on its
  // thread's stream): one fork/join per step instead of two per matrix.
  const int jobs = 4 * (end_block_ - first_block_) + 1;
  const int nthreads = std::min(jobs, omp_get_max_threads());
  while (static_cast<int>(thread_streams_.size()) < nthreads) {
    thread_streams_.emplace_back(env_.engine);
  }
  std::string error;
  {
    OpTimer timer(this, kOpConvert);
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1)
    for (int job = 0; job < jobs; ++job) {
      try {
        dnnl::stream* stream = &thread_streams_[omp_get_thread_num()];
        if (job == jobs - 1) {
          plan_->head->PrepareWeights(P(index_.head_w), plan_->head_w.fwd,
                                      plan_->head_w.bwd, stream);
          continue;
        }
        const int l = first_block_ + job / 4, kind = job % 4;
        const BlockTensorIndex& w = index_.blocks[l];
        const int entries[4] = {w.qkv_w, w.proj_w, w.fc_w, w.fc2_w};
        plan_->linear(kind)->PrepareWeights(P(entries[kind]),
                                            plan_->layer_w[l][kind].fwd,
                                            plan_->layer_w[l][kind].bwd,
                                            stream);
      } catch (const dnnl::error& e) {
#pragma omp critical(gasloc_prepare_error)
        error = e.what();
      }
    }
  }
  if (!error.empty()) {
    return absl::InternalError(absl::StrCat("oneDNN weight reorder: ", error));
  }
  return absl::OkStatus();
}

const float* TransformerModel::P(int entry) const {
  return params_->data() + layout_->entries()[entry].offset;
}

float* TransformerModel::G(float* grads, int entry) const {
  return grads + layout_->entries()[entry].offset;
}

float* TransformerModel::x(int l) { return x_[l]; }
float* TransformerModel::dx(int i) { return dres_[i]; }

void TransformerModel::LayerNormToCompute(const float* x, int w, int b,
                                          float* mean, float* var, void* out) {
  OpTimer timer(this, kOpLayerNorm);
  plan_->ln->Forward(x, P(w), P(b), out, mean, var);
}

// ---------------------------------------------------------------- forward

void TransformerModel::EmbedForward(const uint8_t* tokens, int token_stride,
                                    float* x_out) {
  OpTimer timer(this, kOpEmbed);
  kernels::EmbeddingForward(tokens, token_stride, P(index_.tok_emb),
                            P(index_.pos_emb), plan_->B, plan_->T,
                            config_.d_model, x_out);
}

void TransformerModel::BlockForward(int layer, const float* x_in,
                                    float* x_out) {
  const BlockTensorIndex& w = index_.blocks[layer];
  LayerActs& a = acts_[layer];
  Plan& p = *plan_;
  // (B, T, d) -> LN1 -> (B, T, d)
  LayerNormToCompute(x_in, w.ln1_w, w.ln1_b, a.mean1, a.var1, a.ln1);
  // (B, T, d) -> (B, T, 3d)
  {
    OpTimer timer(this, kOpQkv);
    p.qkv->Forward(a.ln1, p.layer_w[layer][kQkv].fwd, P(w.qkv_b), nullptr, qkv_tmp_);
  }
  // (B, T, 3d) -> head-major (B, 3, H, T, hd) -> (B, H, T, hd) -> (B, T, d)
  {
    OpTimer timer(this, kOpAttention);
    p.heads->qkv_to_heads.Run(qkv_tmp_, a.qkvh);
    p.attn->Forward(a.qkvh, p.B, oh_, a.lse);
    p.heads->out_from_heads.Run(oh_, a.att);
  }
  // x_mid = x_in + att W_proj^T + b
  {
    OpTimer timer(this, kOpProj);
    p.proj->Forward(a.att, p.layer_w[layer][kProj].fwd, P(w.proj_b), x_in, a.x_mid);
  }
  LayerNormToCompute(a.x_mid, w.ln2_w, w.ln2_b, a.mean2, a.var2, a.ln2);
  // (B, T, d) -> (B, T, 4d) -> GELU. Fused (bf16): h goes to scratch and
  // a.h keeps GELU'(h) for the backward; otherwise a.h keeps h.
  void* const h = fused_gelu() ? d4a_ : a.h;
  {
    OpTimer timer(this, kOpFc);
    p.fc->Forward(a.ln2, p.layer_w[layer][kFc].fwd, P(w.fc_b), nullptr, h);
  }
  {
    OpTimer timer(this, kOpGelu);
    if (fused_gelu()) {
      kernels::GeluWithDerivative(h, cdt_, int64_t{p.B} * p.T * 4 *
                                  config_.d_model, a.g, a.h);
    } else {
      p.gelu->Forward(a.h, a.g);
    }
  }
  // x_out = x_mid + g W_fc2^T + b
  OpTimer timer(this, kOpFc2);
  p.fc2->Forward(a.g, p.layer_w[layer][kFc2].fwd, P(w.fc2_b), a.x_mid, x_out);
}

double TransformerModel::DecoderForward(const float* x,
                                        const uint8_t* targets,
                                        int target_stride, bool want_grad) {
  LayerNormToCompute(x, index_.lnf_w, index_.lnf_b, meanf_, varf_, lnf_);
  // (B, T, d) -> (B, T, 256) f32
  {
    OpTimer timer(this, kOpHead);
    plan_->head->Forward(lnf_, plan_->head_w.fwd, nullptr, nullptr, logits_);
  }
  OpTimer timer(this, kOpCrossEntropy);
  return kernels::FusedCrossEntropy(logits_, targets, target_stride, plan_->B,
                                    plan_->T, kVocabSize, want_grad);
}

// ---------------------------------------------------------------- backward

void TransformerModel::DecoderBackward(const float* x, float* dx,
                                       float* grads) {
  DecoderBackward(x, dx,
                  DecoderGrads{G(grads, index_.lnf_w), G(grads, index_.lnf_b),
                               G(grads, index_.head_w)});
}

void TransformerModel::DecoderBackward(const float* x, float* dx,
                                       const DecoderGrads& out) {
  Plan& p = *plan_;
  const void* dlogits = logits_;
  if (cdt_ == dt::bf16) {
    OpTimer timer(this, kOpConvert);
    p.to_c_v->Run(logits_, dlogits_c_);
    dlogits = dlogits_c_;
  }
  {
    OpTimer timer(this, kOpHead);
    p.head->BackwardWeights(lnf_, dlogits, out.head_w, nullptr);
    p.head->BackwardData(dlogits, p.head_w.bwd, dln_);
  }
  // In bf16 also leaves dx in the compute type in dres_c_ for the last
  // block's first matmuls (ForwardBackward passes that on).
  OpTimer timer(this, kOpLayerNorm);
  p.ln->Backward(x, P(index_.lnf_w), meanf_, varf_, dln_, nullptr, dx,
                 cdt_ == dt::bf16 ? dres_c_ : nullptr, out.lnf_w, out.lnf_b);
}

void TransformerModel::BlockBackward(int layer, const float* dx_out,
                                     float* dx_in, float* grads) {
  BlockBackwardImpl(layer, dx_out, /*dx_out_in_dres_c=*/false, dx_in, grads);
}

void TransformerModel::BlockBackwardImpl(int layer, const float* dx_out,
                                         bool dx_out_in_dres_c, float* dx_in,
                                         float* grads) {
  const BlockTensorIndex& w = index_.blocks[layer];
  LayerActs& a = acts_[layer];
  Plan& p = *plan_;
  const float* x_in = x_[layer];
  void* const dx_copy = cdt_ == dt::bf16 ? dres_c_ : nullptr;
  // MLP: dx_out -> d g -> d h -> d ln2 -> d x_mid (+ residual).
  const void* dy = dx_out;
  if (cdt_ == dt::bf16 && dx_out_in_dres_c) {
    dy = dres_c_;
  } else if (cdt_ == dt::bf16) {
    OpTimer timer(this, kOpConvert);
    p.to_c_d->Run(dx_out, dres_c_);
    dy = dres_c_;
  }
  {
    OpTimer timer(this, kOpFc2);
    p.fc2->BackwardWeights(a.g, dy, G(grads, w.fc2_w), G(grads, w.fc2_b));
    // Fused: d h = (dy W_fc2) * GELU'(h) straight from the matmul.
    p.fc2->BackwardData(dy, p.layer_w[layer][kFc2].bwd,
                        fused_gelu() ? d4b_ : d4a_,
                        fused_gelu() ? a.h : nullptr);
  }
  if (!fused_gelu()) {
    OpTimer timer(this, kOpGelu);
    p.gelu->Backward(a.h, d4a_, d4b_);
  }
  {
    OpTimer timer(this, kOpFc);
    p.fc->BackwardWeights(a.ln2, d4b_, G(grads, w.fc_w), G(grads, w.fc_b));
    p.fc->BackwardData(d4b_, p.layer_w[layer][kFc].bwd, dln_);
  }
  {
    // d x_mid = LN2 backward + dx_out (residual), and its compute-type copy.
    OpTimer timer(this, kOpLayerNorm);
    p.ln->Backward(a.x_mid, P(w.ln2_w), a.mean2, a.var2, dln_, dx_out, dmid_,
                   dx_copy, G(grads, w.ln2_w), G(grads, w.ln2_b));
  }
  // Attention: d x_mid -> d att -> d qkv -> d ln1 -> d x_in (+ residual).
  dy = cdt_ == dt::bf16 ? dres_c_ : dmid_;
  {
    OpTimer timer(this, kOpProj);
    p.proj->BackwardWeights(a.att, dy, G(grads, w.proj_w), G(grads, w.proj_b));
    p.proj->BackwardData(dy, p.layer_w[layer][kProj].bwd, datt_);
  }
  {
    OpTimer timer(this, kOpAttention);
    p.heads->dout_to_heads.Run(datt_, doh_);
    p.attn->Backward(a.qkvh, a.lse, doh_, p.B, dqkvh_);
    p.heads->dqkv_from_heads.Run(dqkvh_, dqkv_);
  }
  {
    OpTimer timer(this, kOpQkv);
    p.qkv->BackwardWeights(a.ln1, dqkv_, G(grads, w.qkv_w), G(grads, w.qkv_b));
    p.qkv->BackwardData(dqkv_, p.layer_w[layer][kQkv].bwd, dln_);
  }
  // d x_in = LN1 backward + d x_mid; in bf16 its copy stays in dres_c_ for
  // the block below (ForwardBackward).
  OpTimer timer(this, kOpLayerNorm);
  p.ln->Backward(x_in, P(w.ln1_w), a.mean1, a.var1, dln_, dmid_, dx_in,
                 dx_copy, G(grads, w.ln1_w), G(grads, w.ln1_b));
}

void TransformerModel::EmbedBackward(const uint8_t* tokens, int token_stride,
                                     const float* dx, float* grads) {
  OpTimer timer(this, kOpEmbed);
  kernels::EmbeddingBackward(tokens, token_stride, dx, plan_->B, plan_->T,
                             config_.d_model, kVocabSize, config_.context,
                             G(grads, index_.tok_emb),
                             G(grads, index_.pos_emb));
}

// ---------------------------------------------------------------- Model API

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
  try {
    EmbedForward(tokens, stride, x_[0]);
    for (int l = 0; l < L; ++l) BlockForward(l, x_[l], x_[l + 1]);
    const double loss = DecoderForward(x_[L], tokens + 1, stride, true);
    float* g = grads->data();
    DecoderBackward(x_[L], dres_[0], g);
    // Each backward leaves the compute-type copy of its dx in dres_c_.
    for (int l = L - 1; l >= 0; --l) {
      BlockBackwardImpl(l, dres_[0], /*dx_out_in_dres_c=*/true, dres_[0], g);
    }
    EmbedBackward(tokens, stride, dres_[0], g);
    return static_cast<float>(loss);
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN: ", e.what()));
  }
}

absl::StatusOr<float> TransformerModel::Forward(const FloatArena& params,
                                                const uint8_t* tokens,
                                                int batch, int length) {
  if (tokens == nullptr) return absl::InvalidArgumentError("Forward: null tokens");
  RETURN_IF_ERROR(CheckWholeModel("Forward"));
  RETURN_IF_ERROR(Prepare(params, batch, length));
  const int stride = length + 1;
  try {
    EmbedForward(tokens, stride, x_[0]);
    for (int l = 0; l < config_.layers; ++l) {
      BlockForward(l, x_[l], x_[l + 1]);
    }
    return static_cast<float>(
        DecoderForward(x_[config_.layers], tokens + 1, stride, false));
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN: ", e.what()));
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
  try {
    EmbedForward(prefix, length, x_[0]);
    for (int l = 0; l < config_.layers; ++l) {
      BlockForward(l, x_[l], x_[l + 1]);
    }
    // Targets are irrelevant here: use the prefix itself (loss discarded).
    LayerNormToCompute(x_[config_.layers], index_.lnf_w, index_.lnf_b, meanf_,
                       varf_, lnf_);
    plan_->head->Forward(lnf_, plan_->head_w.fwd, nullptr, nullptr, logits_);
    std::memcpy(logits, logits_ + int64_t{length - 1} * kVocabSize,
                sizeof(float) * kVocabSize);
    return absl::OkStatus();
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("oneDNN: ", e.what()));
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
