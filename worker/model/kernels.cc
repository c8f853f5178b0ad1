#include "worker/model/kernels.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>

namespace gasloc::kernels {
namespace {

using tag = dnnl::memory::format_tag;

dnnl::memory Mem(const dnnl::memory::desc& md, DnnlEnv* env, const void* p) {
  return dnnl::memory(md, env->engine, const_cast<void*>(p));
}

}  // namespace

size_t DtSize(dt type) { return type == dt::bf16 ? 2 : 4; }

uint16_t FloatToBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float Bf16ToFloat(uint16_t x) {
  const uint32_t bits = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

dnnl::memory::desc StridedMd(const Dims& dims, dt type, const Dims& strides) {
  return dnnl::memory::desc(dims, type, strides);
}

dnnl::memory::desc PlainMd(const Dims& dims, dt type) {
  Dims strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * dims[i + 1];
  }
  return dnnl::memory::desc(dims, type, strides);
}

// ---------------------------------------------------------------- Matmul

Matmul::Matmul(DnnlEnv* env, const Desc& desc) : env_(env), desc_(desc) {
  dnnl::primitive_attr attr;
  if (desc.user_scratchpad) attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (desc.scale != 1.0f) attr.set_output_scales(0, {desc.scale});
  if (desc.add) {
    dnnl::post_ops ops;
    ops.append_binary(dnnl::algorithm::binary_add, desc.add_md);
    attr.set_post_ops(ops);
  }
  const Dims c_dims = desc.c.dims();
  if (desc.bias) {
    Dims bias_dims(c_dims.size(), 1);
    bias_dims.back() = c_dims.back();
    bias_md_ = PlainMd(bias_dims, dt::f32);
    pd_ = dnnl::matmul::primitive_desc(
        dnnl::matmul::desc(desc.a, desc.b, bias_md_, desc.c), attr,
        env->engine);
  } else {
    pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(desc.a, desc.b, desc.c),
                                       attr, env->engine);
  }
  prim_ = dnnl::matmul(pd_);
  weights_md_ = pd_.weights_desc();
}

void Matmul::Run(const void* a, const void* b, void* c, const float* bias,
                 const void* add) {
  std::unordered_map<int, dnnl::memory> args = {
      {DNNL_ARG_SRC, Mem(desc_.a, env_, a)},
      {DNNL_ARG_WEIGHTS, Mem(weights_md_, env_, b)},
      {DNNL_ARG_DST, Mem(desc_.c, env_, c)}};
  if (desc_.bias) args.emplace(DNNL_ARG_BIAS, Mem(bias_md_, env_, bias));
  if (desc_.add) {
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
                 Mem(desc_.add_md, env_, add));
  }
  prim_.execute(env_->stream, args);
  env_->stream.wait();
}

void Matmul::RunOn(dnnl::stream& stream, void* scratchpad, const void* a,
                   const void* b, void* c) {
  std::unordered_map<int, dnnl::memory> args = {
      {DNNL_ARG_SRC, Mem(desc_.a, env_, a)},
      {DNNL_ARG_WEIGHTS, Mem(weights_md_, env_, b)},
      {DNNL_ARG_DST, Mem(desc_.c, env_, c)}};
  if (desc_.user_scratchpad) {
    args.emplace(DNNL_ARG_SCRATCHPAD,
                 Mem(pd_.scratchpad_desc(), env_, scratchpad));
  }
  prim_.execute(stream, args);
}

size_t Matmul::scratchpad_bytes() const {
  return pd_.scratchpad_desc().get_size();
}

std::string Matmul::impl() const { return pd_.impl_info_str(); }

// ---------------------------------------------------------------- Linear

