#include "worker/model/kernels.h"

#include <immintrin.h>
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
  if (desc.add || desc.accumulate) {
    dnnl::post_ops ops;
    if (desc.accumulate) ops.append_sum(1.0f);
    if (desc.add) ops.append_binary(desc.add_alg, desc.add_md);
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
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(desc_.accumulate ? 1 : 0) |
                     DNNL_ARG_SRC_1,
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
  d.add = o.bwd_data_mul;
  if (o.bwd_data_mul) {
    d.add_md = PlainMd({o.M, o.K}, o.dx_type);
    d.add_alg = dnnl::algorithm::binary_mul;
  }
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

void Linear::PrepareWeights(const float* w, void* fwd, void* bwd,
                            dnnl::stream* stream) {
  dnnl::stream& on = stream != nullptr ? *stream : env_->stream;
  dnnl::memory src_t = Mem(w_t_f32_, env_, w);
  dnnl::memory src = Mem(w_f32_, env_, w);
  dnnl::memory dst_fwd = Mem(fwd_.weights_md(), env_, fwd);
  dnnl::memory dst_bwd = Mem(bwd_data_.weights_md(), env_, bwd);
  to_fwd_.execute(on, src_t, dst_fwd);
  to_bwd_.execute(on, src, dst_bwd);
  on.wait();
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

void Linear::BackwardData(const void* dy, const void* w, void* dx,
                          const void* mul) {
  bwd_data_.Run(dy, w, dx, nullptr, mul);
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

namespace {

// Writes n floats as `type` (f32 or bf16, round to nearest even).
inline void StoreRow(const float* in, int64_t n, dt type, void* out) {
  if (type == dt::bf16) {
    auto* o = static_cast<uint16_t*>(out);
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) o[i] = FloatToBf16(in[i]);
  } else {
    std::memcpy(out, in, sizeof(float) * n);
  }
}

}  // namespace

LayerNorm::LayerNorm(int M, int C, float eps, dt out_type)
    : M_(M), C_(C), eps_(eps), out_type_(out_type) {}

void LayerNorm::Forward(const float* x, const float* gain, const float* bias,
                        void* y, float* mean, float* var) {
  const int C = C_;
  const size_t osize = DtSize(out_type_);
#pragma omp parallel
  {
    std::vector<float> row_out(C);
#pragma omp for schedule(static)
    for (int m = 0; m < M_; ++m) {
      const float* row = x + int64_t{m} * C;
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int c = 0; c < C; ++c) sum += row[c];
      const float mu = sum / C;
      float sq = 0;
#pragma omp simd reduction(+ : sq)
      for (int c = 0; c < C; ++c) sq += (row[c] - mu) * (row[c] - mu);
      const float v = sq / C;
      const float rstd = 1.0f / std::sqrt(v + eps_);
      float* o = row_out.data();
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = (row[c] - mu) * rstd * gain[c] + bias[c];
      StoreRow(o, C, out_type_,
               static_cast<char*>(y) + static_cast<size_t>(m) * C * osize);
      mean[m] = mu;
      var[m] = v;
    }
  }
}

void LayerNorm::Backward(const float* x, const float* gain, const float* mean,
                         const float* var, const float* dy,
                         const float* residual, float* dx, void* dx_copy,
                         float* dgain, float* dbias) {
  const int C = C_;
  const size_t osize = DtSize(out_type_);
  const int nthreads = omp_get_max_threads();
  partial_.assign(static_cast<size_t>(nthreads) * 2 * C, 0.0f);
#pragma omp parallel num_threads(nthreads)
  {
    const int id = omp_get_thread_num(), nt = omp_get_num_threads();
    float* pg = partial_.data() + static_cast<size_t>(id) * 2 * C;
    float* pb = pg + C;
    const int m0 = static_cast<int>(int64_t{M_} * id / nt);
    const int m1 = static_cast<int>(int64_t{M_} * (id + 1) / nt);
    for (int m = m0; m < m1; ++m) {
      const float* xr = x + int64_t{m} * C;
      const float* dyr = dy + int64_t{m} * C;
      float* dxr = dx + int64_t{m} * C;
      const float mu = mean[m];
      const float rstd = 1.0f / std::sqrt(var[m] + eps_);
      float s1 = 0, s2 = 0;
#pragma omp simd reduction(+ : s1, s2)
      for (int c = 0; c < C; ++c) {
        const float xhat = (xr[c] - mu) * rstd;
        const float dxhat = dyr[c] * gain[c];
        s1 += dxhat;
        s2 += dxhat * xhat;
        pg[c] += dyr[c] * xhat;
        pb[c] += dyr[c];
      }
      const float a = s1 / C, b = s2 / C;
      if (residual != nullptr) {
        const float* rr = residual + int64_t{m} * C;
#pragma omp simd
        for (int c = 0; c < C; ++c) {
          const float xhat = (xr[c] - mu) * rstd;
          dxr[c] = rstd * (dyr[c] * gain[c] - a - xhat * b) + rr[c];
        }
      } else {
#pragma omp simd
        for (int c = 0; c < C; ++c) {
          const float xhat = (xr[c] - mu) * rstd;
          dxr[c] = rstd * (dyr[c] * gain[c] - a - xhat * b);
        }
      }
      if (dx_copy != nullptr) {
        StoreRow(dxr, C, out_type_,
                 static_cast<char*>(dx_copy) + static_cast<size_t>(m) * C * osize);
      }
    }
  }
  for (int c = 0; c < C; ++c) dgain[c] = dbias[c] = 0.0f;
  for (int t = 0; t < nthreads; ++t) {
    const float* pg = partial_.data() + static_cast<size_t>(t) * 2 * C;
    for (int c = 0; c < C; ++c) {
      dgain[c] += pg[c];
      dbias[c] += pg[C + c];
    }
  }
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

// ---------------------------------------------------------------- GELU

namespace {

// exp(z) for z <= 0 (z below -87 gives 0): 2^k * p(r), |r| <= ln2 / 2,
// degree-6 Taylor polynomial (relative error < 2e-7).
inline float ExpNonPositive(float z) {
  z = std::max(z, -87.0f);
  const float k = std::floor(z * 1.44269504f + 0.5f);
  const float r = (z - k * 0.693145752f) - k * 1.42860677e-6f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  return p * scale;
}

// g = x Phi(x), gd = Phi(x) + x phi(x); Phi(x) = (1 + erf(x / sqrt 2)) / 2.
inline void GeluAndDerivative(float x, float* g, float* gd) {
  const float u = x * 0.70710678f;  // x / sqrt(2)
  const float au = std::fabs(u);
  const float t = 1.0f / (1.0f + 0.3275911f * au);
  const float e = ExpNonPositive(-u * u);  // = sqrt(2 pi) phi(x)
  const float poly =
      t * (0.254829592f +
           t * (-0.284496736f +
                t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  const float erf_abs = 1.0f - poly * e;
  const float erf = u < 0 ? -erf_abs : erf_abs;
  const float cdf = 0.5f * (1.0f + erf);
  *g = x * cdf;
  *gd = cdf + x * e * 0.39894228f;  // 1 / sqrt(2 pi)
}

// The same on 8 floats with AVX2 + FMA (the build's x86-64-v3 baseline);
// the compiler does not vectorize the scalar form (floor, bit casts).
struct Gelu8 {
  __m256 g, gd;
};
inline Gelu8 GeluAndDerivative8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 u = _mm256_mul_ps(x, _mm256_set1_ps(0.70710678f));
  const __m256 au = _mm256_andnot_ps(sign, u);
  // t = 1 / (1 + p |u|): approximate reciprocal + one Newton step (~23 bits).
  const __m256 den = _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), au, one);
  __m256 t = _mm256_rcp_ps(den);
  t = _mm256_mul_ps(t, _mm256_fnmadd_ps(den, t, _mm256_set1_ps(2.0f)));
  // e = exp(-u^2)
  const __m256 z = _mm256_max_ps(_mm256_mul_ps(_mm256_xor_ps(u, sign), u),
                                 _mm256_set1_ps(-87.0f));
  const __m256 k = _mm256_floor_ps(_mm256_fmadd_ps(
      z, _mm256_set1_ps(1.44269504f), _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145752f), z);
  r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.42860677e-6f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720.0f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, one);
  p = _mm256_fmadd_ps(p, r, one);
  const __m256i bits = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  const __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
  __m256 poly = _mm256_fmadd_ps(_mm256_set1_ps(1.061405429f), t,
                                _mm256_set1_ps(-1.453152027f));
  poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(1.421413741f));
  poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(-0.284496736f));
  poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(0.254829592f));
  poly = _mm256_mul_ps(poly, t);
  const __m256 erf_abs = _mm256_fnmadd_ps(poly, e, one);
  const __m256 erf = _mm256_or_ps(erf_abs, _mm256_and_ps(u, sign));
  const __m256 cdf = _mm256_mul_ps(_mm256_set1_ps(0.5f), _mm256_add_ps(one, erf));
  Gelu8 out;
  out.g = _mm256_mul_ps(x, cdf);
  out.gd = _mm256_fmadd_ps(_mm256_mul_ps(x, e), _mm256_set1_ps(0.39894228f),
                           cdf);
  return out;
}

