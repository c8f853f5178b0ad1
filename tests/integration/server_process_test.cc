// The three binaries start, answer --help, and the coordinator serves the
// gRPC health check and exits cleanly on SIGTERM, as real processes.
#include <signal.h>
#include <sys/wait.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/health_check.h"
#include "tests/support/subprocess.h"

namespace gasloc::testing {
namespace {

using ::testing::HasSubstr;

class HelpTest : public ::testing::TestWithParam<const char*> {};

TEST_P(HelpTest, PrintsUsageAndExitsZero) {
  auto child = Subprocess::Start({BinaryPath(GetParam()), "--help"});
  ASSERT_TRUE(child.ok()) << child.status();
  auto line = child->WaitForLine("Usage:", absl::Seconds(10));
  ASSERT_TRUE(line.ok()) << line.status();
  auto flags = child->WaitForLine("--", absl::Seconds(10));
  EXPECT_TRUE(flags.ok()) << "no flag listed: " << flags.status();
  auto status = child->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 0);
}

INSTANTIATE_TEST_SUITE_P(Binaries, HelpTest,
                         ::testing::Values("gasloc-coordinator",
                                           "gasloc-worker", "gaslocctl"));

TEST(CoordinatorProcess, ServesHealthAndExitsCleanlyOnSigterm) {
  const std::string db = absl::StrCat(::testing::TempDir(), "/health.sqlite");
  auto child = Subprocess::Start({BinaryPath("gasloc-coordinator"),
                                  "--listen=127.0.0.1:0", "--insecure",
                                  absl::StrCat("--db=", db)});
  ASSERT_TRUE(child.ok()) << child.status();
  auto port = child->WaitForPort(absl::Seconds(20));
  ASSERT_TRUE(port.ok()) << port.status();
  auto health = CheckHealth(absl::StrCat("127.0.0.1:", *port));
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, 1) << "expected SERVING";

  child->Signal(SIGTERM);
  auto status = child->Wait(absl::Seconds(15));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_TRUE(WIFEXITED(*status)) << "killed by a signal instead of exiting";
  EXPECT_EQ(WEXITSTATUS(*status), 0);
}

}  // namespace
}  // namespace gasloc::testing