namespace {

Matmul::Desc LinearFwdDesc(const Linear::Options& o) {
  Matmul::Desc d;
  d.a = PlainMd({o.M, o.K}, o.cdt);
  d.b = o.blocked_weights
            ? dnnl::memory::desc({o.K, o.N}, o.cdt, tag::any)
            : StridedMd({o.K, o.N}, o.cdt, {1, o.K});  // W^T view of (N, K)
  d.c = PlainMd({o.M, o.N}, o.y_type);
  d.bias = o.bias;
  d.add = o.residual;
  if (o.residual) d.add_md = PlainMd({o.M, o.N}, dt::f32);
  return d;
}

Matmul::Desc LinearBwdDataDesc(const Linear::Options& o) {
  Matmul::Desc d;
  d.a = PlainMd({o.M, o.N}, o.cdt);
  d.b = o.blocked_weights ? dnnl::memory::desc({o.N, o.K}, o.cdt, tag::any)
                         : PlainMd({o.N, o.K}, o.cdt);
  d.c = PlainMd({o.M, o.K}, o.dx_type);
  return d;
}

Matmul::Desc LinearBwdWeightsDesc(const Linear::Options& o) {
  Matmul::Desc d;
  d.a = StridedMd({o.N, o.M}, o.cdt, {1, o.N});  // dy^T view of (M, N)
  d.b = PlainMd({o.M, o.K}, o.cdt);
  d.c = PlainMd({o.N, o.K}, dt::f32);
  return d;
}

}  // namespace

Linear::Linear(DnnlEnv* env, const Options& options)
    : options_(options),
      fwd_(env, LinearFwdDesc(options)),
      bwd_data_(env, LinearBwdDataDesc(options)),
      bwd_weights_(env, LinearBwdWeightsDesc(options)),
      env_(env),
      w_t_f32_(StridedMd({options.K, options.N}, dt::f32, {1, options.K})),
      w_f32_(PlainMd({options.N, options.K}, dt::f32)) {
  if (options.blocked_weights) {
    to_fwd_ = dnnl::reorder(dnnl::reorder::primitive_desc(
        env->engine, w_t_f32_, env->engine, fwd_.weights_md()));
    to_bwd_ = dnnl::reorder(dnnl::reorder::primitive_desc(
        env->engine, w_f32_, env->engine, bwd_data_.weights_md()));
  }
}

void Linear::PrepareWeights(const float* w, void* fwd, void* bwd) {
  dnnl::memory src_t = Mem(w_t_f32_, env_, w);
  dnnl::memory src = Mem(w_f32_, env_, w);
  dnnl::memory dst_fwd = Mem(fwd_.weights_md(), env_, fwd);
  dnnl::memory dst_bwd = Mem(bwd_data_.weights_md(), env_, bwd);
  to_fwd_.execute(env_->stream, src_t, dst_fwd);
  to_bwd_.execute(env_->stream, src, dst_bwd);
  env_->stream.wait();
}

size_t Linear::fwd_weights_bytes() const {
  return fwd_.weights_md().get_size();
}

size_t Linear::bwd_weights_bytes() const {
  return bwd_data_.weights_md().get_size();
}

void Linear::Forward(const void* x, const void* w, const float* b,
                     const float* residual, void* y) {
  fwd_.Run(x, w, y, b, residual);
}

void Linear::BackwardData(const void* dy, const void* w, void* dx) {
  bwd_data_.Run(dy, w, dx);
}

void Linear::BackwardWeights(const void* x, const void* dy, float* dw,
                             float* db) {
  bwd_weights_.Run(dy, x, dw);
  if (db != nullptr) ColumnSum(dy, options_.cdt, options_.M, options_.N, db);
}

std::string Linear::impl() const {
  return "fwd " + fwd_.impl() + ", bwd_data " + bwd_data_.impl() +
         ", bwd_weights " + bwd_weights_.impl();
}

// ---------------------------------------------------------------- LayerNorm

