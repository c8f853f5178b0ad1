#include "bench/bench_flags.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"

namespace gasloc::bench {

bool ParseBenchFlags(int argc, char** argv, const char* command,
                     const char* usage, const BenchFlags& flags) {
  auto fail = [&](const std::string& message) {
    std::fprintf(stderr, "%s: %s\n%s", command, message.c_str(), usage);
    return false;
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf("%s", usage);
      std::exit(0);
    }
    if (arg.rfind("--", 0) != 0) return fail("unexpected argument '" + arg + "'");
    arg = arg.substr(2);
    const size_t eq = arg.find('=');
    std::string key = arg.substr(0, eq);
    std::replace(key.begin(), key.end(), '_', '-');  // not in the value
    const std::string value = eq == std::string::npos ? "" : arg.substr(eq + 1);
    if (auto it = flags.ints.find(key); it != flags.ints.end()) {
      if (!absl::SimpleAtoi(value, it->second))
        return fail("--" + key + " needs an integer, got '" + value + "'");
    } else if (auto dt = flags.doubles.find(key); dt != flags.doubles.end()) {
      if (!absl::SimpleAtod(value, dt->second))
        return fail("--" + key + " needs a number, got '" + value + "'");
    } else if (auto st = flags.strings.find(key); st != flags.strings.end()) {
      *st->second = value;
    } else if (auto bt = flags.bools.find(key); bt != flags.bools.end()) {
      *bt->second = true;
    } else {
      return fail("unknown flag --" + key);
    }
  }
  return true;
}

}  // namespace gasloc::bench
