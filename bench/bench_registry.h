// gasloc-bench subcommands register themselves here:
//
//   GASLOC_BENCH_COMMAND(train, "trainer throughput vs PyTorch", RunTrainBench);
//
// where RunTrainBench(int argc, char** argv) gets the arguments after the
// subcommand name (argv[0] = "gasloc-bench train") and returns an exit code.
// Registration happens during static initialisation, before main().
#ifndef GASLOC_BENCH_BENCH_REGISTRY_H_
#define GASLOC_BENCH_BENCH_REGISTRY_H_

#include <functional>
#include <map>
#include <string>

namespace gasloc::bench {

using BenchFunction = std::function<int(int argc, char** argv)>;

struct BenchCommand {
  std::string help;
  BenchFunction run;
};

std::map<std::string, BenchCommand>& BenchCommands();

struct BenchRegistrar {
  BenchRegistrar(const std::string& name, const std::string& help,
                 BenchFunction run) {
    BenchCommands()[name] = {help, std::move(run)};
  }
};

}  // namespace gasloc::bench

#define GASLOC_BENCH_COMMAND(name, help, fn) \
  static ::gasloc::bench::BenchRegistrar gasloc_bench_registrar_##name(#name, help, fn)

#endif  // GASLOC_BENCH_BENCH_REGISTRY_H_
