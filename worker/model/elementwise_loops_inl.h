// The bodies of the element loops (elementwise_loops.h), included by one
// translation unit per instruction set; everything here has internal
// linkage, so the copies compiled with and without AVX-512 never meet at
// link time. Internal to worker/model.
#ifndef GASLOC_WORKER_MODEL_ELEMENTWISE_LOOPS_INL_H_
#define GASLOC_WORKER_MODEL_ELEMENTWISE_LOOPS_INL_H_

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "worker/model/elementwise_loops.h"
#include "worker/model/vector_math.h"

namespace gasloc::kernels {
namespace {

using vmath::Exp8NonPositive;
using vmath::ExpNonPositive;
using vmath::HorizontalMax8;
using vmath::HorizontalSum8;
using vmath::Load8;
using vmath::LoadOne;
using vmath::Store8;
using vmath::StoreOne;

// ---------------------------------------------------------------- GELU

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

// The same on 8 floats.
struct Gelu8 {
  __m256 g, gd;
};
template <bool kBf16Grade>
inline Gelu8 GeluAndDerivative8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256 u = _mm256_mul_ps(x, _mm256_set1_ps(0.70710678f));
  const __m256 au = _mm256_andnot_ps(sign, u);
  // t = 1 / (1 + p |u|): approximate reciprocal + one Newton step (~23 bits).
  const __m256 den = _mm256_fmadd_ps(_mm256_set1_ps(0.3275911f), au, one);
  __m256 t = _mm256_rcp_ps(den);
  if (!kBf16Grade) {
    t = _mm256_mul_ps(t, _mm256_fnmadd_ps(den, t, _mm256_set1_ps(2.0f)));
  }
  // e = exp(-u^2)
  const __m256 z = _mm256_mul_ps(_mm256_xor_ps(u, sign), u);
  const __m256 e = Exp8NonPositive<kBf16Grade>(z);
  __m256 poly = _mm256_fmadd_ps(_mm256_set1_ps(1.061405429f), t,
                                _mm256_set1_ps(-1.453152027f));
  poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(1.421413741f));
  poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(-0.284496736f));
  poly = _mm256_fmadd_ps(poly, t, _mm256_set1_ps(0.254829592f));
  poly = _mm256_mul_ps(poly, t);
  const __m256 erf_abs = _mm256_fnmadd_ps(poly, e, one);
  const __m256 erf = _mm256_or_ps(erf_abs, _mm256_and_ps(u, sign));
  const __m256 cdf =
      _mm256_mul_ps(_mm256_set1_ps(0.5f), _mm256_add_ps(one, erf));
  Gelu8 out;
  out.g = _mm256_mul_ps(x, cdf);
  out.gd = _mm256_fmadd_ps(_mm256_mul_ps(x, e), _mm256_set1_ps(0.39894228f),
                           cdf);
  return out;
}

#ifdef __AVX512BF16__
// The same on 16 floats (the AVX512_BF16 build): 1.6x the 8-lane loop's
// throughput on one core (docs/benchmarks.md, issue 33).
struct Gelu16 {
  __m512 g, gd;
};
template <bool kBf16Grade>
inline Gelu16 GeluAndDerivative16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 u = _mm512_mul_ps(x, _mm512_set1_ps(0.70710678f));
  const __m512 au = _mm512_abs_ps(u);
  // t = 1 / (1 + p |u|): 14-bit reciprocal, one Newton step for f32.
  const __m512 den = _mm512_fmadd_ps(_mm512_set1_ps(0.3275911f), au, one);
  __m512 t = _mm512_rcp14_ps(den);
  if (!kBf16Grade) {
    t = _mm512_mul_ps(t, _mm512_fnmadd_ps(den, t, _mm512_set1_ps(2.0f)));
  }
  const __m512 e = vmath::Exp16NonPositive<kBf16Grade>(
      _mm512_mul_ps(_mm512_sub_ps(_mm512_setzero_ps(), u), u));
  __m512 poly = _mm512_fmadd_ps(_mm512_set1_ps(1.061405429f), t,
                                _mm512_set1_ps(-1.453152027f));
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(1.421413741f));
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(-0.284496736f));
  poly = _mm512_fmadd_ps(poly, t, _mm512_set1_ps(0.254829592f));
  poly = _mm512_mul_ps(poly, t);
  const __m512 erf_abs = _mm512_fnmadd_ps(poly, e, one);
  // erf carries u's sign bit.
  const __m512i sign_bit = _mm512_set1_epi32(0x80000000);
  const __m512 erf = _mm512_castsi512_ps(_mm512_or_si512(
      _mm512_castps_si512(erf_abs),
      _mm512_and_si512(_mm512_castps_si512(u), sign_bit)));
  const __m512 cdf =
      _mm512_mul_ps(_mm512_set1_ps(0.5f), _mm512_add_ps(one, erf));
  Gelu16 out;
  out.g = _mm512_mul_ps(x, cdf);
  out.gd = _mm512_fmadd_ps(_mm512_mul_ps(x, e), _mm512_set1_ps(0.39894228f),
                           cdf);
  return out;
}
#endif  // __AVX512BF16__

