#include "common/log.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gasloc {
namespace {
std::atomic<int> min_level{0};
constexpr char kLevelChar[] = {'I', 'W', 'E'};

const char* Basename(const char* file) {
  // Keep the path from the project root (e.g. "worker/round.cc").
  const char* roots[] = {"/common/", "/worker/", "/coordinator/", "/server/",
                         "/tests/", "/bench/"};
  for (const char* root : roots) {
    if (const char* p = std::strstr(file, root)) return p + 1;
  }
  const char* slash = std::strrchr(file, '/');
  return slash ? slash + 1 : file;
}
}  // namespace

void SetMinLogLevel(LogLevel level) { min_level = static_cast<int>(level); }

LogMessage::LogMessage(const char* file, int line, LogLevel level)
    : level_(level) {
  stream_ << kLevelChar[static_cast<int>(level)]
          << absl::FormatTime("%Y%m%d %H:%M:%E6S", absl::Now(),
                              absl::UTCTimeZone())
          << ' ' << Basename(file) << ':' << line << "] ";
}

LogMessage::~LogMessage() {
  if (static_cast<int>(level_) < min_level.load()) return;
  stream_ << '\n';
  const std::string line = stream_.str();
  size_t done = 0;
  while (done < line.size()) {
    ssize_t n = ::write(STDERR_FILENO, line.data() + done, line.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
}

}  // namespace gasloc
