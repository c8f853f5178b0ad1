// The CPU a benchmark ran on, printed first by every gasloc-bench
// subcommand: the machines vary between sessions (some have AMX-BF16,
// some only AVX512-BF16), so a figure means nothing without it.
//
//   cpu: AMD EPYC, 2 logical CPUs; ISA: AVX2, no AMX; oneDNN uses avx2;
//   bf16 emulated; element loops avx2
//
// ("bf16 native" where oneDNN has bf16 matmuls, kernels::Bf16ComputeMode;
// ONEDNN_MAX_CPU_ISA and GASLOC_ELEMENTWISE_ISA caps show here.)
//
// Thread safety: pure functions (DescribeCpu) and a read of /proc and
// oneDNN's state (ThisCpu); safe from any thread.
#ifndef GASLOC_BENCH_CPU_ISA_H_
#define GASLOC_BENCH_CPU_ISA_H_

#include <string>
#include "absl/strings/string_view.h"

namespace gasloc::bench {

// The description above from the text of /proc/cpuinfo and oneDNN's
// effective ISA name ("" = not known).
std::string DescribeCpu(absl::string_view cpuinfo, absl::string_view onednn_isa);

// DescribeCpu of this machine and process, with what bf16 does here and
// which build of the element loops runs.
std::string ThisCpu();

}  // namespace gasloc::bench

#endif  // GASLOC_BENCH_CPU_ISA_H_
