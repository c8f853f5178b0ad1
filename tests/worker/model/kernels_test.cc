// Every fast kernel (worker/model/kernels.h) against its plain-loop
// reference (worker/model/reference_kernels.h). fp32: max abs error within
// 1e-5 of the output's max magnitude (only summation order differs). bf16:
// inputs are rounded to bf16 for both sides, so the only differences are
// bf16 intermediates/outputs (relative precision 2^-8 = 0.4%): 2e-2 of the
// output's max magnitude.
#include "worker/model/kernels.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <stdexcept>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/attention.h"
#include "worker/model/elementwise_loops.h"
#include "worker/model/reference_kernels.h"

namespace gasloc::kernels {
namespace {

// Inputs and outputs in either precision.
struct Buf {
  Buf(size_t n, dt type) : type(type), f(n), b(type == dt::bf16 ? n : 0) {}
  void* data() { return type == dt::bf16 ? static_cast<void*>(b.data()) : f.data(); }
  // Sets values (rounded to bf16 when bf16: `f` keeps the rounded values).
  void Set(const std::vector<float>& v) {
    f = v;
    if (type == dt::bf16) {
      for (size_t i = 0; i < v.size(); ++i) {
        b[i] = FloatToBf16(v[i]);
        f[i] = Bf16ToFloat(b[i]);
      }
    }
  }
  std::vector<float> Get() const {
    if (type != dt::bf16) return f;
    std::vector<float> out(b.size());
    for (size_t i = 0; i < b.size(); ++i) out[i] = Bf16ToFloat(b[i]);
    return out;
  }
  dt type;
  std::vector<float> f;
  std::vector<uint16_t> b;
};

std::vector<float> Random(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

double RelErr(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double max_err = 0, max_ref = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    max_err = std::max(max_err, std::fabs(double{got[i]} - want[i]));
    max_ref = std::max(max_ref, std::fabs(double{want[i]}));
  }
  return max_err / max_ref;
}

double Tol(dt type) { return type == dt::bf16 ? 2e-2 : 1e-5; }

class KernelTest : public ::testing::TestWithParam<dt> {
 protected:
  DnnlEnv env_;
};

TEST_P(KernelTest, LinearMatchesReference) {
  const dt cdt = GetParam();
  const int M = 37, K = 48, N = 40;
  for (bool blocked : {false, true}) {
    SCOPED_TRACE(blocked ? "blocked weights" : "plain weights");
    Linear::Options o;
    o.M = M; o.K = K; o.N = N; o.cdt = cdt; o.y_type = dt::f32;
    o.dx_type = dt::f32; o.residual = true; o.blocked_weights = blocked;
    Linear linear(&env_, o);
    Buf x(M * K, cdt), w(N * K, cdt), dy(M * N, cdt);
    x.Set(Random(M * K, 1));
    w.Set(Random(N * K, 2, 0.1f));
    dy.Set(Random(M * N, 3));
    const void* w_fwd = w.data();
    const void* w_bwd = w.data();
    std::vector<char> fwd_copy, bwd_copy;
    if (blocked) {
      fwd_copy.resize(linear.fwd_weights_bytes());
      bwd_copy.resize(linear.bwd_weights_bytes());
      linear.PrepareWeights(w.f.data(), fwd_copy.data(), bwd_copy.data());
      w_fwd = fwd_copy.data();
      w_bwd = bwd_copy.data();
    }
    const std::vector<float> b = Random(N, 4), r = Random(M * N, 5);
    std::vector<float> y(M * N), dx(M * K), dw(N * K), db(N);
    linear.Forward(x.data(), w_fwd, b.data(), r.data(), y.data());
    linear.BackwardData(dy.data(), w_bwd, dx.data());
    linear.BackwardWeights(x.data(), dy.data(), dw.data(), db.data());
    std::vector<float> ry(M * N), rdx(M * K), rdw(N * K), rdb(N);
    ref::LinearForward(x.f.data(), w.f.data(), b.data(), M, K, N, ry.data());
    for (int i = 0; i < M * N; ++i) ry[i] += r[i];
    ref::LinearBackward(x.f.data(), w.f.data(), dy.f.data(), M, K, N,
                        rdx.data(), rdw.data(), rdb.data());
    // f32 outputs from bf16 inputs: only accumulation order differs.
    EXPECT_LT(RelErr(y, ry), 1e-5);
    EXPECT_LT(RelErr(dx, rdx), 1e-5);
    EXPECT_LT(RelErr(dw, rdw), 1e-5);
    EXPECT_LT(RelErr(db, rdb), 1e-5);
  }
}

TEST_P(KernelTest, LinearComputeTypeOutputsAndNoBias) {
  const dt cdt = GetParam();
  const int M = 16, K = 24, N = 20;
  Linear::Options o;
  o.M = M; o.K = K; o.N = N; o.cdt = cdt; o.y_type = cdt; o.dx_type = cdt;
  o.bias = false;
  Linear linear(&env_, o);
  Buf x(M * K, cdt), w(N * K, cdt), dy(M * N, cdt), y(M * N, cdt),
      dx(M * K, cdt);
  x.Set(Random(M * K, 6));
  w.Set(Random(N * K, 7, 0.2f));
  dy.Set(Random(M * N, 8));
  linear.Forward(x.data(), w.data(), nullptr, nullptr, y.data());
  linear.BackwardData(dy.data(), w.data(), dx.data());
  std::vector<float> ry(M * N), rdx(M * K);
  ref::LinearForward<float>(x.f.data(), w.f.data(), nullptr, M, K, N,
                            ry.data());
  ref::LinearBackward<float>(x.f.data(), w.f.data(), dy.f.data(), M, K, N,
                             rdx.data(), nullptr, nullptr);
  EXPECT_LT(RelErr(y.Get(), ry), Tol(cdt));
  EXPECT_LT(RelErr(dx.Get(), rdx), Tol(cdt));
}

TEST_P(KernelTest, GeluWithDerivativeMatchesReference) {
  // Includes large |x| (exp underflow) and x = 0.
  const dt type = GetParam();
  const int n = 1003;
  Buf x(n, type), g(n, type), gd(n, type);
  std::vector<float> v = Random(n, 21, 3.0f);
  v[0] = 0.0f; v[1] = 30.0f; v[2] = -30.0f; v[3] = -9.0f;
  x.Set(v);
  std::vector<float> rg(n), rgd(n), ones(n, 1.0f);
  ref::GeluForward(x.f.data(), n, rg.data());
  ref::GeluBackward(x.f.data(), ones.data(), n, rgd.data());
  // Every build this CPU runs (elementwise_loops.h), then the public entry.
  for (const ElementwiseLoops* loops : RunnableElementwiseLoops()) {
    SCOPED_TRACE(loops->isa);
    loops->gelu_with_derivative(x.data(), type, n, g.data(), gd.data());
    // fp32: the erf and exp approximations (~2e-7 absolute) only.
    EXPECT_LT(RelErr(g.Get(), rg), type == dt::bf16 ? 4e-3 : 1e-6);
    EXPECT_LT(RelErr(gd.Get(), rgd), type == dt::bf16 ? 4e-3 : 1e-6);
  }
  GeluWithDerivative(x.data(), type, n, g.data(), gd.data());
  EXPECT_LT(RelErr(g.Get(), rg), type == dt::bf16 ? 4e-3 : 1e-6);
}

TEST(ElementwiseLoopsTest, ToBf16RoundsLikeFloatToBf16) {
  // Ties, NaN, infinities, a vector part and a tail (n = 19).
  std::vector<float> in = Random(19, 31, 100.0f);
  in[0] = 1.00390625f;  // 1 + 2^-8: a tie, rounds to even (1.0)
  in[1] = 1.01171875f;  // 1 + 3 * 2^-8: a tie, rounds up
  in[2] = std::nanf("");
  in[3] = -std::numeric_limits<float>::infinity();
  in[17] = 3.0e38f;
  for (const ElementwiseLoops* loops : RunnableElementwiseLoops()) {
    SCOPED_TRACE(loops->isa);
    std::vector<uint16_t> out(in.size());
    loops->to_bf16(in.data(), static_cast<int64_t>(in.size()), out.data());
    for (size_t i = 0; i < in.size(); ++i) {
      if (std::isnan(in[i])) {
        EXPECT_TRUE(std::isnan(Bf16ToFloat(out[i]))) << i;
      } else {
        EXPECT_EQ(out[i], FloatToBf16(in[i])) << i << " " << in[i];
      }
    }
  }
}

TEST(ElementwiseLoopsTest, ActiveBuildIsTheBestThisCpuRuns) {
  const std::vector<const ElementwiseLoops*> builds = RunnableElementwiseLoops();
  ASSERT_FALSE(builds.empty());
  EXPECT_STREQ(builds.front()->isa, "avx2");
  EXPECT_EQ(&ActiveElementwiseLoops(), builds.back());
  // The project's cap: the process runs as on an AVX2-only CPU.
  if (CappedToAvx2()) {
    EXPECT_EQ(builds.size(), 1u);
  }
  std::printf("element loops: %s active, %zu build(s) runnable\n",
              ActiveElementwiseLoops().isa, builds.size());
}

// bf16 is native where oneDNN dispatches to AVX512_BF16 or AMX, widened
// where it dispatches to AVX2 (ONEDNN_MAX_CPU_ISA included); a widened
// bf16 matmul says so in its implementation string, an f32 one never.
TEST(Bf16ComputeTest, WidenedExactlyWhereOneDnnHasNoBf16Matmul) {
  const std::string isa = OneDnnIsaName();
  if (isa == "avx512_core_bf16" || isa == "avx512_core_amx") {
    EXPECT_EQ(Bf16ComputeMode(), Bf16Compute::kNative) << isa;
  }
  if (isa == "avx2" || isa == "avx2_vnni") {
    EXPECT_EQ(Bf16ComputeMode(), Bf16Compute::kWidened) << isa;
  }
  const bool widened = Bf16ComputeMode() == Bf16Compute::kWidened;
  DnnlEnv env;
  Linear::Options o;
  o.M = 8; o.K = 16; o.N = 16; o.cdt = dt::bf16; o.y_type = dt::bf16;
  o.blocked_weights = true;
  Linear linear(&env, o);
  EXPECT_EQ(linear.impl().find("widened") != std::string::npos, widened)
      << linear.impl();
  Linear::Options f = o;
  f.cdt = f.y_type = dt::f32;
  EXPECT_EQ(Linear(&env, f).impl().find("widened"), std::string::npos);
  std::printf("%s\n", ComputeSummary().c_str());
}

TEST_P(KernelTest, LinearBackwardDataMultipliesByTensor) {
  const dt cdt = GetParam();
  const int M = 19, K = 32, N = 24;
  Linear::Options o;
  o.M = M; o.K = K; o.N = N; o.cdt = cdt; o.y_type = cdt; o.dx_type = cdt;
  o.bwd_data_mul = true;
  o.blocked_weights = true;
  Linear linear(&env_, o);
  Buf w(N * K, cdt), dy(M * N, cdt), s(M * K, cdt), dx(M * K, cdt);
  w.Set(Random(N * K, 22, 0.2f));
  dy.Set(Random(M * N, 23));
  s.Set(Random(M * K, 24));
  std::vector<char> fwd_copy(linear.fwd_weights_bytes()),
      bwd_copy(linear.bwd_weights_bytes());
  linear.PrepareWeights(w.f.data(), fwd_copy.data(), bwd_copy.data());
  linear.BackwardData(dy.data(), bwd_copy.data(), dx.data(), s.data());
  std::vector<float> rdx(M * K);
  ref::LinearBackward<float>(nullptr, w.f.data(), dy.f.data(), M, K, N,
                             rdx.data(), nullptr, nullptr);
  for (int i = 0; i < M * K; ++i) rdx[i] *= s.f[i];
  EXPECT_LT(RelErr(dx.Get(), rdx), Tol(cdt));
}

TEST_P(KernelTest, CausalAttentionMatchesReference) {
  const dt cdt = GetParam();
  const int B = 3, T = 17, C = 24, H = 3;
  // One row block (T <= 128), and 4 row blocks of 5, 5, 5, 2 query rows
  // (upper tiles skipped, dK and dV accumulated over the blocks).
  for (int block_rows : {128, 5}) {
  SCOPED_TRACE(block_rows);
  CausalAttention attn(&env_, T, C, H, cdt, block_rows);
  EXPECT_EQ(attn.blocks(), (T + std::min(T, block_rows) - 1) / std::min(T, block_rows));
  HeadLayout heads(B, T, C, H, cdt);
  Buf qkv(B * T * 3 * C, cdt), dout(B * T * C, cdt), out(B * T * C, cdt),
      dqkv(B * T * 3 * C, cdt);
  Buf qkvh(B * T * 3 * C, cdt), douth(B * T * C, cdt), outh(B * T * C, cdt),
      dqkvh(B * T * 3 * C, cdt);
  qkv.Set(Random(B * T * 3 * C, 11));
  dout.Set(Random(B * T * C, 12));
  heads.qkv_to_heads.Run(qkv.data(), qkvh.data());
  std::vector<float> lse(B * H * T);
  attn.Forward(qkvh.data(), B, outh.data(), lse.data());
  heads.out_from_heads.Run(outh.data(), out.data());
  heads.dout_to_heads.Run(dout.data(), douth.data());
  attn.Backward(qkvh.data(), lse.data(), douth.data(), B, dqkvh.data());
  heads.dqkv_from_heads.Run(dqkvh.data(), dqkv.data());
  std::vector<float> rout(B * T * C), rdqkv(B * T * 3 * C);
  ref::AttentionForward(qkv.f.data(), B, T, C, H, rout.data());
  ref::AttentionBackward(qkv.f.data(), dout.f.data(), B, T, C, H,
                         rdqkv.data());
  EXPECT_LT(RelErr(out.Get(), rout), Tol(cdt));
  // bf16: dqkv goes through bf16 P, dP and dS, three roundings.
  EXPECT_LT(RelErr(dqkv.Get(), rdqkv), cdt == dt::bf16 ? 3e-2 : 1e-5);
  // Scratch: one row block of scores per head of one sequence (f32 + three
  // compute-type copies) and, in bf16, f32 dK and dV; independent of B.
  const int rows = std::min(T, block_rows);
  EXPECT_LE(attn.scratch_bytes(),
            size_t{H} * rows * T * (4 + 3 * DtSize(cdt)) +
                (cdt == dt::bf16 ? size_t{2} * T * C * 4 : 0) + 5 * 64);
  }
}

TEST_P(KernelTest, CausalSoftmaxMatchesReference) {
  const dt cdt = GetParam();
  // Two heads of a 12-row block at query offset 14 over n = 26 keys: rows
  // keep 15..26 keys (16- and 8-lane parts, tails) and zeros after.
  const int H = 2, rows = 12, n = 26, r0 = 14, total = H * rows;
  std::vector<float> scores = Random(total * n, 21);
  for (float& v : scores) v *= 4.0f;
  std::vector<float> want(total * n);
  ref::CausalSoftmax(scores.data(), total, rows, n, r0, want.data());
  for (const ElementwiseLoops* loops : RunnableElementwiseLoops()) {
    SCOPED_TRACE(loops->isa);
    std::vector<float> s = scores;
    Buf p(total * n, cdt);
    // lse with a head stride larger than the block (as the model's (H, T)).
    const int lse_stride = rows + 3;
    std::vector<float> lse(H * lse_stride, -1.0f);
    loops->causal_softmax(s.data(), H, rows, n, r0, cdt, p.data(), lse.data(),
                          lse_stride);
    const std::vector<float> got = p.Get();
    EXPECT_LT(RelErr(got, want), cdt == dt::bf16 ? 4e-3 : 1e-6);
    for (int i = 0; i < total; ++i) {
      for (int j = r0 + i % rows + 1; j < n; ++j) {
        EXPECT_EQ(got[i * n + j], 0.0f);
      }
      // lse = log sum_j exp(s_j) over the kept keys.
      double sum = 0;
      for (int j = 0; j <= r0 + i % rows; ++j) {
        sum += std::exp(double{scores[i * n + j]});
      }
      EXPECT_NEAR(lse[(i / rows) * lse_stride + i % rows], std::log(sum),
                  cdt == dt::bf16 ? 1e-4 : 1e-5);
    }
    // From the log-sum-exp alone: the same probabilities.
    Buf p_again(total * n, cdt);
    loops->causal_softmax_from_lse(scores.data(), lse.data(), lse_stride, H,
                                   rows, n, r0, cdt, p_again.data());
    EXPECT_LT(RelErr(p_again.Get(), want), cdt == dt::bf16 ? 4e-3 : 1e-6);
    // Backward from the kernel's own probabilities.
    Buf dp(total * n, cdt), ds(total * n, cdt);
    dp.Set(Random(total * n, 22));
    loops->causal_softmax_backward(p.data(), dp.data(), H, rows, n, r0, cdt,
                                   ds.data());
    std::vector<float> want_ds(total * n);
    ref::CausalSoftmaxBackward(got.data(), dp.f.data(), total, rows, n, r0,
                               want_ds.data());
    // fp32: a few ulps of the row sums; the sanitizer build contracts the
    // products differently and lands at 1.4e-6.
    EXPECT_LT(RelErr(ds.Get(), want_ds), cdt == dt::bf16 ? 8e-3 : 3e-6);
    // A NaN score poisons its row instead of vanishing.
    s = scores;
    s[3 * n + 2] = std::nanf("");
    loops->causal_softmax(s.data(), H, rows, n, r0, cdt, p.data(), nullptr, 0);
    EXPECT_TRUE(std::isnan(p.Get()[3 * n]));
  }
  // The public entry points use the active build.
  std::vector<float> s = scores;
  Buf p(total * n, cdt);
  CausalSoftmax(s.data(), H, rows, n, r0, cdt, p.data());
  EXPECT_LT(RelErr(p.Get(), want), cdt == dt::bf16 ? 4e-3 : 1e-6);
}

TEST_P(KernelTest, HeadLayoutPermutesAsDocumented) {
  const dt type = GetParam();
  const int B = 2, T = 5, C = 12, H = 3, hd = C / H;
  HeadLayout heads(B, T, C, H, type);
  std::vector<float> v(B * T * 3 * C);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 251);
  Buf qkv(v.size(), type), qkvh(v.size(), type), back(v.size(), type);
  qkv.Set(v);
  heads.qkv_to_heads.Run(qkv.data(), qkvh.data());
  heads.dqkv_from_heads.Run(qkvh.data(), back.data());
  const std::vector<float> h = qkvh.Get();
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int j = 0; j < 3; ++j)
        for (int hh = 0; hh < H; ++hh)
          for (int i = 0; i < hd; ++i) {
            const int row_major = ((b * T + t) * 3 + j) * C + hh * hd + i;
            const int head_major = (((b * 3 + j) * H + hh) * T + t) * hd + i;
            ASSERT_EQ(h[head_major], v[row_major]);
          }
  EXPECT_EQ(back.Get(), v);
  Buf out(B * T * C, type), outh(B * T * C, type), out2(B * T * C, type);
  out.Set(std::vector<float>(v.begin(), v.begin() + B * T * C));
  heads.dout_to_heads.Run(out.data(), outh.data());
  heads.out_from_heads.Run(outh.data(), out2.data());
  const std::vector<float> oh = outh.Get();
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int hh = 0; hh < H; ++hh)
        for (int i = 0; i < hd; ++i) {
          ASSERT_EQ(oh[((b * H + hh) * T + t) * hd + i],
                    v[(b * T + t) * C + hh * hd + i]);
        }
  EXPECT_EQ(out2.Get(), out.Get());
}