LayerNorm::LayerNorm(DnnlEnv* env, int M, int C, float eps)
    : env_(env), M_(M), C_(C) {
  data_md_ = PlainMd({M, C}, dt::f32);
  stat_md_ = PlainMd({M}, dt::f32);
  param_md_ = PlainMd({C}, dt::f32);
  const auto flags = dnnl::normalization_flags::use_scale |
                     dnnl::normalization_flags::use_shift;
  fwd_pd_ = dnnl::layer_normalization_forward::primitive_desc(
      dnnl::layer_normalization_forward::desc(
          dnnl::prop_kind::forward_training, data_md_, stat_md_, eps, flags),
      env->engine);
  fwd_ = dnnl::layer_normalization_forward(fwd_pd_);
  bwd_pd_ = dnnl::layer_normalization_backward::primitive_desc(
      dnnl::layer_normalization_backward::desc(dnnl::prop_kind::backward,
                                               data_md_, data_md_, stat_md_,
                                               eps, flags),
      env->engine, fwd_pd_);
  bwd_ = dnnl::layer_normalization_backward(bwd_pd_);
}

void LayerNorm::Forward(const float* x, const float* gain, const float* bias,
                        float* y, float* mean, float* var) {
  fwd_.execute(env_->stream, {{DNNL_ARG_SRC, Mem(data_md_, env_, x)},
                              {DNNL_ARG_DST, Mem(data_md_, env_, y)},
                              {DNNL_ARG_SCALE, Mem(param_md_, env_, gain)},
                              {DNNL_ARG_SHIFT, Mem(param_md_, env_, bias)},
                              {DNNL_ARG_MEAN, Mem(stat_md_, env_, mean)},
                              {DNNL_ARG_VARIANCE, Mem(stat_md_, env_, var)}});
  env_->stream.wait();
}

void LayerNorm::Backward(const float* x, const float* gain, const float* mean,
                         const float* var, const float* dy, float* dx,
                         float* dgain, float* dbias) {
  bwd_.execute(env_->stream,
               {{DNNL_ARG_SRC, Mem(data_md_, env_, x)},
                {DNNL_ARG_DIFF_DST, Mem(data_md_, env_, dy)},
                {DNNL_ARG_SCALE, Mem(param_md_, env_, gain)},
                // oneDNN 2.6 refuses to execute without a shift argument,
                // which the backward never reads: pass the gain's buffer.
                {DNNL_ARG_SHIFT, Mem(param_md_, env_, gain)},
                {DNNL_ARG_MEAN, Mem(stat_md_, env_, mean)},
                {DNNL_ARG_VARIANCE, Mem(stat_md_, env_, var)},
                {DNNL_ARG_DIFF_SRC, Mem(data_md_, env_, dx)},
                {DNNL_ARG_DIFF_SCALE, Mem(param_md_, env_, dgain)},
                {DNNL_ARG_DIFF_SHIFT, Mem(param_md_, env_, dbias)}});
  env_->stream.wait();
}

// ---------------------------------------------------------------- Gelu

Gelu::Gelu(DnnlEnv* env, int64_t n, dt type) : env_(env) {
  md_ = PlainMd({n}, type);
  fwd_pd_ = dnnl::eltwise_forward::primitive_desc(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training,
                                  dnnl::algorithm::eltwise_gelu_erf, md_),
      env->engine);
  fwd_ = dnnl::eltwise_forward(fwd_pd_);
  bwd_pd_ = dnnl::eltwise_backward::primitive_desc(
      dnnl::eltwise_backward::desc(dnnl::algorithm::eltwise_gelu_erf, md_,
                                   md_),
      env->engine, fwd_pd_);
  bwd_ = dnnl::eltwise_backward(bwd_pd_);
}

void Gelu::Forward(const void* x, void* y) {
  fwd_.execute(env_->stream, {{DNNL_ARG_SRC, Mem(md_, env_, x)},
                              {DNNL_ARG_DST, Mem(md_, env_, y)}});
  env_->stream.wait();
}

void Gelu::Backward(const void* x, const void* dy, void* dx) {
  bwd_.execute(env_->stream, {{DNNL_ARG_SRC, Mem(md_, env_, x)},
                              {DNNL_ARG_DIFF_DST, Mem(md_, env_, dy)},
                              {DNNL_ARG_DIFF_SRC, Mem(md_, env_, dx)}});
  env_->stream.wait();
}

