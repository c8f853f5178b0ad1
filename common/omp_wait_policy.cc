#include "common/omp_wait_policy.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace gasloc {

void EnsureOmpWaitPolicy(const char* policy, long spin_count) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  ::setenv("OMP_WAIT_POLICY", policy, /*overwrite=*/1);
  if (spin_count >= 0 && std::getenv("GOMP_SPINCOUNT") == nullptr) {
    ::setenv("GOMP_SPINCOUNT", std::to_string(spin_count).c_str(), 1);
  }
  // The original argv, NUL-separated, as the kernel recorded it.
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  const std::string cmdline((std::istreambuf_iterator<char>(in)),
                            std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  for (size_t start = 0; start < cmdline.size();) {
    const size_t end = cmdline.find('\0', start);
    args.push_back(cmdline.substr(start, end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  if (!args.empty()) ::execv("/proc/self/exe", argv.data());
  std::fprintf(stderr,
               "warning: could not re-execute with OMP_WAIT_POLICY=%s (%s); "
               "this process keeps the default wait policy\n",
               policy, std::strerror(errno));
}

}  // namespace gasloc
