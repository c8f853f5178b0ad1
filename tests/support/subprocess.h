// Starts a real child process for multi-process tests: captures its stdout
// through a pipe (to read "listening on port N"), sends it signals, and
// waits for it with a timeout. The destructor SIGKILLs a child that is
// still running, so a failing test never leaves processes behind.
//
// Thread safety: one thread per Subprocess.
#ifndef GASLOC_TESTS_SUPPORT_SUBPROCESS_H_
#define GASLOC_TESTS_SUPPORT_SUBPROCESS_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace gasloc::testing {

class Subprocess {
 public:
  // argv[0] is the executable path. stderr goes to `stderr_path` if given
  // (appended), else it is inherited.
  static absl::StatusOr<Subprocess> Start(std::vector<std::string> argv,
                                          std::string stderr_path = "");
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  ~Subprocess();

  // Reads stdout until a line containing `needle` arrives; returns it.
  absl::StatusOr<std::string> WaitForLine(const std::string& needle,
                                          absl::Duration timeout);
  // Reads stdout to its end (or until a line takes longer than
  // `per_line`): the lines read, each ending in a newline.
  std::string ReadLines(absl::Duration per_line);
  // Convenience: waits for "listening on port N" and returns N.
  absl::StatusOr<int> WaitForPort(absl::Duration timeout);
  void Signal(int signal_number);
  // Waits for exit; returns the wait status (use WIFEXITED etc.), or
  // DEADLINE_EXCEEDED.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

 private:
  Subprocess(pid_t pid, int stdout_fd) : pid_(pid), stdout_fd_(stdout_fd) {}
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string buffer_;
};

// Path of a binary built next to the tests (CMake passes the build dir).
std::string BinaryPath(const std::string& name);

// A TCP port that was free a moment ago on 127.0.0.1.
int PickFreePort();

}  // namespace gasloc::testing

#endif  // GASLOC_TESTS_SUPPORT_SUBPROCESS_H_
