// TuneMallocForStreaming: buffers freed and allocated again stay warm (no
// page faults), where glibc's defaults hand them back to the kernel.
#include "common/malloc_tuning.h"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace gasloc {
namespace {

constexpr size_t kBufferBytes = 1 << 20;  // one exchange chunk
constexpr int kBuffersInFlight = 48;      // more than the 32 MiB default cap
constexpr int kRounds = 6;

// Sanitizers replace malloc: glibc's settings and page reuse do not apply.
constexpr bool kSanitizerAllocator =
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    true;
#else
    false;
#endif

long MinorFaults() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_minflt;
}

// Runs the exchange-like pattern (allocate kBuffersInFlight chunk buffers,
// write them, free them all; kRounds times) in a child process, tuned or
// not, and returns the page faults of rounds 2..kRounds per page written.
double FaultsPerPageAfterWarmUp(bool tune) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    if (tune && !TuneMallocForStreaming(/*compute_threads=*/2).empty()) _exit(3);
    std::vector<void*> buffers(kBuffersInFlight);
    long faults_after_first_round = 0;
    for (int round = 0; round < kRounds; ++round) {
      if (round == 1) faults_after_first_round = MinorFaults();
      for (void*& b : buffers) {
        b = std::malloc(kBufferBytes);
        std::memset(b, round + 1, kBufferBytes);
      }
      for (void* b : buffers) std::free(b);
    }
    const double pages = double(kRounds - 1) * kBuffersInFlight *
                         (kBufferBytes / 4096);
    const double per_page = (MinorFaults() - faults_after_first_round) / pages;
    _exit(write(fds[1], &per_page, sizeof(per_page)) == sizeof(per_page) ? 0
                                                                         : 4);
  }
  close(fds[1]);
  double per_page = -1;
  if (read(fds[0], &per_page, sizeof(per_page)) != sizeof(per_page))
    per_page = -1;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? per_page : -1;
}

TEST(MallocTuning, FreedChunkBuffersAreReusedWithoutPageFaults) {
  if (kSanitizerAllocator) GTEST_SKIP() << "sanitizer allocator, not glibc";
  const double per_page = FaultsPerPageAfterWarmUp(/*tune=*/true);
  ASSERT_GE(per_page, 0) << "child failed (glibc refused the settings?)";
  EXPECT_LT(per_page, 0.02);
  RecordProperty("faults_per_page_x1000", int(per_page * 1000));
}

// The reason for the tuning, and the proof that the test above can fail:
// with glibc's defaults the same pattern faults on (nearly) every page.
TEST(MallocTuning, GlibcDefaultsFaultInTheSameBuffersAgain) {
  if (kSanitizerAllocator) GTEST_SKIP() << "sanitizer allocator, not glibc";
  const double per_page = FaultsPerPageAfterWarmUp(/*tune=*/false);
  ASSERT_GE(per_page, 0);
  EXPECT_GT(per_page, 0.5);
  RecordProperty("faults_per_page_x1000", int(per_page * 1000));
}

}  // namespace
}  // namespace gasloc