// Eight elements to and from f32 lanes, for f32 and bf16 storage.
inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline void Store8(__m256 v, float* p) { _mm256_storeu_ps(p, v); }

inline __m256 Load8(const uint16_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

// Round to nearest even, NaN kept quiet (as FloatToBf16).
inline void Store8(__m256 v, uint16_t* p) {
  __m256i b = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(b, 16),
                                       _mm256_set1_epi32(1));
  b = _mm256_add_epi32(b, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  b = _mm256_srli_epi32(b, 16);
  const __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
  b = _mm256_blendv_epi8(b, _mm256_set1_epi32(0x7fc0), nan);
  const __m256i packed =
      _mm256_permute4x64_epi64(_mm256_packus_epi32(b, b), 0x08);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   _mm256_castsi256_si128(packed));
}

// GELU and GELU' of one bf16 element, rounded back to bf16.
inline void GeluAndDerivative(uint16_t x, uint16_t* g, uint16_t* gd) {
  float a, b;
  GeluAndDerivative(Bf16ToFloat(x), &a, &b);
  *g = FloatToBf16(a);
  *gd = FloatToBf16(b);
}

// Eight at a time in parallel, then the tail; T is float or bf16 bits.
template <typename T>
void GeluWithDerivativeOf(const T* in, int64_t n, T* g, T* gd) {
  const int64_t n8 = n / 8 * 8;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n8; i += 8) {
    const Gelu8 r = GeluAndDerivative8(Load8(in + i));
    Store8(r.g, g + i);
    Store8(r.gd, gd + i);
  }
  for (int64_t i = n8; i < n; ++i) GeluAndDerivative(in[i], &g[i], &gd[i]);
}

}  // namespace