// GELU and GELU' of one bf16 element, rounded back to bf16.
inline void GeluAndDerivative(uint16_t x, uint16_t* g, uint16_t* gd) {
  float a, b;
  GeluAndDerivative(LoadOne(&x), &a, &b);
  StoreOne(a, g);
  StoreOne(b, gd);
}

// Sixteen (AVX512_BF16 build) or eight at a time in parallel, then the
// tail; T is float or bf16 bits.
template <typename T>
void GeluWithDerivativeOf(const T* in, int64_t n, T* g, T* gd) {
  constexpr bool kBf16 = std::is_same_v<T, uint16_t>;
#ifdef __AVX512BF16__
  const int64_t n16 = n / 16 * 16;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n16; i += 16) {
    const Gelu16 r = GeluAndDerivative16<kBf16>(vmath::Load16(in + i));
    vmath::Store16(r.g, g + i);
    vmath::Store16(r.gd, gd + i);
  }
#else
  const int64_t n16 = 0;
#endif
  const int64_t n8 = n / 8 * 8;
#pragma omp parallel for schedule(static) if (n8 - n16 >= 4096)
  for (int64_t i = n16; i < n8; i += 8) {
    const Gelu8 r = GeluAndDerivative8<kBf16>(Load8(in + i));
    Store8(r.g, g + i);
    Store8(r.gd, gd + i);
  }
  for (int64_t i = n8; i < n; ++i) GeluAndDerivative(in[i], &g[i], &gd[i]);
}

void GeluWithDerivativeLoop(const void* h, dt type, int64_t n, void* g,
                            void* gd) {
  if (type == dt::bf16) {
    GeluWithDerivativeOf(static_cast<const uint16_t*>(h), n,
                         static_cast<uint16_t*>(g), static_cast<uint16_t*>(gd));
  } else {
    GeluWithDerivativeOf(static_cast<const float*>(h), n,
                         static_cast<float*>(g), static_cast<float*>(gd));
  }
}

// ---------------------------------------------------------------- softmax

// Exp of non-positive arguments at the accuracy the storage type needs.
template <typename T>
inline __m256 Exp8For(__m256 z) {
  return Exp8NonPositive<std::is_same_v<T, uint16_t>>(z);
}

