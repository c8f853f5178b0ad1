// Flag parsing for every gasloc-bench subcommand, with Abseil's syntax so
// that the benchmarks read their flags like the other binaries do (Abseil
// flags themselves are process-global and would collide between
// subcommands): --key=value or --key value (one or two dashes); a boolean
// is --flag, --flag=true|false or --noflag (never the next argument).
// Underscores in keys read as dashes; --help / -h prints the usage and
// exits 0; anything else unknown or malformed is an error naming it.
//
// Thread safety: call from main's thread (prints, may exit).
#ifndef GASLOC_BENCH_BENCH_FLAGS_H_
#define GASLOC_BENCH_BENCH_FLAGS_H_

#include <map>
#include <string>

namespace gasloc::bench {

struct BenchFlags {
  std::map<std::string, int*> ints;
  std::map<std::string, double*> doubles;
  std::map<std::string, std::string*> strings;
  std::map<std::string, bool*> bools;  // --flag sets true
};

// `command`: e.g. "gasloc-bench train" (for messages). Returns false after
// printing the error and the usage to stderr.
bool ParseBenchFlags(int argc, char** argv, const char* command,
                     const char* usage, const BenchFlags& flags);

}  // namespace gasloc::bench

#endif  // GASLOC_BENCH_BENCH_FLAGS_H_