// ---------------------------------------------------------------- Convert

Convert::Convert(DnnlEnv* env, int64_t n, dt from, dt to)
    : env_(env), src_md_(PlainMd({n}, from)), dst_md_(PlainMd({n}, to)) {
  prim_ = dnnl::reorder(
      dnnl::reorder::primitive_desc(env->engine, src_md_, env->engine, dst_md_));
}

void Convert::Run(const void* src, void* dst) {
  dnnl::memory src_mem = Mem(src_md_, env_, src);
  dnnl::memory dst_mem = Mem(dst_md_, env_, dst);
  prim_.execute(env_->stream, src_mem, dst_mem);
  env_->stream.wait();
}

// ---------------------------------------------------------------- Attention

Permute::Permute(DnnlEnv* env, const Dims& dims, const Dims& src_strides,
                 const Dims& dst_strides, dt type)
    : env_(env),
      src_md_(StridedMd(dims, type, src_strides)),
      dst_md_(StridedMd(dims, type, dst_strides)) {
  prim_ = dnnl::reorder(
      dnnl::reorder::primitive_desc(env->engine, src_md_, env->engine, dst_md_));
}

void Permute::Run(const void* src, void* dst) {
  dnnl::memory src_mem = Mem(src_md_, env_, src);
  dnnl::memory dst_mem = Mem(dst_md_, env_, dst);
  prim_.execute(env_->stream, src_mem, dst_mem);
  env_->stream.wait();
}

namespace {

// Strides (in elements) of (B, T, 3, H, hd) index order for both layouts.
Dims RowMajorQkv(int T, int C, int H) {
  const int64_t hd = C / H;
  return {int64_t{T} * 3 * C, 3 * C, C, hd, 1};
}
Dims HeadMajorQkv(int T, int C, int H) {
  const int64_t hd = C / H;
  return {int64_t{T} * 3 * C, hd, int64_t{T} * C, int64_t{T} * hd, 1};
}
// Strides of (B, T, H, hd) index order.
Dims RowMajorOut(int T, int C, int H) {
  const int64_t hd = C / H;
  return {int64_t{T} * C, C, hd, 1};
}
Dims HeadMajorOut(int T, int C, int H) {
  const int64_t hd = C / H;
  return {int64_t{T} * C, hd, int64_t{T} * hd, 1};
}

}  // namespace

HeadLayout::HeadLayout(DnnlEnv* env, int B, int T, int C, int H, dt cdt)
    : qkv_to_heads(env, {B, T, 3, H, C / H}, RowMajorQkv(T, C, H),
                   HeadMajorQkv(T, C, H), cdt),
      out_from_heads(env, {B, T, H, C / H}, HeadMajorOut(T, C, H),
                     RowMajorOut(T, C, H), cdt),
      dout_to_heads(env, {B, T, H, C / H}, RowMajorOut(T, C, H),
                    HeadMajorOut(T, C, H), cdt),
      dqkv_from_heads(env, {B, T, 3, H, C / H}, HeadMajorQkv(T, C, H),
                      RowMajorQkv(T, C, H), cdt) {}

namespace {

// (H, T, n) dense, and its per-head transpose (H, n, T) view.
dnnl::memory::desc Dense(int H, int rows, int cols, dt type) {
  return PlainMd({H, rows, cols}, type);
}
dnnl::memory::desc Transposed(int H, int rows, int cols, dt type) {
  // logical (H, rows, cols) of a dense (H, cols, rows) buffer
  return StridedMd({H, rows, cols}, type,
                   {int64_t{rows} * cols, 1, int64_t{rows}});
}

Matmul::Desc AttnDesc(dnnl::memory::desc a, dnnl::memory::desc b,
                      dnnl::memory::desc c, float scale) {
  Matmul::Desc d;
  d.a = a;
  d.b = b;
  d.c = c;
  d.scale = scale;
  d.user_scratchpad = true;
  return d;
}

}  // namespace

