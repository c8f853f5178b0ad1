// gasloc-bench SUBCOMMAND [flags...]: dispatches to the registered
// benchmark subcommands (bench_registry.h). Every run prints the CPU and
// its ISA first (bench/cpu_isa.h); results end with one JSON line.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/bench_registry.h"
#include "bench/cpu_isa.h"

namespace gasloc::bench {
std::map<std::string, BenchCommand>& BenchCommands() {
  static auto* commands = new std::map<std::string, BenchCommand>();
  return *commands;
}
}  // namespace gasloc::bench

int main(int argc, char** argv) {
  auto& commands = gasloc::bench::BenchCommands();
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 ||
      commands.find(argv[1]) == commands.end()) {
    std::printf("Usage: gasloc-bench SUBCOMMAND [flags]  (SUBCOMMAND --help "
                "for its flags)\n\nSubcommands:\n");
    for (const auto& [name, command] : commands)
      std::printf("  %-16s %s\n", name.c_str(), command.help.c_str());
    const bool asked = argc >= 2 && std::strcmp(argv[1], "--help") == 0;
    if (argc >= 2 && !asked)
      std::fprintf(stderr, "gasloc-bench: unknown subcommand '%s'\n", argv[1]);
    return asked ? 0 : 2;
  }
  std::string program = std::string("gasloc-bench ") + argv[1];
  const bool help = argc >= 3 && (std::strcmp(argv[2], "--help") == 0 ||
                                  std::strcmp(argv[2], "-h") == 0);
  if (!help) {
    // On stderr: stdout stays the subcommand's (JSON lines for some).
    std::fprintf(stderr, "%s\n", gasloc::bench::ThisCpu().c_str());
  }
  std::vector<char*> args = {program.data()};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  return commands[argv[1]].run(static_cast<int>(args.size()), args.data());
}