void GeluWithDerivative(const void* h, dt type, int64_t n, void* g,
                        void* gd) {
  if (type == dt::bf16) {
    GeluWithDerivativeOf(static_cast<const uint16_t*>(h), n,
                         static_cast<uint16_t*>(g), static_cast<uint16_t*>(gd));
  } else {
    GeluWithDerivativeOf(static_cast<const float*>(h), n,
                         static_cast<float*>(g), static_cast<float*>(gd));
  }
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

Matmul::Desc AttnDesc(dnnl::memory::desc a, dnnl::memory::desc b,
                      dnnl::memory::desc c, float scale,
                      bool accumulate = false) {
  Matmul::Desc d;
  d.a = a;
  d.b = b;
  d.c = c;
  d.scale = scale;
  d.user_scratchpad = true;
  d.accumulate = accumulate;
  return d;
}

// One head's (rows, cols) dense block, and the transpose view (cols, rows)
// of a dense (rows, cols) block. oneDNN's brgemm kernels take only dense
// operands (a strided batch falls back to a slower gemm), so the row
// blocks run one head at a time: a prefix of a head's rows is dense.
dnnl::memory::desc Block(int rows, int cols, dt type) {
  return PlainMd({rows, cols}, type);
}
dnnl::memory::desc BlockT(int rows, int cols, dt type) {
  return StridedMd({cols, rows}, type, {1, cols});
}

}  // namespace

