// Seed corpora (tests/fuzz/corpus/<target>/) are written by the targets
// themselves, next to the code that reads them, so a seed and its parser
// cannot drift apart: a target defines
//     void WriteSeeds(gasloc::fuzz::SeedWriter& seeds);
// and GASLOC_FUZZ_SEEDS() adds libFuzzer's LLVMFuzzerInitialize, which,
// when GASLOC_FUZZ_WRITE_SEEDS names a directory, writes every seed there
// and exits. It also keeps gasloc's INFO and WARNING logs out of the run
// (millions of "refused" lines), unless GASLOC_FUZZ_TRACE is set. ctest <target>_seeds_current checks that the committed corpus
// is what the target writes today (docs/fuzzing.md).
//
// Thread safety: used once, before fuzzing starts.
#ifndef GASLOC_TESTS_FUZZ_FUZZ_SEEDS_H_
#define GASLOC_TESTS_FUZZ_FUZZ_SEEDS_H_

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>

#include "common/log.h"

namespace gasloc::fuzz {

class SeedWriter {
 public:
  explicit SeedWriter(std::string dir) : dir_(std::move(dir)) {}
  // Writes `bytes` as the seed file `name` (no directory parts).
  void Add(const std::string& name, std::string_view bytes) {
    const std::string path = dir_ + "/" + name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) {
      std::fprintf(stderr, "cannot write seed %s\n", path.c_str());
      std::exit(1);
    }
  }

 private:
  std::string dir_;
};

void WriteSeeds(SeedWriter& seeds);

}  // namespace gasloc::fuzz

#define GASLOC_FUZZ_SEEDS()                                                \
  extern "C" int LLVMFuzzerInitialize(int*, char***) {                     \
    if (const char* dir = std::getenv("GASLOC_FUZZ_WRITE_SEEDS")) {        \
      gasloc::fuzz::SeedWriter writer(dir);                                \
      gasloc::fuzz::WriteSeeds(writer);                                    \
      std::exit(0);                                                        \
    }                                                                      \
    if (std::getenv("GASLOC_FUZZ_TRACE") == nullptr)                       \
      gasloc::SetMinLogLevel(gasloc::LogLevel::kERROR);                    \
    return 0;                                                              \
  }

#endif  // GASLOC_TESTS_FUZZ_FUZZ_SEEDS_H_
