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
}

void Matmul::Run(const void* a, const void* b, void* c, const float* bias,
                 const void* add) {
  std::unordered_map<int, dnnl::memory> args = {
      {DNNL_ARG_SRC, Mem(desc_.a, env_, a)},
      {DNNL_ARG_WEIGHTS, Mem(desc_.b, env_, b)},
      {DNNL_ARG_DST, Mem(desc_.c, env_, c)}};
  if (desc_.bias) args.emplace(DNNL_ARG_BIAS, Mem(bias_md_, env_, bias));
  if (desc_.add) {
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
                 Mem(desc_.add_md, env_, add));
  }
  prim_.execute(env_->stream, args);
  env_->stream.wait();
}

std::string Matmul::impl() const { return pd_.impl_info_str(); }

// ---------------------------------------------------------------- Linear

namespace {

Matmul::Desc LinearFwdDesc(const Linear::Options& o) {
  Matmul::Desc d;
  d.a = PlainMd({o.M, o.K}, o.cdt);
  d.b = StridedMd({o.K, o.N}, o.cdt, {1, o.K});  // W^T view of (N, K)
  d.c = PlainMd({o.M, o.N}, o.y_type);
  d.bias = o.bias;
  d.add = o.residual;
  if (o.residual) d.add_md = PlainMd({o.M, o.N}, dt::f32);
  return d;
}

Matmul::Desc LinearBwdDataDesc(const Linear::Options& o) {
  Matmul::Desc d;
  d.a = PlainMd({o.M, o.N}, o.cdt);
  d.b = PlainMd({o.N, o.K}, o.cdt);
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
      bwd_weights_(env, LinearBwdWeightsDesc(options)) {}

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

namespace {

// Views of one sequence's q, k, v (base pointer at q, k or v of head 0).
Dims HeadRows(int H, int hd, int row) { return {hd, row, 1}; }  // (H,T,hd)
Dims HeadCols(int H, int hd, int row) { return {hd, 1, row}; }  // (H,hd,T)

}  // namespace

CausalAttention::CausalAttention(DnnlEnv* env, int T, int C, int H, dt cdt)
    : env_(env),
      T_(T),
      C_(C),
      H_(H),
      cdt_(cdt),
      esize_(DtSize(cdt)),
      mask_(static_cast<size_t>(T) * T, 0.0f),
      qk_(env, [&] {
        Matmul::Desc d;
        const int hd = C / H;
        d.a = StridedMd({H, T, hd}, cdt, HeadRows(H, hd, 3 * C));
        d.b = StridedMd({H, hd, T}, cdt, HeadCols(H, hd, 3 * C));
        d.c = PlainMd({H, T, T}, dt::f32);
        d.scale = 1.0f / std::sqrt(static_cast<float>(hd));
        d.add = true;
        d.add_md = PlainMd({1, T, T}, dt::f32);
        return d;
      }()),
      pv_(env, [&] {
        Matmul::Desc d;
        const int hd = C / H;
        d.a = PlainMd({H, T, T}, cdt);
        d.b = StridedMd({H, T, hd}, cdt, HeadRows(H, hd, 3 * C));
        d.c = StridedMd({H, T, hd}, cdt, HeadRows(H, hd, C));
        return d;
      }()),
      dp_mm_(env, [&] {  // dP = dO V^T
        Matmul::Desc d;
        const int hd = C / H;
        d.a = StridedMd({H, T, hd}, cdt, HeadRows(H, hd, C));
        d.b = StridedMd({H, hd, T}, cdt, HeadCols(H, hd, 3 * C));
        d.c = PlainMd({H, T, T}, cdt);
        return d;
      }()),
      dv_mm_(env, [&] {  // dV = P^T dO
        Matmul::Desc d;
        const int hd = C / H;
        d.a = StridedMd({H, T, T}, cdt, {int64_t{T} * T, 1, T});
        d.b = StridedMd({H, T, hd}, cdt, HeadRows(H, hd, C));
        d.c = StridedMd({H, T, hd}, cdt, HeadRows(H, hd, 3 * C));
        return d;
      }()),
      dq_mm_(env, [&] {  // dQ = scale dS K
        Matmul::Desc d;
        const int hd = C / H;
        d.a = PlainMd({H, T, T}, cdt);
        d.b = StridedMd({H, T, hd}, cdt, HeadRows(H, hd, 3 * C));
        d.c = StridedMd({H, T, hd}, cdt, HeadRows(H, hd, 3 * C));
        d.scale = 1.0f / std::sqrt(static_cast<float>(hd));
        return d;
      }()),
      dk_mm_(env, [&] {  // dK = scale dS^T Q
        Matmul::Desc d;
        const int hd = C / H;
        d.a = StridedMd({H, T, T}, cdt, {int64_t{T} * T, 1, T});
        d.b = StridedMd({H, T, hd}, cdt, HeadRows(H, hd, 3 * C));
        d.c = StridedMd({H, T, hd}, cdt, HeadRows(H, hd, 3 * C));
        d.scale = 1.0f / std::sqrt(static_cast<float>(hd));
        return d;
      }()) {
  for (int t = 0; t < T; ++t) {
    for (int s = t + 1; s < T; ++s) mask_[t * T + s] = -1e30f;
  }
  const size_t n = static_cast<size_t>(H) * T * T;
  const size_t s_bytes = (n * 4 + 63) / 64 * 64;
  const size_t c_bytes = (n * esize_ + 63) / 64 * 64;
  scratch_.resize(s_bytes + 3 * c_bytes + 64);
  char* base = scratch_.data();
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  s_ = reinterpret_cast<float*>(base);
  p_ = base + s_bytes;
  dp_ = base + s_bytes + c_bytes;
  ds_ = base + s_bytes + 2 * c_bytes;
  s_md_ = PlainMd({H, T, T}, dt::f32);
  p_md_ = PlainMd({H, T, T}, cdt);
  auto fwd_pd = dnnl::softmax_v2_forward::primitive_desc(
      dnnl::softmax_v2_forward::desc(dnnl::prop_kind::forward_training,
                                     dnnl::algorithm::softmax_accurate, s_md_,
                                     p_md_, 2),
      env->engine);
  softmax_fwd_ = dnnl::softmax_v2_forward(fwd_pd);
  softmax_bwd_ = dnnl::softmax_v2_backward(
      dnnl::softmax_v2_backward::primitive_desc(
          dnnl::softmax_v2_backward::desc(dnnl::algorithm::softmax_accurate,
                                          p_md_, p_md_, p_md_, 2),
          env->engine, fwd_pd));
}

void CausalAttention::Probabilities(const char* qkv_b) {
  qk_.Run(qkv_b, qkv_b + C_ * esize_, s_, nullptr, mask_.data());
  softmax_fwd_.execute(env_->stream, {{DNNL_ARG_SRC, Mem(s_md_, env_, s_)},
                                      {DNNL_ARG_DST, Mem(p_md_, env_, p_)}});
  env_->stream.wait();
}

void CausalAttention::Forward(const void* qkv, int B, void* out) {
  const size_t qkv_seq = static_cast<size_t>(T_) * 3 * C_ * esize_;
  const size_t out_seq = static_cast<size_t>(T_) * C_ * esize_;
  for (int b = 0; b < B; ++b) {
    const char* qkv_b = static_cast<const char*>(qkv) + b * qkv_seq;
    Probabilities(qkv_b);
    pv_.Run(p_, qkv_b + 2 * C_ * esize_, static_cast<char*>(out) + b * out_seq);
  }
}

void CausalAttention::Backward(const void* qkv, const void* dout, int B,
                               void* dqkv) {
  const size_t qkv_seq = static_cast<size_t>(T_) * 3 * C_ * esize_;
  const size_t out_seq = static_cast<size_t>(T_) * C_ * esize_;
  for (int b = 0; b < B; ++b) {
    const char* qkv_b = static_cast<const char*>(qkv) + b * qkv_seq;
    const char* dout_b = static_cast<const char*>(dout) + b * out_seq;
    char* dqkv_b = static_cast<char*>(dqkv) + b * qkv_seq;
    Probabilities(qkv_b);
    dp_mm_.Run(dout_b, qkv_b + 2 * C_ * esize_, dp_);
    dv_mm_.Run(p_, dout_b, dqkv_b + 2 * C_ * esize_);
    softmax_bwd_.execute(env_->stream,
                         {{DNNL_ARG_DST, Mem(p_md_, env_, p_)},
                          {DNNL_ARG_DIFF_DST, Mem(p_md_, env_, dp_)},
                          {DNNL_ARG_DIFF_SRC, Mem(p_md_, env_, ds_)}});
    env_->stream.wait();
    dq_mm_.Run(ds_, qkv_b + C_ * esize_, dqkv_b);
    dk_mm_.Run(ds_, qkv_b, dqkv_b + C_ * esize_);
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
