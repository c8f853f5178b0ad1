// The CPU line of gasloc-bench: model, logical CPUs and the ISA that
// decides the bf16 matmul speed (AMX-BF16 or not), from /proc/cpuinfo.
#include "bench/cpu_isa.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gasloc::bench {
namespace {

using ::testing::HasSubstr;

std::string CpuInfo(const std::string& model, const std::string& flags,
                    int processors) {
  std::string out;
  for (int i = 0; i < processors; ++i)
    out += "processor\t: " + std::to_string(i) + "\nmodel name\t: " + model +
           "\nflags\t\t: " + flags + "\n\n";
  return out;
}

TEST(CpuIsa, SaysWhetherTheCpuHasAmx) {
  const std::string sapphire = DescribeCpu(
      CpuInfo("Intel(R) Xeon(R) Platinum 8480+", "fpu avx2 avx512f avx512_bf16 amx_bf16 amx_tile", 4),
      "avx512_core_amx");
  EXPECT_EQ(sapphire,
            "cpu: Intel(R) Xeon(R) Platinum 8480+, 4 logical CPUs; ISA: "
            "AMX-BF16, AVX512-BF16; oneDNN uses avx512_core_amx");
  const std::string epyc =
      DescribeCpu(CpuInfo("AMD EPYC", "fpu avx2 avx512f avx512_bf16", 2), "");
  EXPECT_EQ(epyc,
            "cpu: AMD EPYC, 2 logical CPUs; ISA: AVX512-BF16, no AMX");
  EXPECT_THAT(DescribeCpu(CpuInfo("Old", "fpu avx2", 1), ""),
              HasSubstr("ISA: AVX2, no AMX"));
  EXPECT_THAT(DescribeCpu("", ""), HasSubstr("unknown model, 0 logical CPUs"));
}

TEST(CpuIsa, ThisMachineHasALine) {
  EXPECT_THAT(ThisCpu(), HasSubstr("logical CPUs; ISA: "));
}

}  // namespace
}  // namespace gasloc::bench