template <typename T>
void CausalSoftmaxOf(float* s, int H, int rows, int n, int r0, T* p,
                     float* lse, int64_t lse_stride) {
  for (int64_t hr = 0; hr < int64_t{H} * rows; ++hr) {
    float* row = s + hr * n;
    T* out = p + hr * n;
    const int r = static_cast<int>(hr % rows);
    const int kept = r0 + r + 1;  // keys <= query
    const int kept8 = kept / 8 * 8;
    // Each pass: 16 lanes first where the build has them (kept16 keys),
    // then 8, then one at a time.
    int kept16 = 0;
    float mx = -std::numeric_limits<float>::infinity();
#ifdef __AVX512BF16__
    kept16 = kept / 16 * 16;
    __m512 vmax16 = _mm512_set1_ps(mx);
    for (int j = 0; j < kept16; j += 16) {
      vmax16 = _mm512_max_ps(vmax16, _mm512_loadu_ps(row + j));
    }
    mx = _mm512_reduce_max_ps(vmax16);
#endif
    __m256 vmax = _mm256_set1_ps(mx);
    for (int j = kept16; j < kept8; j += 8) {
      vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(row + j));
    }
    mx = HorizontalMax8(vmax);
    for (int j = kept8; j < kept; ++j) mx = std::max(mx, row[j]);
    // exp(s - max) in place, and its sum (a NaN score gives a NaN row).
    float sum = 0;
#ifdef __AVX512BF16__
    const __m512 mx16 = _mm512_set1_ps(mx);
    __m512 vsum16 = _mm512_setzero_ps();
    for (int j = 0; j < kept16; j += 16) {
      const __m512 e = vmath::Exp16NonPositive<std::is_same_v<T, uint16_t>>(
          _mm512_sub_ps(_mm512_loadu_ps(row + j), mx16));
      _mm512_storeu_ps(row + j, e);
      vsum16 = _mm512_add_ps(vsum16, e);
    }
    sum = _mm512_reduce_add_ps(vsum16);
#endif
    const __m256 mx8 = _mm256_set1_ps(mx);
    __m256 vsum = _mm256_setzero_ps();
    for (int j = kept16; j < kept8; j += 8) {
      const __m256 e =
          Exp8For<T>(_mm256_sub_ps(_mm256_loadu_ps(row + j), mx8));
      _mm256_storeu_ps(row + j, e);
      vsum = _mm256_add_ps(vsum, e);
    }
    sum += HorizontalSum8(vsum);
    for (int j = kept8; j < kept; ++j) {
      row[j] = ExpNonPositive(row[j] - mx);
      sum += row[j];
    }
    const float inv = 1.0f / sum;
#ifdef __AVX512BF16__
    const __m512 inv16 = _mm512_set1_ps(inv);
    for (int j = 0; j < kept16; j += 16) {
      vmath::Store16(_mm512_mul_ps(_mm512_loadu_ps(row + j), inv16), out + j);
    }
#endif
    const __m256 inv8 = _mm256_set1_ps(inv);
    for (int j = kept16; j < kept8; j += 8) {
      Store8(_mm256_mul_ps(_mm256_loadu_ps(row + j), inv8), out + j);
    }
    for (int j = kept8; j < kept; ++j) StoreOne(row[j] * inv, out + j);
    // All-zero bits are +0 in f32 and bf16.
    std::memset(out + kept, 0, sizeof(T) * (n - kept));
    if (lse != nullptr) lse[(hr / rows) * lse_stride + r] = mx + std::log(sum);
  }
}

template <typename T>
void CausalSoftmaxFromLseOf(const float* s, const float* lse,
                            int64_t lse_stride, int H, int rows, int n, int r0,
                            T* p) {
  for (int64_t hr = 0; hr < int64_t{H} * rows; ++hr) {
    const float* row = s + hr * n;
    T* out = p + hr * n;
    const int r = static_cast<int>(hr % rows);
    const int kept = r0 + r + 1;
    const int kept8 = kept / 8 * 8;
    const float l = lse[(hr / rows) * lse_stride + r];
    int kept16 = 0;
#ifdef __AVX512BF16__
    kept16 = kept / 16 * 16;
    const __m512 l16 = _mm512_set1_ps(l);
    for (int j = 0; j < kept16; j += 16) {
      vmath::Store16(vmath::Exp16NonPositive<std::is_same_v<T, uint16_t>>(
                         _mm512_sub_ps(_mm512_loadu_ps(row + j), l16)),
                     out + j);
    }
#endif
    const __m256 l8 = _mm256_set1_ps(l);
    for (int j = kept16; j < kept8; j += 8) {
      Store8(Exp8For<T>(_mm256_sub_ps(_mm256_loadu_ps(row + j), l8)), out + j);
    }
    // s - lse <= 0 up to rounding (the exps are accurate there too).
    for (int j = kept8; j < kept; ++j) {
      StoreOne(ExpNonPositive(row[j] - l), out + j);
    }
    std::memset(out + kept, 0, sizeof(T) * (n - kept));
  }
}