// The primitives of one row block, per head: query rows [r0, r0 + rows)
// against keys [0, n), n = r0 + rows.
struct CausalAttention::RowBlock {
  RowBlock(DnnlEnv* env, int H, int hd, dt cdt, int r0_, int rows_,
           bool accumulate)
      : r0(r0_),
        rows(rows_),
        n(r0_ + rows_),
        // S = scale Q_i K^T
        qk(env, AttnDesc(Block(rows, hd, cdt), BlockT(n, hd, cdt),
                         Block(rows, n, dt::f32),
                         1.0f / std::sqrt(static_cast<float>(hd)))),
        // O_i = P V
        pv(env, AttnDesc(Block(rows, n, cdt), Block(n, hd, cdt),
                         Block(rows, hd, cdt), 1.0f)),
        // dP = dO_i V^T
        dp(env, AttnDesc(Block(rows, hd, cdt), BlockT(n, hd, cdt),
                         Block(rows, n, cdt), 1.0f)),
        // dV[0, n) (+)= P^T dO_i, f32
        dv(env, AttnDesc(BlockT(rows, n, cdt), Block(rows, hd, cdt),
                         Block(n, hd, dt::f32), 1.0f, accumulate)),
        // dQ_i = scale dS K
        dq(env, AttnDesc(Block(rows, n, cdt), Block(n, hd, cdt),
                         Block(rows, hd, cdt),
                         1.0f / std::sqrt(static_cast<float>(hd)))),
        // dK[0, n) (+)= scale dS^T Q_i, f32
        dk(env, AttnDesc(BlockT(rows, n, cdt), Block(rows, hd, cdt),
                         Block(n, hd, dt::f32),
                         1.0f / std::sqrt(static_cast<float>(hd)),
                         accumulate)),
        s_md(PlainMd({H, rows, n}, dt::f32)),
        p_md(PlainMd({H, rows, n}, cdt)) {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    auto fwd_pd = dnnl::softmax_v2_forward::primitive_desc(
        dnnl::softmax_v2_forward::desc(dnnl::prop_kind::forward_training,
                                       dnnl::algorithm::softmax_accurate, s_md,
                                       p_md, 2),
        attr, env->engine);
    softmax_fwd = dnnl::softmax_v2_forward(fwd_pd);
    auto bwd_pd = dnnl::softmax_v2_backward::primitive_desc(
        dnnl::softmax_v2_backward::desc(dnnl::algorithm::softmax_accurate,
                                        p_md, p_md, p_md, 2),
        attr, env->engine, fwd_pd);
    softmax_bwd = dnnl::softmax_v2_backward(bwd_pd);
    softmax_fwd_scratch_md = fwd_pd.scratchpad_desc();
    softmax_bwd_scratch_md = bwd_pd.scratchpad_desc();
  }
  size_t scratchpad_bytes() const {
    size_t bytes = 0;
    for (size_t b : {qk.scratchpad_bytes(), pv.scratchpad_bytes(),
                     dp.scratchpad_bytes(), dv.scratchpad_bytes(),
                     dq.scratchpad_bytes(), dk.scratchpad_bytes(),
                     softmax_fwd_scratch_md.get_size(),
                     softmax_bwd_scratch_md.get_size()}) {
      bytes = std::max(bytes, b);
    }
    return bytes;
  }
  int r0, rows, n;
  Matmul qk, pv, dp, dv, dq, dk;
  dnnl::memory::desc s_md, p_md;
  dnnl::softmax_v2_forward softmax_fwd;
  dnnl::softmax_v2_backward softmax_bwd;
  dnnl::memory::desc softmax_fwd_scratch_md, softmax_bwd_scratch_md;
};