// One thread's buffers: its stream, T x T blocks and oneDNN scratchpad.
struct CausalAttention::ThreadScratch {
  explicit ThreadScratch(const dnnl::engine& engine, size_t bytes)
      : stream(engine), buffer(bytes + 64) {}
  dnnl::stream stream;
  std::vector<char> buffer;
  float* s = nullptr;   // (H, T, T) f32 scores
  void* p = nullptr;    // (H, T, T) cdt probabilities
  void* dp = nullptr;   // (H, T, T) cdt
  void* ds = nullptr;   // (H, T, T) cdt
  void* scratchpad = nullptr;
};

CausalAttention::CausalAttention(DnnlEnv* env, int T, int C, int H, dt cdt)
    : env_(env),
      T_(T),
      C_(C),
      H_(H),
      cdt_(cdt),
      esize_(DtSize(cdt)),
      head_bytes_(static_cast<size_t>(T) * C * DtSize(cdt)),
      // S = scale Q K^T
      qk_(env, AttnDesc(Dense(H, T, C / H, cdt), Transposed(H, C / H, T, cdt),
                        Dense(H, T, T, dt::f32),
                        1.0f / std::sqrt(static_cast<float>(C / H)))),
      // O = P V
      pv_(env, AttnDesc(Dense(H, T, T, cdt), Dense(H, T, C / H, cdt),
                        Dense(H, T, C / H, cdt), 1.0f)),
      // dP = dO V^T
      dp_mm_(env, AttnDesc(Dense(H, T, C / H, cdt),
                           Transposed(H, C / H, T, cdt), Dense(H, T, T, cdt),
                           1.0f)),
      // dV = P^T dO
      dv_mm_(env, AttnDesc(Transposed(H, T, T, cdt), Dense(H, T, C / H, cdt),
                           Dense(H, T, C / H, cdt), 1.0f)),
      // dQ = scale dS K
      dq_mm_(env, AttnDesc(Dense(H, T, T, cdt), Dense(H, T, C / H, cdt),
                           Dense(H, T, C / H, cdt),
                           1.0f / std::sqrt(static_cast<float>(C / H)))),
      // dK = scale dS^T Q
      dk_mm_(env, AttnDesc(Transposed(H, T, T, cdt), Dense(H, T, C / H, cdt),
                           Dense(H, T, C / H, cdt),
                           1.0f / std::sqrt(static_cast<float>(C / H)))) {
  s_md_ = PlainMd({H, T, T}, dt::f32);
  p_md_ = PlainMd({H, T, T}, cdt);
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  auto fwd_pd = dnnl::softmax_v2_forward::primitive_desc(
      dnnl::softmax_v2_forward::desc(dnnl::prop_kind::forward_training,
                                     dnnl::algorithm::softmax_accurate, s_md_,
                                     p_md_, 2),
      attr, env->engine);
  softmax_fwd_ = dnnl::softmax_v2_forward(fwd_pd);
  auto bwd_pd = dnnl::softmax_v2_backward::primitive_desc(
      dnnl::softmax_v2_backward::desc(dnnl::algorithm::softmax_accurate,
                                      p_md_, p_md_, p_md_, 2),
      attr, env->engine, fwd_pd);
  softmax_bwd_ = dnnl::softmax_v2_backward(bwd_pd);
  softmax_fwd_scratch_md_ = fwd_pd.scratchpad_desc();
  softmax_bwd_scratch_md_ = bwd_pd.scratchpad_desc();
  for (size_t bytes :
       {qk_.scratchpad_bytes(), pv_.scratchpad_bytes(),
        dp_mm_.scratchpad_bytes(), dv_mm_.scratchpad_bytes(),
        dq_mm_.scratchpad_bytes(), dk_mm_.scratchpad_bytes(),
        fwd_pd.scratchpad_desc().get_size(),
        bwd_pd.scratchpad_desc().get_size()}) {
    scratchpad_bytes_ = std::max(scratchpad_bytes_, bytes);
  }
  const size_t n = static_cast<size_t>(H) * T * T;
  per_thread_bytes_ = (n * 4 + 63) / 64 * 64 + 3 * ((n * esize_ + 63) / 64 * 64);
}