// Permute on 2 and 3 dimensions (the odometer's edge cases; HeadLayout
// above covers 4 and 5), against the index loop, and its refusals.
TEST(PermuteTest, MovesRowsOfAnyRankAndRefusesAStridedLastDimension) {
  // (A, B) rows of R floats to the index order (B, A).
  const int A = 3, Bn = 4, R = 2;
  std::vector<float> src(A * Bn * R), dst(A * Bn * R, -1.0f);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i);
  Permute three({A, Bn, R}, {Bn * R, R, 1}, {R, A * R, 1}, dt::f32);
  three.Run(src.data(), dst.data());
  for (int a = 0; a < A; ++a)
    for (int b = 0; b < Bn; ++b)
      for (int r = 0; r < R; ++r)
        ASSERT_EQ(dst[(b * A + a) * R + r], src[(a * Bn + b) * R + r]);
  // Two dimensions: rows of 3 bf16 values into a gapped destination.
  std::vector<uint16_t> in(4 * 3), out(4 * 5, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint16_t>(i + 1);
  Permute two({4, 3}, {3, 1}, {5, 1}, dt::bf16);
  two.Run(in.data(), out.data());
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 5; ++j)
      ASSERT_EQ(out[i * 5 + j], j < 3 ? in[i * 3 + j] : 0) << i << " " << j;
  EXPECT_THROW(Permute({2, 3}, {3, 1}, {1, 2}, dt::f32), std::invalid_argument);
  EXPECT_THROW(Permute({6}, {1}, {1}, dt::f32), std::invalid_argument);
  EXPECT_THROW(Permute({2, 3}, {3, 1}, {1}, dt::f32), std::invalid_argument);
}