// One thread's buffers: its stream, one row block's scores and the f32 dK,
// dV accumulators (bf16 only) and oneDNN scratchpad.
struct CausalAttention::ThreadScratch {
  explicit ThreadScratch(const dnnl::engine& engine, size_t bytes)
      : stream(engine), buffer(bytes + 64) {}
  dnnl::stream stream;
  std::vector<char> buffer;
  float* s = nullptr;    // (H, block_rows, T) f32 scores
  void* p = nullptr;     // (H, block_rows, T) cdt probabilities
  void* dp = nullptr;    // (H, block_rows, T) cdt
  void* ds = nullptr;    // (H, block_rows, T) cdt
  float* acc = nullptr;  // (2, H, T, hd) f32: dK, dV (bf16 only)
  void* scratchpad = nullptr;
};

namespace {
size_t Aligned(size_t bytes) { return (bytes + 63) / 64 * 64; }
}  // namespace

CausalAttention::CausalAttention(DnnlEnv* env, int T, int C, int H, dt cdt,
                                 int block_rows)
    : env_(env),
      T_(T),
      C_(C),
      H_(H),
      cdt_(cdt),
      esize_(DtSize(cdt)),
      head_bytes_(static_cast<size_t>(T) * C * DtSize(cdt)) {
  const int rows = std::max(1, std::min(block_rows, T));
  const int nb = (T + rows - 1) / rows;
  for (int i = 0; i < nb; ++i) {
    // The backward visits the last block first: it writes dK, dV; the
    // others add to them.
    blocks_.push_back(std::make_unique<RowBlock>(
        env, H, C / H, cdt, i * rows, std::min(rows, T - i * rows),
        /*accumulate=*/i != nb - 1));
    scratchpad_bytes_ =
        std::max(scratchpad_bytes_, blocks_.back()->scratchpad_bytes());
  }
  const size_t n = static_cast<size_t>(H) * rows * T;
  per_thread_bytes_ = Aligned(n * 4) + 3 * Aligned(n * esize_);
  if (cdt != dt::f32) per_thread_bytes_ += Aligned(size_t{2} * T * C * 4);
}

std::string CausalAttention::impl() const {
  const RowBlock& b = *blocks_.front();
  return std::to_string(blocks_.size()) + " row blocks; qk " + b.qk.impl() +
         ", pv " + b.pv.impl() + ", dp " + b.dp.impl() + ", dv " +
         b.dv.impl() + ", dq " + b.dq.impl() + ", dk " + b.dk.impl();
}

CausalAttention::~CausalAttention() = default;

void CausalAttention::Probabilities(RowBlock& blk, ThreadScratch& ts,
                                    const char* qkv_b) {
  const size_t row_bytes = static_cast<size_t>(C_ / H_) * esize_;
  const size_t head = static_cast<size_t>(T_) * row_bytes;  // one head
  const int64_t tile = int64_t{blk.rows} * blk.n;
  for (int h = 0; h < H_; ++h) {
    blk.qk.RunOn(ts.stream, ts.scratchpad, qkv_b + h * head + blk.r0 * row_bytes,
                 qkv_b + head_bytes_ + h * head, ts.s + h * tile);
  }
  // Causal mask on the diagonal tile: query r0 + r never sees keys after it.
  for (int h = 0; h < H_; ++h) {
    for (int r = 0; r < blk.rows; ++r) {
      float* row = ts.s + h * tile + int64_t{r} * blk.n;
      for (int s = blk.r0 + r + 1; s < blk.n; ++s) row[s] = -1e30f;
    }
  }
  blk.softmax_fwd.execute(ts.stream,
               {{DNNL_ARG_SRC, Mem(blk.s_md, env_, ts.s)},
                {DNNL_ARG_DST, Mem(blk.p_md, env_, ts.p)},
                {DNNL_ARG_SCRATCHPAD,
                 Mem(blk.softmax_fwd_scratch_md, env_, ts.scratchpad)}});
}

