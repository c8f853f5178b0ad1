// The three binaries start, answer --help, refuse to run without
// credentials unless --insecure is said, and the coordinator serves the
// gRPC health check and exits cleanly on SIGTERM, as real processes.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

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

// Neither TLS, token files nor --insecure: a clear refusal naming the
// flags, before any port is opened (docs/security.md).
class NoCredentialsTest : public ::testing::TestWithParam<const char*> {};

TEST_P(NoCredentialsTest, RefusesToStartAndNamesTheFlags) {
  const std::string name = GetParam();
  const std::string dir = absl::StrCat(::testing::TempDir(), "/nocred-",
                                       getpid(), "-", name);
  const std::string err = absl::StrCat(dir, ".err");
  std::remove(err.c_str());
  std::vector<std::string> argv = {BinaryPath(name)};
  if (name == "gasloc-coordinator") {
    argv.push_back("--listen=127.0.0.1:0");
    argv.push_back(absl::StrCat("--db=", dir, ".sqlite"));
  } else if (name == "gasloc-worker") {
    argv.push_back("--coordinator=127.0.0.1:1");
    argv.push_back("--listen=127.0.0.1:0");
  } else {
    argv.push_back("--coordinator=127.0.0.1:1");
    argv.push_back("job");
    argv.push_back("list");
  }
  auto child = Subprocess::Start(argv, err);
  ASSERT_TRUE(child.ok()) << child.status();
  auto status = child->Wait(absl::Seconds(20));
  ASSERT_TRUE(status.ok()) << status.status();
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_NE(WEXITSTATUS(*status), 0);
  std::stringstream text;
  text << std::ifstream(err).rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("no credentials"));
  EXPECT_THAT(text.str(), HasSubstr("--insecure"));
  EXPECT_THAT(text.str(), HasSubstr("--tls_ca"));
  std::remove(err.c_str());
}

INSTANTIATE_TEST_SUITE_P(Binaries, NoCredentialsTest,
                         ::testing::Values("gasloc-coordinator",
                                           "gasloc-worker", "gaslocctl"));

// A credential file named on the command line that cannot be read is a
// refusal to start naming it, not a failure at first use: the coordinator
// read its --export_token_file only at the first `gaslocctl job export`
// (a Kubernetes Secret that did not project the key went unnoticed).
TEST(CoordinatorProcess, RefusesToStartWithAnUnreadableExportTokenFile) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/export-token-",
                                       getpid());
  const std::string tokens = absl::StrCat(dir, ".tokens");
  std::ofstream(tokens) << "0123456789abcdef0123456789abcdef\n";
  const std::string missing = absl::StrCat(dir, ".missing");
  const std::string err = absl::StrCat(dir, ".err");
  auto child = Subprocess::Start(
      {BinaryPath("gasloc-coordinator"), "--listen=127.0.0.1:0",
       absl::StrCat("--db=", dir, ".sqlite"),
       absl::StrCat("--operator_token_file=", tokens),
       absl::StrCat("--worker_token_file=", tokens),
       absl::StrCat("--export_token_file=", missing)},
      err);
  ASSERT_TRUE(child.ok()) << child.status();
  auto status = child->Wait(absl::Seconds(20));
  if (!status.ok()) child->Signal(SIGKILL);
  ASSERT_TRUE(status.ok()) << "still running: " << status.status();
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_NE(WEXITSTATUS(*status), 0);
  std::stringstream text;
  text << std::ifstream(err).rdbuf();
  EXPECT_THAT(text.str(), HasSubstr("--export_token_file"));
  EXPECT_THAT(text.str(), HasSubstr(missing));
}

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
