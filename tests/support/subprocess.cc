#include "tests/support/subprocess.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace gasloc::testing {

absl::StatusOr<Subprocess> Subprocess::Start(std::vector<std::string> argv,
                                             std::string stderr_path) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0)
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    if (!stderr_path.empty()) {
      int fd = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) dup2(fd, STDERR_FILENO);
    }
    // Children start with the default signal mask and dispositions.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  return Subprocess(pid, fds[0]);
}

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(other.pid_), stdout_fd_(other.stdout_fd_),
      buffer_(std::move(other.buffer_)) {
  other.pid_ = -1;
  other.stdout_fd_ = -1;
}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  std::swap(pid_, other.pid_);
  std::swap(stdout_fd_, other.stdout_fd_);
  std::swap(buffer_, other.buffer_);
  return *this;
}

Subprocess::~Subprocess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

absl::StatusOr<std::string> Subprocess::WaitForLine(const std::string& needle,
                                                    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    size_t newline;
    while ((newline = buffer_.find('\n')) != std::string::npos) {
      std::string line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      if (line.find(needle) != std::string::npos) return line;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration())
      return absl::DeadlineExceededError(
          absl::StrCat("no line containing '", needle, "' on stdout"));
    pollfd pfd{stdout_fd_, POLLIN, 0};
    int ready = poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (ready <= 0) continue;
    char chunk[4096];
    ssize_t n = read(stdout_fd_, chunk, sizeof(chunk));
    if (n <= 0)
      return absl::UnavailableError(
          absl::StrCat("stdout closed before a line containing '", needle,
                       "'"));
    buffer_.append(chunk, static_cast<size_t>(n));
  }
}

std::string Subprocess::ReadLines(absl::Duration per_line) {
  std::string text;
  while (true) {
    absl::StatusOr<std::string> line = WaitForLine("", per_line);
    if (!line.ok()) return text;
    text += *line + "\n";
  }
}

absl::StatusOr<int> Subprocess::WaitForPort(absl::Duration timeout) {
  auto line = WaitForLine("listening on port ", timeout);
  if (!line.ok()) return line.status();
  int port = 0;
  const std::string digits =
      line->substr(line->find("listening on port ") + 18);
  if (!absl::SimpleAtoi(digits, &port))
    return absl::InternalError(absl::StrCat("bad port line: ", *line));
  return port;
}

void Subprocess::Signal(int signal_number) {
  if (pid_ > 0) kill(pid_, signal_number);
}

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (pid_ > 0) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      pid_ = -1;
      return status;
    }
    if (absl::Now() > deadline)
      return absl::DeadlineExceededError("child did not exit in time");
    absl::SleepFor(absl::Milliseconds(5));
  }
  return absl::FailedPreconditionError("child already reaped");
}

std::string BinaryPath(const std::string& name) {
  return absl::StrCat(GASLOC_BINARY_DIR, "/server/", name);
}

int PickFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace gasloc::testing
