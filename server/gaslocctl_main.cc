// gaslocctl: command-line client of the coordinator.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "common/flags_setup.h"

ABSL_FLAG(std::string, coordinator, "localhost:7070",
          "Coordinator address (host:port).");
ABSL_FLAG(std::string, output, "table", "Output format: table or json.");

int main(int argc, char** argv) {
  auto args = gasloc::ParseFlagsOrExit(
      argc, argv,
      "gaslocctl: control a gasloc coordinator.\n\n"
      "Usage: gaslocctl [--coordinator=HOST:PORT] [--output=table|json] "
      "COMMAND\n"
      "  job start SPEC   start a job (SPEC: JSON or text-format JobSpec file)\n"
      "  job list         list jobs\n"
      "  job get ID       show one job\n"
      "  job watch ID     follow a job's progress until it ends\n"
      "  job stop ID      stop a job\n"
      "  workers          list workers");
  std::fprintf(stderr, "gaslocctl: commands are not yet available in this "
                       "build\n");
  return 2;
}
