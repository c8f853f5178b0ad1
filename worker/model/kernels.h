// The fast kernels of the transformer: thin wrappers around oneDNN
// primitives (matmul, eltwise GELU, reorder) plus our own loops where fusing
// beats a primitive or oneDNN has none (LayerNorm fused with the residual
// add and the bf16 conversion, GELU with its derivative, embedding, fused
// cross-entropy, bias-gradient column sums). Attention and its layouts are
// in attention.h; the GELU and softmax loops are built per instruction set
// (elementwise_loops.h). Each object is built once for one shape and
// precision and reused every step; worker/model/reference_kernels.h holds
// the plain-loop reference of each, and tests/worker/model/kernels_test.cc
// compares them.
//
// Data types: `cdt` is the compute type of matmul inputs (f32, or bf16 stored
// as uint16_t); matmuls accumulate in f32; LayerNorm runs in f32.
//
// Thread safety: an object is used by one thread at a time (each call runs
// oneDNN / OpenMP threads inside). Objects sharing one DnnlEnv must be used
// from one thread.
#ifndef GASLOC_WORKER_MODEL_KERNELS_H_
#define GASLOC_WORKER_MODEL_KERNELS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace gasloc::kernels {

class WidenedOperand;  // bf16_widening.h

using dt = dnnl::memory::data_type;
using Dims = dnnl::memory::dims;

// The CPU engine and an in-order stream.
struct DnnlEnv {
  DnnlEnv() : engine(dnnl::engine::kind::cpu, 0), stream(engine) {}
  dnnl::engine engine;
  dnnl::stream stream;
};

size_t DtSize(dt type);
// bf16 <-> f32 scalar conversions (round to nearest even).
uint16_t FloatToBf16(float x);
float Bf16ToFloat(uint16_t x);
// x[i] = bf16 round-to-nearest-even of x[i], kept as f32, for n values.
void RoundToBf16InPlace(float* x, int64_t n);

// How this process computes a matmul with bf16 operands. kNative: oneDNN
// has a bf16 matmul on this CPU (AMX, AVX512_BF16, or its own AVX-512
// conversion). kWidened: it has none (AVX2-only CPUs, or ONEDNN_MAX_CPU_ISA
// capped below AVX-512), so Matmul widens bf16 operands to f32, runs the
// f32 kernel and narrows a bf16 output: the same bf16 storage and rounding,
// with f32 arithmetic (a product of two bf16 values is exact in f32, so the
// results match a native bf16 matmul up to the order of f32 additions).
// Probed once per process (oneDNN reads its ISA cap once).
enum class Bf16Compute { kNative, kWidened };
Bf16Compute Bf16ComputeMode();
// "native" or "emulated" (the metric label and log word).
const char* Bf16ComputeName(Bf16Compute mode);
// The instruction set oneDNN dispatches to in this process, e.g. "avx2",
// "avx512_core_bf16", "avx512_core_amx" (after ONEDNN_MAX_CPU_ISA).
std::string OneDnnIsaName();
// INTERNAL naming what failed (`operation`, with its shapes), the
// precision, this process's oneDNN ISA and oneDNN's message: every
// dnnl::error caught in the trainer becomes this, so a user reads that the
// CPU is the cause where it is one.
absl::Status OneDnnStatus(std::string_view operation, dt precision,
                          const dnnl::error& error);
// One line for logs and benchmarks: the ISA, the element loops' build and
// what bf16 does, e.g. "oneDNN isa avx2, element loops avx2, bf16
// emulated (f32 arithmetic on bf16-rounded operands)".
std::string ComputeSummary();

// A memory descriptor with explicit strides (in elements).
dnnl::memory::desc StridedMd(const Dims& dims, dt type, const Dims& strides);
// A dense row-major descriptor.
dnnl::memory::desc PlainMd(const Dims& dims, dt type);

// C = scale * (A B) [+ bias] [+ D] for 2-D or batched 3-D strided views.
// Reference: ref::LinearForward (a matmul is a linear layer with W = B^T).
class Matmul {
 public:
  struct Desc {
    dnnl::memory::desc a, b, c;
    bool bias = false;     // f32 (1, N) or (1, 1, N)
    bool add = false;      // binary add_alg of D with `add_md`
    dnnl::memory::desc add_md;
    dnnl::algorithm add_alg = dnnl::algorithm::binary_add;
    float scale = 1.0f;
    // The caller passes scratch memory to Bound (so that several threads
    // can run the primitive at once, each with its own scratchpad).
    bool user_scratchpad = false;
    // C += result (a sum post-op) instead of C = result.
    bool accumulate = false;
  };
  Matmul(DnnlEnv* env, const Desc& desc);
  void Run(const void* a, const void* b, void* c, const float* bias = nullptr,
           const void* add = nullptr);
  size_t scratchpad_bytes() const;
  // The primitive with memory objects created once, for many calls from
  // one thread: each Run only swaps data pointers (creating oneDNN memory
  // objects per call cost ~15% of the attention's time). Runs on `stream`
  // with `scratchpad` (scratchpad_bytes() long, fixed at binding) when the
  // Desc asked for user_scratchpad; no bias or add.
  class Bound {
   public:
    Bound(const Matmul& matmul, const dnnl::engine& engine, void* scratchpad);
    void Run(dnnl::stream& stream, const void* a, const void* b, void* c);