std::string CausalAttention::impl() const {
  return "qk " + qk_.impl() + ", pv " + pv_.impl() + ", dp " + dp_mm_.impl() +
         ", dv " + dv_mm_.impl() + ", dq " + dq_mm_.impl() + ", dk " +
         dk_mm_.impl();
}

CausalAttention::~CausalAttention() = default;

void CausalAttention::Probabilities(ThreadScratch& ts, const char* qkv_b) {
  qk_.RunOn(ts.stream, ts.scratchpad, qkv_b, qkv_b + head_bytes_, ts.s);
  // Causal mask: a query never sees later keys.
  for (int64_t row = 0; row < int64_t{H_} * T_; ++row) {
    const int t = static_cast<int>(row % T_);
    float* r = ts.s + row * T_;
    for (int s = t + 1; s < T_; ++s) r[s] = -1e30f;
  }
  softmax_fwd_.execute(ts.stream,
                       {{DNNL_ARG_SRC, Mem(s_md_, env_, ts.s)},
                        {DNNL_ARG_DST, Mem(p_md_, env_, ts.p)},
                        {DNNL_ARG_SCRATCHPAD,
                         Mem(softmax_fwd_scratch_md_, env_, ts.scratchpad)}});
}

void CausalAttention::Forward(const void* qkv, int B, void* out) {
  const size_t qkv_seq = static_cast<size_t>(T_) * 3 * C_ * esize_;
  const size_t out_seq = static_cast<size_t>(T_) * C_ * esize_;
  const int nthreads = std::min(B, omp_get_max_threads());
  EnsureThreads(nthreads);
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1)
  for (int b = 0; b < B; ++b) {
    ThreadScratch& ts = *threads_[omp_get_thread_num()];
    const char* qkv_b = static_cast<const char*>(qkv) + b * qkv_seq;
    Probabilities(ts, qkv_b);
    pv_.RunOn(ts.stream, ts.scratchpad, ts.p, qkv_b + 2 * head_bytes_,
              static_cast<char*>(out) + b * out_seq);
  }
}

void CausalAttention::EnsureThreads(int nthreads) {
  while (static_cast<int>(threads_.size()) < nthreads) {
    auto ts = std::make_unique<ThreadScratch>(
        env_->engine, per_thread_bytes_ + scratchpad_bytes_);
    const size_t n = static_cast<size_t>(H_) * T_ * T_;
    char* base = ts->buffer.data();
    base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
    ts->s = reinterpret_cast<float*>(base);
    base += (n * 4 + 63) / 64 * 64;
    ts->p = base;
    base += (n * esize_ + 63) / 64 * 64;
    ts->dp = base;
    base += (n * esize_ + 63) / 64 * 64;
    ts->ds = base;
    base += (n * esize_ + 63) / 64 * 64;
    ts->scratchpad = base;
    threads_.push_back(std::move(ts));
  }
}

