#include "bench/cpu_isa.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "worker/model/elementwise_loops.h"
#include "worker/model/kernels.h"

namespace gasloc::bench {
namespace {

// The value of the first "key : value" line of `cpuinfo` with that key.
absl::string_view Field(absl::string_view cpuinfo, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(cpuinfo, '\n')) {
    std::vector<absl::string_view> kv = absl::StrSplit(line, absl::MaxSplits(':', 1));
    if (kv.size() == 2 && absl::StripAsciiWhitespace(kv[0]) == key)
      return absl::StripAsciiWhitespace(kv[1]);
  }
  return {};
}

}  // namespace

std::string DescribeCpu(absl::string_view cpuinfo, absl::string_view onednn_isa) {
  absl::string_view model = Field(cpuinfo, "model name");
  size_t logical = 0;
  for (absl::string_view line : absl::StrSplit(cpuinfo, '\n'))
    if (absl::StartsWith(line, "processor")) ++logical;
  std::vector<absl::string_view> flags =
      absl::StrSplit(Field(cpuinfo, "flags"), ' ', absl::SkipEmpty());
  auto has = [&](absl::string_view flag) {
    for (absl::string_view f : flags)
      if (f == flag) return true;
    return false;
  };
  std::vector<std::string> isa;
  if (has("amx_bf16")) isa.push_back("AMX-BF16");
  if (has("avx512_bf16")) isa.push_back("AVX512-BF16");
  else if (has("avx512f")) isa.push_back("AVX512");
  else if (has("avx2")) isa.push_back("AVX2");
  if (!has("amx_bf16")) isa.push_back("no AMX");
  std::string out = absl::StrCat(
      "cpu: ", model.empty() ? "unknown model" : model, ", ", logical,
      " logical CPUs; ISA: ", isa.empty() ? "unknown" : absl::StrJoin(isa, ", "));
  if (!onednn_isa.empty()) absl::StrAppend(&out, "; oneDNN uses ", onednn_isa);
  return out;
}

std::string ThisCpu() {
  std::ifstream in("/proc/cpuinfo");
  std::stringstream text;
  text << in.rdbuf();
  return absl::StrCat(
      DescribeCpu(text.str(), kernels::OneDnnIsaName()), "; bf16 ",
      kernels::Bf16ComputeName(kernels::Bf16ComputeMode()), "; element loops ",
      kernels::ActiveElementwiseLoops().isa);
}

}  // namespace gasloc::bench