void CausalAttention::Forward(const void* qkv, int B, void* out) {
  const size_t qkv_seq = static_cast<size_t>(T_) * 3 * C_ * esize_;
  const size_t out_seq = static_cast<size_t>(T_) * C_ * esize_;
  const size_t row_bytes = static_cast<size_t>(C_ / H_) * esize_;
  const size_t head = static_cast<size_t>(T_) * row_bytes;
  const int nthreads = std::min(B, omp_get_max_threads());
  EnsureThreads(nthreads);
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1)
  for (int b = 0; b < B; ++b) {
    ThreadScratch& ts = *threads_[omp_get_thread_num()];
    const char* qkv_b = static_cast<const char*>(qkv) + b * qkv_seq;
    char* out_b = static_cast<char*>(out) + b * out_seq;
    for (const auto& blk : blocks_) {
      Probabilities(*blk, ts, qkv_b);
      const size_t p_tile = size_t{1} * blk->rows * blk->n * esize_;
      for (int h = 0; h < H_; ++h) {
        blk->pv.RunOn(ts.stream, ts.scratchpad,
                      static_cast<char*>(ts.p) + h * p_tile,
                      qkv_b + 2 * head_bytes_ + h * head,
                      out_b + h * head + blk->r0 * row_bytes);
      }
    }
  }
}

void CausalAttention::EnsureThreads(int nthreads) {
  const int rows = blocks_.front()->rows;
  const size_t n = static_cast<size_t>(H_) * rows * T_;
  while (static_cast<int>(threads_.size()) < nthreads) {
    auto ts = std::make_unique<ThreadScratch>(
        env_->engine, per_thread_bytes_ + scratchpad_bytes_);
    char* base = ts->buffer.data();
    base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
    ts->s = reinterpret_cast<float*>(base);
    base += Aligned(n * 4);
    ts->p = base;
    base += Aligned(n * esize_);
    ts->dp = base;
    base += Aligned(n * esize_);
    ts->ds = base;
    base += Aligned(n * esize_);
    if (cdt_ != dt::f32) {
      ts->acc = reinterpret_cast<float*>(base);
      base += Aligned(size_t{2} * T_ * C_ * 4);
    }
    ts->scratchpad = base;
    threads_.push_back(std::move(ts));
  }
}

