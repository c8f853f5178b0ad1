// The AVX2 build of the element loops, and the choice between the builds.
#include <cstdlib>
#include <cstring>

#include "worker/model/elementwise_loops.h"
#include "worker/model/elementwise_loops_inl.h"

namespace gasloc::kernels {
namespace {

bool CpuRunsAvx512Bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bf16");
}

}  // namespace

const ElementwiseLoops& Avx2ElementwiseLoops() {
  static const ElementwiseLoops loops = MakeElementwiseLoops("avx2");
  return loops;
}

// GASLOC_ELEMENTWISE_ISA=avx2: the process behaves as on an AVX2-only CPU
// (with ONEDNN_MAX_CPU_ISA=AVX2 for oneDNN), read once.
bool CappedToAvx2() {
  static const bool capped = [] {
    const char* forced = std::getenv("GASLOC_ELEMENTWISE_ISA");
    return forced != nullptr && std::strcmp(forced, "avx2") == 0;
  }();
  return capped;
}

std::vector<const ElementwiseLoops*> RunnableElementwiseLoops() {
  std::vector<const ElementwiseLoops*> builds = {&Avx2ElementwiseLoops()};
  if (!CappedToAvx2() && CpuRunsAvx512Bf16()) {
    builds.push_back(&Avx512Bf16ElementwiseLoops());
  }
  return builds;
}

const ElementwiseLoops& ActiveElementwiseLoops() {
  static const ElementwiseLoops* const active =
      RunnableElementwiseLoops().back();
  return *active;
}

}  // namespace gasloc::kernels
