#include "tests/support/bench_run.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace gasloc::testing {

BenchRun RunBench(const std::string& args) {
  BenchRun run;
  const std::string command =
      std::string(GASLOC_BINARY_DIR) + "/bench/gasloc-bench " + args + " 2>&1";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char line[8192];
  while (std::fgets(line, sizeof(line), pipe) != nullptr) {
    run.output += line;
    if (line[0] == '{') run.json = line;
  }
  run.status = ::pclose(pipe);
  return run;
}

double JsonNumber(const std::string& json, const std::string& key) {
  const std::string needle = "\"" + key + "\": ";
  const size_t at = json.find(needle);
  if (at == std::string::npos) return NAN;
  return std::strtod(json.c_str() + at + needle.size(), nullptr);
}

}  // namespace gasloc::testing
