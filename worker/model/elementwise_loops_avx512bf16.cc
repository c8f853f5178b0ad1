// The AVX512_BF16 build of the element loops: this file alone is compiled
// with -mavx512f -mavx512vl -mavx512bf16 (CMakeLists.txt), and it is only
// called after CPUID said yes (ActiveElementwiseLoops).
#ifndef __AVX512BF16__
#error "compile this file with -mavx512f -mavx512vl -mavx512bf16"
#endif

#include "worker/model/elementwise_loops.h"
#include "worker/model/elementwise_loops_inl.h"

namespace gasloc::kernels {

const ElementwiseLoops& Avx512Bf16ElementwiseLoops() {
  static const ElementwiseLoops loops = MakeElementwiseLoops("avx512_bf16");
  return loops;
}

}  // namespace gasloc::kernels
