// Minimal leveled logging to stderr (Debian's Abseil 20220623 has no
// absl/log). One line per message, written with a single write() so lines
// from different threads never interleave:
//
//   I20261202 12:00:00.123456 worker/round.cc:42] round 7: H_i 100 -> 48 (slow link)
//
//   GASLOC_LOG(INFO) << "round " << r << " done";
//
// Thread safety: safe from any thread. The minimum level is process-wide
// (SetMinLogLevel, usually once in main()).
#ifndef GASLOC_COMMON_LOG_H_
#define GASLOC_COMMON_LOG_H_

#include <sstream>

namespace gasloc {

enum class LogLevel { kINFO = 0, kWARNING = 1, kERROR = 2 };

void SetMinLogLevel(LogLevel level);

class LogMessage {
 public:
  LogMessage(const char* file, int line, LogLevel level);
  ~LogMessage();
  LogMessage(const LogMessage&) = delete;
  LogMessage& operator=(const LogMessage&) = delete;
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace gasloc

#define GASLOC_LOG(level) \
  ::gasloc::LogMessage(__FILE__, __LINE__, ::gasloc::LogLevel::k##level).stream()

#endif  // GASLOC_COMMON_LOG_H_
