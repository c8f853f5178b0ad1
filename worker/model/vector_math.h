// Eight-lane f32 helpers shared by the hand-written kernels (GELU, causal
// softmax, column sums): loads and stores for f32 and bf16 storage and an
// exp for non-positive arguments, scalar and AVX2 (the build's x86-64-v3
// baseline; the compiler does not vectorize floor and bit casts itself).
// With __AVX512BF16__ (the AVX512_BF16 build of elementwise_loops) a bf16
// store is one vcvtneps2bf16, and 16-lane versions serve the loops bound
// by arithmetic (GELU, the causal softmax). Everything has internal
// linkage (an unnamed namespace): copies compiled for different instruction sets must not be
// merged by the linker. Internal to worker/model; pure functions,
// thread-safe.
#ifndef GASLOC_WORKER_MODEL_VECTOR_MATH_H_
#define GASLOC_WORKER_MODEL_VECTOR_MATH_H_

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "worker/model/kernels.h"

namespace gasloc::kernels::vmath {
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

// The same on 8 lanes. kBf16Grade: a degree-4 polynomial and a one-constant
// reduction (relative error < 5e-5, against bf16's 3.9e-3 resolution; three
// FMAs fewer), for values stored in bf16.
template <bool kBf16Grade = false>
inline __m256 Exp8NonPositive(__m256 z) {
  const __m256 one = _mm256_set1_ps(1.0f);
  // max(-87, z): a NaN z stays NaN (maxps returns its second operand).
  z = _mm256_max_ps(_mm256_set1_ps(-87.0f), z);
  const __m256 k = _mm256_floor_ps(_mm256_fmadd_ps(
      z, _mm256_set1_ps(1.44269504f), _mm256_set1_ps(0.5f)));
  __m256 r, p;
  if constexpr (kBf16Grade) {
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693147181f), z);
    p = _mm256_set1_ps(1.0f / 24.0f);
  } else {
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693145752f), z);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(1.42860677e-6f), r);
    p = _mm256_set1_ps(1.0f / 720.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
  }
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, one);
  p = _mm256_fmadd_ps(p, r, one);
  const __m256i bits = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

#ifdef __AVX512BF16__
// The same on 16 lanes (the AVX512_BF16 build): floor by roundscale and
// 2^k by scalef, which equal the 8-lane version's floor and exponent bits
// for every k this range gives, so both round alike.
template <bool kBf16Grade = false>
inline __m512 Exp16NonPositive(__m512 z) {
  const __m512 one = _mm512_set1_ps(1.0f);
  z = _mm512_max_ps(_mm512_set1_ps(-87.0f), z);
  const __m512 k = _mm512_roundscale_ps(
      _mm512_fmadd_ps(z, _mm512_set1_ps(1.44269504f), _mm512_set1_ps(0.5f)),
      _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  __m512 r, p;
  if constexpr (kBf16Grade) {
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693147181f), z);
    p = _mm512_set1_ps(1.0f / 24.0f);
  } else {
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693145752f), z);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(1.42860677e-6f), r);
    p = _mm512_set1_ps(1.0f / 720.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  }
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, one);
  p = _mm512_fmadd_ps(p, r, one);
  return _mm512_scalef_ps(p, k);
}

// Sixteen elements to and from f32 lanes.
inline __m512 Load16(const float* p) { return _mm512_loadu_ps(p); }
inline void Store16(__m512 v, float* p) { _mm512_storeu_ps(p, v); }
inline __m512 Load16(const uint16_t* p) {
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}
inline void Store16(__m512 v, uint16_t* p) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p),
                      reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v)));
}
#endif  // __AVX512BF16__

// Sum of the 8 lanes.
inline float HorizontalSum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// Largest of the 8 lanes.
inline float HorizontalMax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// One element to and from f32 (bf16 as FloatToBf16 / Bf16ToFloat).
inline float LoadOne(const float* p) { return *p; }
inline void StoreOne(float v, float* p) { *p = v; }
inline float LoadOne(const uint16_t* p) { return Bf16ToFloat(*p); }
inline void StoreOne(float v, uint16_t* p) { *p = FloatToBf16(v); }

// Eight elements to and from f32 lanes, for f32 and bf16 storage.
inline __m256 Load8(const float* p) { return _mm256_loadu_ps(p); }
inline void Store8(__m256 v, float* p) { _mm256_storeu_ps(p, v); }

inline __m256 Load8(const uint16_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

// Round to nearest even, NaN kept quiet (as FloatToBf16; the AVX512_BF16
// instruction also flushes bf16 denormals to zero).
inline void Store8(__m256 v, uint16_t* p) {
#ifdef __AVX512BF16__
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                   reinterpret_cast<__m128i>(_mm256_cvtneps_pbh(v)));
#else
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
#endif
}

}  // namespace
}  // namespace gasloc::kernels::vmath

#endif  // GASLOC_WORKER_MODEL_VECTOR_MATH_H_
