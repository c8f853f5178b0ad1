// gasloc-bench cpu: what this machine and process compute with, for a user
// checking a machine before it joins a job (docs/training.md): the CPU
// line every subcommand prints first, then which precision a job's
// PRECISION_BF16 and PRECISION_FP32 actually compute here, and one JSON
// line. Honours ONEDNN_MAX_CPU_ISA and GASLOC_ELEMENTWISE_ISA, so it also
// shows what a capped run does.
#include <cstdio>
#include <string>

#include "absl/strings/str_format.h"
#include "bench/bench_registry.h"
#include "worker/model/elementwise_loops.h"
#include "worker/model/kernels.h"

namespace gasloc::bench {
namespace {

int RunCpuBench(int argc, char** argv) {
  if (argc > 1) {
    std::fprintf(stderr, "Usage: gasloc-bench cpu (no flags)\n");
    return 2;
  }
  const kernels::Bf16Compute mode = kernels::Bf16ComputeMode();
  std::printf("%s\n", kernels::ComputeSummary().c_str());
  std::printf("PRECISION_FP32 computes fp32; PRECISION_BF16 computes %s\n",
              mode == kernels::Bf16Compute::kNative
                  ? "native bf16 (oneDNN bf16 matmuls)"
                  : "emulated bf16 (bf16 storage and rounding, f32 matmuls)");
  std::printf("%s\n",
              absl::StrFormat(
                  "{\"onednn_isa\": \"%s\", \"elementwise_isa\": \"%s\", "
                  "\"bf16\": \"%s\"}",
                  kernels::OneDnnIsaName(),
                  kernels::ActiveElementwiseLoops().isa,
                  kernels::Bf16ComputeName(mode))
                  .c_str());
  return 0;
}

}  // namespace

GASLOC_BENCH_COMMAND(cpu, "this CPU's ISA and what fp32 / bf16 compute here",
                     RunCpuBench);

}  // namespace gasloc::bench
