#include "bench/bench_flags.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"

namespace gasloc::bench {
namespace {

bool IsKnown(const BenchFlags& flags, const std::string& key) {
  return flags.ints.count(key) || flags.doubles.count(key) ||
         flags.strings.count(key) || flags.bools.count(key);
}

}  // namespace

bool ParseBenchFlags(int argc, char** argv, const char* command,
                     const char* usage, const BenchFlags& flags) {
  auto fail = [&](const std::string& message) {
    std::fprintf(stderr, "%s: %s\n%s", command, message.c_str(), usage);
    return false;
  };
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h" || arg == "-help") {
      std::printf("%s", usage);
      std::exit(0);
    }
    // Abseil's spellings: --key, -key, --key=value, --key value.
    if (arg.size() < 2 || arg[0] != '-') {
      return fail("unexpected argument '" + arg + "'");
    }
    arg = arg.substr(arg[1] == '-' ? 2 : 1);
    const size_t eq = arg.find('=');
    std::string key = arg.substr(0, eq);
    std::replace(key.begin(), key.end(), '_', '-');  // not in the value
    const bool has_value = eq != std::string::npos;
    std::string value = has_value ? arg.substr(eq + 1) : "";

    if (auto bt = flags.bools.find(key); bt != flags.bools.end()) {
      // --flag, --flag=true|false|1|0 (never the next argument).
      if (!has_value) {
        *bt->second = true;
      } else if (!absl::SimpleAtob(value, bt->second)) {
        return fail("--" + key + " needs true or false, got '" + value + "'");
      }
      continue;
    }
    if (key.rfind("no", 0) == 0 && flags.bools.count(key.substr(2)) &&
        !has_value) {
      *flags.bools.at(key.substr(2)) = false;  // --noflag
      continue;
    }
    if (!IsKnown(flags, key)) return fail("unknown flag --" + key);
    if (!has_value) {
      if (i + 1 >= argc) return fail("--" + key + " needs a value");
      value = argv[++i];
    }
    if (auto it = flags.ints.find(key); it != flags.ints.end()) {
      if (!absl::SimpleAtoi(value, it->second))
        return fail("--" + key + " needs an integer, got '" + value + "'");
    } else if (auto dt = flags.doubles.find(key); dt != flags.doubles.end()) {
      if (!absl::SimpleAtod(value, dt->second))
        return fail("--" + key + " needs a number, got '" + value + "'");
    } else {
      *flags.strings.at(key) = value;
    }
  }
  return true;
}

}  // namespace gasloc::bench