template <typename T>
void CausalSoftmaxBackwardOf(const T* p, const T* dp, int H, int rows, int n,
                             int r0, T* ds) {
  for (int64_t hr = 0; hr < int64_t{H} * rows; ++hr) {
    const T* pr = p + hr * n;
    const T* dpr = dp + hr * n;
    T* out = ds + hr * n;
    const int kept = r0 + static_cast<int>(hr % rows) + 1;
    const int kept8 = kept / 8 * 8;
    int kept16 = 0;
    float dot = 0;
#ifdef __AVX512BF16__
    kept16 = kept / 16 * 16;
    __m512 vdot16 = _mm512_setzero_ps();
    for (int j = 0; j < kept16; j += 16) {
      vdot16 = _mm512_fmadd_ps(vmath::Load16(pr + j), vmath::Load16(dpr + j),
                               vdot16);
    }
    dot = _mm512_reduce_add_ps(vdot16);
#endif
    __m256 vdot = _mm256_setzero_ps();
    for (int j = kept16; j < kept8; j += 8) {
      vdot = _mm256_fmadd_ps(Load8(pr + j), Load8(dpr + j), vdot);
    }
    dot += HorizontalSum8(vdot);
    for (int j = kept8; j < kept; ++j) {
      dot += LoadOne(pr + j) * LoadOne(dpr + j);
    }
#ifdef __AVX512BF16__
    const __m512 dot16 = _mm512_set1_ps(dot);
    for (int j = 0; j < kept16; j += 16) {
      vmath::Store16(_mm512_mul_ps(vmath::Load16(pr + j),
                                   _mm512_sub_ps(vmath::Load16(dpr + j), dot16)),
                     out + j);
    }
#endif
    const __m256 dot8 = _mm256_set1_ps(dot);
    for (int j = kept16; j < kept8; j += 8) {
      Store8(_mm256_mul_ps(Load8(pr + j), _mm256_sub_ps(Load8(dpr + j), dot8)),
             out + j);
    }
    for (int j = kept8; j < kept; ++j) {
      StoreOne(LoadOne(pr + j) * (LoadOne(dpr + j) - dot), out + j);
    }
    std::memset(out + kept, 0, sizeof(T) * (n - kept));
  }
}

void CausalSoftmaxLoop(float* s, int H, int rows, int n, int r0, dt cdt,
                      void* p, float* lse, int64_t lse_stride) {
  if (cdt == dt::bf16) {
    CausalSoftmaxOf(s, H, rows, n, r0, static_cast<uint16_t*>(p), lse,
                    lse_stride);
  } else {
    CausalSoftmaxOf(s, H, rows, n, r0, static_cast<float*>(p), lse,
                    lse_stride);
  }
}

void CausalSoftmaxFromLseLoop(const float* s, const float* lse,
                              int64_t lse_stride, int H, int rows, int n,
                              int r0, dt cdt, void* p) {
  if (cdt == dt::bf16) {
    CausalSoftmaxFromLseOf(s, lse, lse_stride, H, rows, n, r0,
                           static_cast<uint16_t*>(p));
  } else {
    CausalSoftmaxFromLseOf(s, lse, lse_stride, H, rows, n, r0,
                           static_cast<float*>(p));
  }
}

void CausalSoftmaxBackwardLoop(const void* p, const void* dp, int H, int rows,
                               int n, int r0, dt cdt, void* ds) {
  if (cdt == dt::bf16) {
    CausalSoftmaxBackwardOf(static_cast<const uint16_t*>(p),
                            static_cast<const uint16_t*>(dp), H, rows, n, r0,
                            static_cast<uint16_t*>(ds));
  } else {
    CausalSoftmaxBackwardOf(static_cast<const float*>(p),
                            static_cast<const float*>(dp), H, rows, n, r0,
                            static_cast<float*>(ds));
  }
}

// ---------------------------------------------------------------- bf16 rows

void ToBf16Loop(const float* in, int64_t n, uint16_t* out) {
  const int64_t n8 = n / 8 * 8;
  for (int64_t i = 0; i < n8; i += 8) Store8(Load8(in + i), out + i);
  for (int64_t i = n8; i < n; ++i) StoreOne(in[i], out + i);
}

// The table of this translation unit's build.
ElementwiseLoops MakeElementwiseLoops(const char* isa) {
  return ElementwiseLoops{
      .isa = isa,
      .gelu_with_derivative = GeluWithDerivativeLoop,
      .causal_softmax = CausalSoftmaxLoop,
      .causal_softmax_from_lse = CausalSoftmaxFromLseLoop,
      .causal_softmax_backward = CausalSoftmaxBackwardLoop,
      .to_bf16 = ToBf16Loop};
}

}  // namespace
}  // namespace gasloc::kernels

#endif  // GASLOC_WORKER_MODEL_ELEMENTWISE_LOOPS_INL_H_
