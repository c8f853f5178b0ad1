// Shared command-line set-up for gasloc's binaries: a usage message,
// `--help` that lists the binary's own flags (not Abseil's internals) and
// exits 0, and `--version`. Call once at the top of main().
//
// Thread safety: main() only.
#ifndef GASLOC_COMMON_FLAGS_SETUP_H_
#define GASLOC_COMMON_FLAGS_SETUP_H_

#include <string>
#include <vector>

namespace gasloc {

// Parses argv with Abseil flags and returns the positional arguments
// (argv[0] first). `usage` is printed above the flag list by --help, which
// lists the flags defined in files whose path contains `help_filter`.
std::vector<std::string> ParseFlagsOrExit(
    int argc, char** argv, const std::string& usage,
    const std::string& help_filter = "server/");

}  // namespace gasloc

#endif  // GASLOC_COMMON_FLAGS_SETUP_H_
