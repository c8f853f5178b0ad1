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

std::vector<const ElementwiseLoops*> RunnableElementwiseLoops() {
  std::vector<const ElementwiseLoops*> builds = {&Avx2ElementwiseLoops()};
  if (CpuRunsAvx512Bf16()) builds.push_back(&Avx512Bf16ElementwiseLoops());
  return builds;
}

const ElementwiseLoops& ActiveElementwiseLoops() {
  static const ElementwiseLoops* const active = [] {
    const char* forced = std::getenv("GASLOC_ELEMENTWISE_ISA");
    if (forced != nullptr && std::strcmp(forced, "avx2") == 0) {
      return &Avx2ElementwiseLoops();
    }
    return RunnableElementwiseLoops().back();
  }();
  return *active;
}

}  // namespace gasloc::kernels
