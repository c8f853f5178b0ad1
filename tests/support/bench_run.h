// Runs gasloc-bench from a test and reads its result: the whole output and
// the one JSON line every subcommand ends with.
//
// Thread safety: plain functions; each call runs its own child process.
#ifndef GASLOC_TESTS_SUPPORT_BENCH_RUN_H_
#define GASLOC_TESTS_SUPPORT_BENCH_RUN_H_

#include <string>

namespace gasloc::testing {

struct BenchRun {
  std::string output;  // stdout and stderr
  std::string json;    // the last line starting with '{'
  int status = -1;     // pclose status (0 = exited 0)
};

// `args` follow "gasloc-bench" on a shell command line.
BenchRun RunBench(const std::string& args);

// The number after "key": in a flat JSON line; NaN if the key is absent.
double JsonNumber(const std::string& json, const std::string& key);

}  // namespace gasloc::testing

#endif  // GASLOC_TESTS_SUPPORT_BENCH_RUN_H_
