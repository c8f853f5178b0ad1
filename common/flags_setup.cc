#include "common/flags_setup.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <iostream>

#include "absl/flags/internal/program_name.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "common/version.h"

namespace gasloc {

std::vector<std::string> ParseFlagsOrExit(int argc, char** argv,
                                          const std::string& usage,
                                          const std::string& help_filter) {
  absl::FlagsUsageConfig config;
  // --help lists the flags defined in gasloc's own sources.
  config.contains_help_flags = [](absl::string_view file) {
    return absl::StrContains(file, "server/") ||
           absl::StrContains(file, "bench/");
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  config.version_string = [] {
    return std::string("gasloc ") + kGaslocVersion + "\n";
  };
  config.normalize_filename = [](absl::string_view file) {
    const size_t pos = file.rfind("/server/");
    return std::string(pos == absl::string_view::npos ? file
                                                      : file.substr(pos + 1));
  };
  absl::SetFlagsUsageConfig(config);
  // Abseil prints "<program>: <usage>": drop our own "<program>: " prefix.
  std::string program = argv[0];
  program = program.substr(program.rfind('/') + 1);
  const std::string prefix = program + ": ";
  absl::SetProgramUsageMessage(usage.rfind(prefix, 0) == 0
                                   ? usage.substr(prefix.size())
                                   : usage);
  // --help / -h are answered here so they exit 0 (Abseil 20220623 exits 1)
  // and list only gasloc's own flags.
  absl::flags_internal::SetProgramInvocationName(argv[0]);
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      absl::flags_internal::FlagsHelp(
          std::cout, help_filter, absl::flags_internal::HelpFormat::kHumanReadable,
          absl::ProgramUsageMessage());
      std::cout << "\nRun with --helpfull for every flag, Abseil's included.\n";
      std::cout.flush();
      std::exit(0);
    }
  }
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  return {positional.begin(), positional.end()};
}

}  // namespace gasloc