   private:
    const Matmul* matmul_;
    dnnl::memory a_, b_, c_;
    std::unordered_map<int, dnnl::memory> args_;
    std::vector<float> scratch_;  // widened operands (this thread's)
    std::unique_ptr<dnnl::memory> pad_;
  };
  // The weights layout the primitive runs with (b's, unless b was `any`).
  // When widened() and b was a bf16 `any`, this is an f32 blocked layout:
  // the caller writes bf16-rounded f32 values (Linear::PrepareWeights).
  const dnnl::memory::desc& weights_md() const { return weights_md_; }
  // The implementation oneDNN picked (e.g. "brg:avx512_core"), with
  // " (bf16 widened to f32)" when widened().
  std::string impl() const;
  // True when bf16 operands are widened to f32 (Bf16Compute::kWidened).
  bool widened() const { return widening_ != nullptr; }

 private:
  // The f32 copies of bf16 operands and the reorders that fill them.
  struct Widening;
  // Runs the primitive on `stream` with `args` (whose SRC, WEIGHTS, DST are
  // the f32 copies of widened operands): widens a, b (and c when
  // accumulating) into them first and narrows the f32 output into c after.
  void Execute(dnnl::stream& stream, const dnnl::memory& a,
               const dnnl::memory& b, const dnnl::memory& c,
               const std::unordered_map<int, dnnl::memory>& args,
               const dnnl::memory* pad) const;
  // `caller` itself, or its f32 twin at `scratch + at` when widened.
  static dnnl::memory RunMemory(const std::optional<WidenedOperand>& twin,
                                size_t at, const dnnl::memory& caller,
                                const dnnl::engine& engine, float* scratch);

  DnnlEnv* env_;
  Desc desc_;
  dnnl::matmul::primitive_desc pd_;
  dnnl::matmul prim_;
  dnnl::memory::desc bias_md_;
  dnnl::memory::desc weights_md_;
  std::shared_ptr<const Widening> widening_;  // null: native
  std::vector<float> scratch_;                // Run's f32 copies
};

// A linear layer y = x W^T + b on M rows with the (out, in) weight of the
// arena: forward, backward-data, backward-weights (+ bias gradient).
// Reference: ref::LinearForward / ref::LinearBackward.
class Linear {
 public:
  struct Options {
    int M = 0, K = 0, N = 0;
    dt cdt = dt::f32;        // x, W, dy
    dt y_type = dt::f32;     // forward output
    dt dx_type = dt::f32;    // backward-data output
    bool residual = false;   // forward adds an f32 (M, N) residual: y = xW^T+b+r
    // BackwardData multiplies dx elementwise by an (M, K) tensor in
    // dx_type (the GELU derivative): dx = (dy W) * s.
    bool bwd_data_mul = false;
    bool bias = true;        // forward adds an f32 (N) bias
    // Forward and BackwardData take W in the layouts oneDNN prefers
    // (format_tag::any, blocked), written by PrepareWeights once per step.
    bool blocked_weights = false;
  };
  Linear(DnnlEnv* env, const Options& options);
  // Blocked weights: writes the forward and backward-data copies of W from
  // the f32 (N, K) arena tensor (fwd_weights_bytes() / bwd_weights_bytes()).
  // With `stream`, runs on it (one stream per thread when several threads
  // prepare different layers at once); else on the env's stream.
  void PrepareWeights(const float* w, void* fwd, void* bwd,
                      dnnl::stream* stream = nullptr);
  size_t fwd_weights_bytes() const;
  size_t bwd_weights_bytes() const;
  // x (M, K) cdt; w (N, K) cdt, or the forward copy when blocked; b (N) f32;
  // residual (M, N) f32 or nullptr.
  void Forward(const void* x, const void* w, const float* b,
               const float* residual, void* y);
  // dx (M, K) = dy W (w: (N, K) cdt, or the backward copy when blocked),
  // times `mul` (M, K) elementwise when Options.bwd_data_mul.
  void BackwardData(const void* dy, const void* w, void* dx,
                    const void* mul = nullptr);
  // dw (N, K) = dy^T x (f32); db (N) = column sums of dy (f32), skipped
  // when db is nullptr.
  void BackwardWeights(const void* x, const void* dy, float* dw, float* db);
  const Options& options() const { return options_; }
  std::string impl() const;

