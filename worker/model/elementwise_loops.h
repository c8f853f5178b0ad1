// The model's hand-written element loops (GELU with its derivative, the
// causal softmax, its log-sum-exp variant and its backward, f32 -> bf16
// rows) behind a table of
// function pointers, built twice from one source (elementwise_loops_inl.h):
// for the AVX2 baseline, and for CPUs with AVX512_BF16, where a bf16 store
// is one vcvtneps2bf16 instead of ten integer instructions (GELU 35% faster,
// docs/benchmarks.md) and GELU and the softmax loops take 16 lanes at a
// time. The build is picked once per process from CPUID;
// GASLOC_ELEMENTWISE_ISA=avx2 forces the baseline (the project's cap,
// used with oneDNN's ONEDNN_MAX_CPU_ISA=AVX2 to run a machine as AVX2-only). Both builds round to
// nearest even; the AVX512_BF16 one flushes bf16 denormals (|x| < 1.2e-38)
// to zero, as the instruction does.
//
// Thread safety: the tables are immutable; each loop runs OpenMP threads
// inside (GELU) or is single-threaded (softmax, called per sequence).
#ifndef GASLOC_WORKER_MODEL_ELEMENTWISE_LOOPS_H_
#define GASLOC_WORKER_MODEL_ELEMENTWISE_LOOPS_H_

#include <cstdint>
#include <vector>

#include "worker/model/kernels.h"

namespace gasloc::kernels {

// Arguments as the public wrappers GeluWithDerivative (kernels.h) and
// CausalSoftmax / CausalSoftmaxFromLse / CausalSoftmaxBackward (attention.h).
struct ElementwiseLoops {
  const char* isa;  // "avx2" or "avx512_bf16"
  void (*gelu_with_derivative)(const void* h, dt type, int64_t n, void* g,
                               void* gd);
  void (*causal_softmax)(float* s, int H, int rows, int n, int r0, dt cdt,
                         void* p, float* lse, int64_t lse_stride);
  void (*causal_softmax_from_lse)(const float* s, const float* lse,
                                  int64_t lse_stride, int H, int rows, int n,
                                  int r0, dt cdt, void* p);
  void (*causal_softmax_backward)(const void* p, const void* dp, int H,
                                  int rows, int n, int r0, dt cdt, void* ds);
  // out[i] = bf16(in[i]) for n values, single-threaded (LayerNorm rows,
  // the attention's dK / dV).
  void (*to_bf16)(const float* in, int64_t n, uint16_t* out);
};

// The build this process uses (chosen on first call): the last runnable.
const ElementwiseLoops& ActiveElementwiseLoops();
// Every build this process may run, the AVX2 baseline first (tests run
// each): only the baseline under GASLOC_ELEMENTWISE_ISA=avx2, which makes
// the process behave as on an AVX2-only CPU.
std::vector<const ElementwiseLoops*> RunnableElementwiseLoops();
// True when GASLOC_ELEMENTWISE_ISA=avx2 (read once per process).
bool CappedToAvx2();

// The builds, each in its own translation unit.
const ElementwiseLoops& Avx2ElementwiseLoops();
const ElementwiseLoops& Avx512Bf16ElementwiseLoops();

}  // namespace gasloc::kernels

#endif  // GASLOC_WORKER_MODEL_ELEMENTWISE_LOOPS_H_