void CausalAttention::Backward(const void* qkv, const void* dout, int B,
                               void* dqkv) {
  const size_t qkv_seq = static_cast<size_t>(T_) * 3 * C_ * esize_;
  const size_t out_seq = static_cast<size_t>(T_) * C_ * esize_;
  const size_t row_bytes = static_cast<size_t>(C_ / H_) * esize_;
  const int64_t head_elems = int64_t{T_} * C_;
  const size_t head = static_cast<size_t>(T_) * row_bytes;  // one head
  const size_t acc_head = static_cast<size_t>(T_) * (C_ / H_) * 4;  // f32
  const int nthreads = std::min(B, omp_get_max_threads());
  EnsureThreads(nthreads);
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1)
  for (int b = 0; b < B; ++b) {
    ThreadScratch& ts = *threads_[omp_get_thread_num()];
    const char* qkv_b = static_cast<const char*>(qkv) + b * qkv_seq;
    const char* dout_b = static_cast<const char*>(dout) + b * out_seq;
    char* dqkv_b = static_cast<char*>(dqkv) + b * qkv_seq;
    // dK, dV accumulate in f32: in place in f32, else in ts.acc.
    void* dk_acc = cdt_ == dt::f32 ? static_cast<void*>(dqkv_b + head_bytes_)
                                   : static_cast<void*>(ts.acc);
    void* dv_acc = cdt_ == dt::f32
                       ? static_cast<void*>(dqkv_b + 2 * head_bytes_)
                       : static_cast<void*>(ts.acc + head_elems);
    for (int i = static_cast<int>(blocks_.size()) - 1; i >= 0; --i) {
      RowBlock& blk = *blocks_[i];
      const size_t at = blk.r0 * row_bytes;
      const size_t p_tile = size_t{1} * blk.rows * blk.n * esize_;
      char* p = static_cast<char*>(ts.p);
      char* dp = static_cast<char*>(ts.dp);
      char* ds = static_cast<char*>(ts.ds);
      Probabilities(blk, ts, qkv_b);
      for (int h = 0; h < H_; ++h) {
        const char* v_h = qkv_b + 2 * head_bytes_ + h * head;
        blk.dp.RunOn(ts.stream, ts.scratchpad, dout_b + h * head + at, v_h,
                     dp + h * p_tile);
        blk.dv.RunOn(ts.stream, ts.scratchpad, p + h * p_tile,
                     dout_b + h * head + at,
                     static_cast<char*>(dv_acc) + h * acc_head);
      }
      blk.softmax_bwd.execute(ts.stream,
                   {{DNNL_ARG_DST, Mem(blk.p_md, env_, ts.p)},
                    {DNNL_ARG_DIFF_DST, Mem(blk.p_md, env_, ts.dp)},
                    {DNNL_ARG_DIFF_SRC, Mem(blk.p_md, env_, ts.ds)},
                    {DNNL_ARG_SCRATCHPAD,
                     Mem(blk.softmax_bwd_scratch_md, env_, ts.scratchpad)}});
      for (int h = 0; h < H_; ++h) {
        blk.dq.RunOn(ts.stream, ts.scratchpad, ds + h * p_tile,
                     qkv_b + head_bytes_ + h * head, dqkv_b + h * head + at);
        blk.dk.RunOn(ts.stream, ts.scratchpad, ds + h * p_tile,
                     qkv_b + h * head + at,
                     static_cast<char*>(dk_acc) + h * acc_head);
      }
    }
    if (cdt_ != dt::f32) {
      auto* out = reinterpret_cast<uint16_t*>(dqkv_b + head_bytes_);
      const float* acc = ts.acc;
#pragma omp simd
      for (int64_t j = 0; j < 2 * head_elems; ++j) out[j] = FloatToBf16(acc[j]);
    }
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
  // Rows split statically over the threads (each reads contiguous memory);
  // per-thread partial sums are added in thread order: deterministic for a
  // fixed thread count.
  const int nthreads = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>(omp_get_max_threads(), M / 64)));
  std::vector<float> partial(static_cast<size_t>(nthreads) * N, 0.0f);
#pragma omp parallel num_threads(nthreads)
  {
    const int id = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t m0 = M * id / nt, m1 = M * (id + 1) / nt;
    float* acc = partial.data() + static_cast<size_t>(id) * N;
    const int64_t n8 = N / 8 * 8;
    for (int64_t m = m0; m < m1; ++m) {
      if (type == dt::bf16) {
        const auto* row = static_cast<const uint16_t*>(x) + m * N;
        for (int64_t n = 0; n < n8; n += 8) {
          Store8(_mm256_add_ps(Load8(acc + n), Load8(row + n)), acc + n);
        }
        for (int64_t n = n8; n < N; ++n) acc[n] += Bf16ToFloat(row[n]);
      } else {
        const auto* row = static_cast<const float*>(x) + m * N;
        for (int64_t n = 0; n < n8; n += 8) {
          Store8(_mm256_add_ps(Load8(acc + n), Load8(row + n)), acc + n);
        }
        for (int64_t n = n8; n < N; ++n) acc[n] += row[n];
      }
    }
  }
  std::memcpy(out, partial.data(), sizeof(float) * N);
  for (int t = 1; t < nthreads; ++t) {
    const float* acc = partial.data() + static_cast<size_t>(t) * N;
    for (int64_t n = 0; n < N; ++n) out[n] += acc[n];
  }
}

}  // namespace gasloc::kernels