 private:
  Options options_;
  Matmul fwd_, bwd_data_, bwd_weights_;
  DnnlEnv* env_;
  dnnl::memory::desc w_t_f32_, w_f32_;  // (K, N) view and (N, K) of the arena
  dnnl::reorder to_fwd_, to_bwd_;
};

// Row-wise LayerNorm of (M, C) f32 with gain and bias (eps given), written
// in `out_type` (f32, or bf16 straight from the f32 result: no f32 copy);
// saves mean and variance. The backward adds the residual stream's gradient
// and can write a copy of dx in `out_type` for the next bf16 matmul, so one
// pass replaces LayerNorm backward + residual add + conversion. Own loops
// (rows split statically over the OpenMP threads; dgain / dbias summed per
// thread, then in thread order: deterministic for a fixed thread count).
// Reference: ref::LayerNormForward / Backward.
class LayerNorm {
 public:
  LayerNorm(int M, int C, float eps, dt out_type = dt::f32);
  // y (M, C) in out_type.
  void Forward(const float* x, const float* gain, const float* bias, void* y,
               float* mean, float* var);
  // dx (M, C) = LayerNorm backward of dy + residual (residual may be
  // nullptr, or alias dx); dx_copy (optional) = dx in out_type; dgain (C),
  // dbias (C) overwritten.
  void Backward(const float* x, const float* gain, const float* mean,
                const float* var, const float* dy, const float* residual,
                float* dx, void* dx_copy, float* dgain, float* dbias);

 private:
  int M_, C_;
  float eps_;
  dt out_type_;
  std::vector<float> partial_;  // per thread: dgain (C), dbias (C)
};

// Exact (erf) GELU on n f32 elements (oneDNN eltwise; the fp32 model's).
// bf16 runs GeluWithDerivative below instead, which every CPU can run
// (oneDNN has no bf16 eltwise without AVX-512). Reference: ref::GeluForward
// / GeluBackward.
class Gelu {
 public:
  Gelu(DnnlEnv* env, int64_t n);
  void Forward(const void* x, void* y);
  void Backward(const void* x, const void* dy, void* dx);

 private:
  DnnlEnv* env_;
  dnnl::memory::desc md_;
  dnnl::eltwise_forward::primitive_desc fwd_pd_;
  dnnl::eltwise_forward fwd_;
  dnnl::eltwise_backward::primitive_desc bwd_pd_;
  dnnl::eltwise_backward bwd_;
};

// g = GELU(h) and gd = GELU'(h) (exact erf GELU) on n elements of type
// `type` in one pass, so the backward is a multiply by gd that the fc2
// backward-data matmul applies as a post-op (no separate GELU backward).
// erf from Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7) with a
// polynomial exp, both vectorized; computed in f32. Reference:
// ref::GeluForward / GeluBackward (dy = 1).
void GeluWithDerivative(const void* h, dt type, int64_t n, void* g, void* gd);

// Element type conversion of n elements: a oneDNN reorder, or where oneDNN
// has no bf16 jit reorder (Bf16Compute::kWidened) for f32 <-> bf16 the
// loops of bf16_widening.h (its generic reorder took 8 ms for 131,072
// values). Reference: FloatToBf16 / Bf16ToFloat.
class Convert {
 public:
  Convert(DnnlEnv* env, int64_t n, dt from, dt to);
  void Run(const void* src, void* dst);

 private:
  DnnlEnv* env_;
  int64_t n_;
  dt from_, to_;
  bool own_loop_;
  dnnl::memory::desc src_md_, dst_md_;
  dnnl::reorder prim_;  // when !own_loop_
};

// Fused softmax + cross-entropy over rows of logits (M, V) f32: returns the
// mean loss in nats and, if want_grad, overwrites logits in place with
// d loss / d logits = (softmax - onehot) / M. Reference: ref::CrossEntropy.
double FusedCrossEntropy(float* logits, const uint8_t* targets,
                         int target_stride, int B, int T, int V,
                         bool want_grad);

// x (B, T, C) = tok[tokens[b, t]] + pos[t] (tokens row stride given).
void EmbeddingForward(const uint8_t* tokens, int token_stride,
                      const float* tok, const float* pos, int B, int T, int C,
                      float* x);
// dtok (V, C), dpos (context, C) overwritten.
void EmbeddingBackward(const uint8_t* tokens, int token_stride,
                       const float* dx, int B, int T, int C, int V,
                       int context, float* dtok, float* dpos);

// out (N) = column sums of x (M, N) of type `type` (f32 or bf16), f32.
void ColumnSum(const void* x, dt type, int64_t M, int64_t N, float* out);

}  // namespace gasloc::kernels

#endif  // GASLOC_WORKER_MODEL_KERNELS_H_