TEST_P(KernelTest, ConvertRoundTrips) {
  const dt type = GetParam();
  const int n = 300;
  Convert to(&env_, n, dt::f32, type), back(&env_, n, type, dt::f32);
  Buf mid(n, type);
  const std::vector<float> x = Random(n, 13);
  std::vector<float> y(n);
  to.Run(x.data(), mid.data());
  back.Run(mid.data(), y.data());
  for (int i = 0; i < n; ++i) {
    const float want = type == dt::bf16 ? Bf16ToFloat(FloatToBf16(x[i])) : x[i];
    EXPECT_EQ(y[i], want) << i;
  }
}

TEST_P(KernelTest, ColumnSumMatchesReference) {
  const dt type = GetParam();
  // One thread (M < 64 rows each), and rows split over the threads; N with
  // a tail after the 8-wide loop.
  for (auto [M, N] : {std::pair{33, 19}, std::pair{300, 37}}) {
    SCOPED_TRACE(M);
    Buf x(M * N, type);
    x.Set(Random(M * N, 14));
    std::vector<float> out(N), want(N, 0.0f);
    ColumnSum(x.data(), type, M, N, out.data());
    for (int m = 0; m < M; ++m) {
      for (int n = 0; n < N; ++n) want[n] += x.f[m * N + n];
    }
    EXPECT_LT(RelErr(out, want), 1e-5);
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, KernelTest,
                         ::testing::Values(dt::f32, dt::bf16),
                         [](const auto& info) {
                           return info.param == dt::bf16 ? "bf16" : "fp32";
                         });

TEST_P(KernelTest, LayerNormMatchesReference) {
  // Output in the compute type; backward with and without the residual add
  // and the compute-type copy of dx.
  const dt type = GetParam();
  const int M = 21, C = 40;
  LayerNorm ln(M, C, 1e-5f, type);
  const std::vector<float> x = Random(M * C, 15, 3.0f), g = Random(C, 16),
                           b = Random(C, 17), dy = Random(M * C, 18),
                           res = Random(M * C, 19);
  Buf y(M * C, type), dx_copy(M * C, type);
  std::vector<float> mean(M), var(M), dx(M * C), dg(C), db(C);
  std::vector<float> dx_res(M * C), dg2(C), db2(C);
  ln.Forward(x.data(), g.data(), b.data(), y.data(), mean.data(), var.data());
  ln.Backward(x.data(), g.data(), mean.data(), var.data(), dy.data(), nullptr,
              dx.data(), nullptr, dg.data(), db.data());
  ln.Backward(x.data(), g.data(), mean.data(), var.data(), dy.data(),
              res.data(), dx_res.data(), dx_copy.data(), dg2.data(),
              db2.data());
  std::vector<float> ry(M * C), rmean(M), rvar(M), rdx(M * C), rdg(C), rdb(C);
  ref::LayerNormForward(x.data(), g.data(), b.data(), M, C, 1e-5f, ry.data(),
                        rmean.data(), rvar.data());
  ref::LayerNormBackward(x.data(), g.data(), rmean.data(), rvar.data(),
                         dy.data(), M, C, 1e-5f, rdx.data(), rdg.data(),
                         rdb.data());
  // bf16 output: only the final rounding of y differs (2^-8 relative).
  EXPECT_LT(RelErr(y.type == dt::bf16 ? y.Get() : y.f, ry),
            type == dt::bf16 ? 4e-3 : 1e-5);
  EXPECT_LT(RelErr(mean, rmean), 1e-5);
  EXPECT_LT(RelErr(var, rvar), 1e-5);
  EXPECT_LT(RelErr(dx, rdx), 1e-5);
  EXPECT_LT(RelErr(dg, rdg), 1e-5);
  EXPECT_LT(RelErr(db, rdb), 1e-5);
  std::vector<float> rdx_res(M * C);
  for (int i = 0; i < M * C; ++i) rdx_res[i] = rdx[i] + res[i];
  EXPECT_LT(RelErr(dx_res, rdx_res), 1e-5);
  EXPECT_LT(RelErr(dx_copy.type == dt::bf16 ? dx_copy.Get() : dx_copy.f,
                   rdx_res),
            type == dt::bf16 ? 4e-3 : 1e-5);
  EXPECT_EQ(dg2, dg);
  EXPECT_EQ(db2, db);
}

// The fp32 model's GELU (bf16 runs GeluWithDerivative, tested above).
TEST(KernelF32Test, GeluMatchesReference) {
  DnnlEnv env;
  const int n = 1000;
  Gelu gelu(&env, n);
  Buf x(n, dt::f32), dy(n, dt::f32), y(n, dt::f32), dx(n, dt::f32);
  x.Set(Random(n, 9, 2.0f));
  dy.Set(Random(n, 10));
  gelu.Forward(x.data(), y.data());
  gelu.Backward(x.data(), dy.data(), dx.data());
  std::vector<float> ry(n), rdx(n);
  ref::GeluForward(x.f.data(), n, ry.data());
  ref::GeluBackward(x.f.data(), dy.f.data(), n, rdx.data());
  EXPECT_LT(RelErr(y.Get(), ry), Tol(dt::f32));
  EXPECT_LT(RelErr(dx.Get(), rdx), Tol(dt::f32));
}

TEST(KernelF32Test, FusedCrossEntropyMatchesReference) {
  // The byte vocabulary (8-lane loops only) and V = 19 (a tail too).
  for (const int V : {256, 19}) {
    SCOPED_TRACE(V);
    const int B = 3, T = 7, M = B * T;
    std::vector<float> logits = Random(M * V, 19, 2.0f);
    std::vector<uint8_t> tokens(B * (T + 1));
    std::mt19937 gen(20);
    for (auto& t : tokens) t = static_cast<uint8_t>(gen() % V);
    std::vector<uint8_t> targets(M);
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        targets[b * T + t] = tokens[b * (T + 1) + t + 1];
      }
    }
    std::vector<float> rd(M * V);
    const float want =
        ref::CrossEntropy(logits.data(), targets.data(), M, V, rd.data());
    const double loss_only = FusedCrossEntropy(logits.data(), tokens.data() + 1,
                                               T + 1, B, T, V, false);
    const double loss = FusedCrossEntropy(logits.data(), tokens.data() + 1,
                                          T + 1, B, T, V, true);
    EXPECT_NEAR(loss_only, want, 1e-5 * want);
    EXPECT_NEAR(loss, want, 1e-5 * want);
    EXPECT_LT(RelErr(logits, rd), 1e-5);
    // A NaN logit makes the loss NaN (the trainer then refuses the step).
    logits = Random(M * V, 19, 2.0f);
    logits[5 * V + 3] = std::nanf("");
    EXPECT_TRUE(std::isnan(FusedCrossEntropy(
        logits.data(), tokens.data() + 1, T + 1, B, T, V, false)));
  }
}