void CausalAttention::Backward(const void* qkv, const void* dout, int B,
                               void* dqkv) {
  const size_t qkv_seq = static_cast<size_t>(T_) * 3 * C_ * esize_;
  const size_t out_seq = static_cast<size_t>(T_) * C_ * esize_;
  const int nthreads = std::min(B, omp_get_max_threads());
  EnsureThreads(nthreads);
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1)
  for (int b = 0; b < B; ++b) {
    ThreadScratch& ts = *threads_[omp_get_thread_num()];
    const char* qkv_b = static_cast<const char*>(qkv) + b * qkv_seq;
    const char* dout_b = static_cast<const char*>(dout) + b * out_seq;
    char* dqkv_b = static_cast<char*>(dqkv) + b * qkv_seq;
    Probabilities(ts, qkv_b);
    dp_mm_.RunOn(ts.stream, ts.scratchpad, dout_b, qkv_b + 2 * head_bytes_,
                 ts.dp);
    dv_mm_.RunOn(ts.stream, ts.scratchpad, ts.p, dout_b,
                 dqkv_b + 2 * head_bytes_);
    softmax_bwd_.execute(ts.stream,
                         {{DNNL_ARG_DST, Mem(p_md_, env_, ts.p)},
                          {DNNL_ARG_DIFF_DST, Mem(p_md_, env_, ts.dp)},
                          {DNNL_ARG_DIFF_SRC, Mem(p_md_, env_, ts.ds)},
                          {DNNL_ARG_SCRATCHPAD,
                           Mem(softmax_bwd_scratch_md_, env_, ts.scratchpad)}});
    dq_mm_.RunOn(ts.stream, ts.scratchpad, ts.ds, qkv_b + head_bytes_, dqkv_b);
    dk_mm_.RunOn(ts.stream, ts.scratchpad, ts.ds, qkv_b, dqkv_b + head_bytes_);
  }
}

// ---------------------------------------------------------------- loops

double FusedCrossEntropy(float* logits, const uint8_t* targets,
                         int target_stride, int B, int T, int V,
                         bool want_grad) {
  const int64_t M = int64_t{B} * T;
  const float inv_m = 1.0f / static_cast<float>(M);
  double total = 0;
#pragma omp parallel for reduction(+ : total) schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    float* row = logits + m * V;
    const int target = targets[(m / T) * target_stride + m % T];
    float mx = row[0];
    for (int v = 1; v < V; ++v) mx = std::max(mx, row[v]);
    float sum = 0;
    for (int v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
    const float lse = mx + std::log(sum);
    total += static_cast<double>(lse - row[target]);
    if (want_grad) {
      for (int v = 0; v < V; ++v) row[v] = std::exp(row[v] - lse) * inv_m;
      row[target] -= inv_m;
    }
  }
  return total / static_cast<double>(M);
}

void EmbeddingForward(const uint8_t* tokens, int token_stride,
                      const float* tok, const float* pos, int B, int T, int C,
                      float* x) {
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < int64_t{B} * T; ++m) {
    const int b = static_cast<int>(m / T), t = static_cast<int>(m % T);
    const float* tr = tok + tokens[b * token_stride + t] * C;
    const float* pr = pos + static_cast<int64_t>(t) * C;
    float* xr = x + m * C;
    for (int c = 0; c < C; ++c) xr[c] = tr[c] + pr[c];
  }
}

void EmbeddingBackward(const uint8_t* tokens, int token_stride,
                       const float* dx, int B, int T, int C, int V,
                       int context, float* dtok, float* dpos) {
  std::memset(dtok, 0, sizeof(float) * V * C);
  std::memset(dpos, 0, sizeof(float) * context * C);
  // Columns are independent: split them across threads (no atomics).
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int c0 = C * id / nt, c1 = C * (id + 1) / nt;
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        const float* dr = dx + (int64_t{b} * T + t) * C;
        float* tr = dtok + tokens[b * token_stride + t] * C;
        float* pr = dpos + int64_t{t} * C;
        for (int c = c0; c < c1; ++c) {
          tr[c] += dr[c];
          pr[c] += dr[c];
        }
      }
    }
  }
}

void ColumnSum(const void* x, dt type, int64_t M, int64_t N, float* out) {
  std::memset(out, 0, sizeof(float) * N);
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t n0 = N * id / nt, n1 = N * (id + 1) / nt;
    if (type == dt::bf16) {
      const auto* xb = static_cast<const uint16_t*>(x);
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = n0; n < n1; ++n) out[n] += Bf16ToFloat(xb[m * N + n]);
      }
    } else {
      const auto* xf = static_cast<const float*>(x);
      for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = n0; n < n1; ++n) out[n] += xf[m * N + n];
      }
    }
  }
}

void AddInPlace(const float* x, int64_t n, float* y) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace gasloc::kernels