TEST(KernelF32Test, EmbeddingMatchesReference) {
  const int B = 2, T = 5, C = 8, V = 256, context = 7;
  std::vector<uint8_t> tokens(B * (T + 1));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint8_t>(i * 37 % 4);
  const std::vector<float> tok = Random(V * C, 21), pos = Random(context * C, 22),
                           dx = Random(B * T * C, 23);
  std::vector<float> x(B * T * C), rx(B * T * C), dtok(V * C, 7.0f),
      dpos(context * C, 7.0f), rdtok(V * C), rdpos(context * C);
  EmbeddingForward(tokens.data(), T + 1, tok.data(), pos.data(), B, T, C, x.data());
  EmbeddingBackward(tokens.data(), T + 1, dx.data(), B, T, C, V, context,
                    dtok.data(), dpos.data());
  ref::EmbeddingForward(tokens.data(), T + 1, tok.data(), pos.data(), B, T, C,
                        rx.data());
  ref::EmbeddingBackward(tokens.data(), T + 1, dx.data(), B, T, C, V, context,
                         rdtok.data(), rdpos.data());
  EXPECT_LT(RelErr(x, rx), 1e-6);
  EXPECT_LT(RelErr(dtok, rdtok), 1e-6);
  EXPECT_LT(RelErr(dpos, rdpos), 1e-6);
}

}  // namespace
}  // namespace gasloc::kernels
