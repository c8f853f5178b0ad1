// Every binary that reads a corpus refuses a bad one with a clear error
// naming the path, quickly: a missing file, an empty file, a folder with no
// text, a named pipe (which would block a plain open forever) and a device.
// Run as real processes, as a user would run them.
#include <sys/stat.h>
#include <sys/wait.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace gasloc::testing {
namespace {

namespace fs = std::filesystem;

class CorpusErrorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = absl::StrCat(::testing::TempDir(), "/corpus-errors-", getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_ + "/no_text/sub");
    std::ofstream(dir_ + "/empty.txt").close();
    ASSERT_EQ(::mkfifo((dir_ + "/pipe").c_str(), 0600), 0);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<std::string> BadCorpora() const {
    return {dir_ + "/missing.txt", dir_ + "/empty.txt", dir_ + "/no_text",
            dir_ + "/pipe", "/dev/null"};
  }

  // Runs `argv`, which must exit non-zero within 60 s with `corpus` named
  // on stderr.
  void ExpectClearError(std::vector<std::string> argv,
                        const std::string& corpus) {
    const std::string err = dir_ + "/stderr.txt";
    fs::remove(err);
    const std::string command = absl::StrJoin(argv, " ");
    auto child = Subprocess::Start(std::move(argv), err);
    ASSERT_TRUE(child.ok()) << child.status();
    auto status = child->Wait(absl::Seconds(60));
    ASSERT_TRUE(status.ok()) << command << ": " << status.status()
                             << " (hung on a bad corpus)";
    std::stringstream text;
    text << std::ifstream(err).rdbuf();
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) != 0)
        << command << " did not fail cleanly (wait status " << *status
        << "): " << text.str();
    EXPECT_NE(text.str().find(corpus), std::string::npos)
        << command << ": the error does not name " << corpus << ":\n"
        << text.str();
  }

  std::string dir_;
};

TEST_F(CorpusErrorsTest, GaslocTrainNamesTheBadCorpus) {
  for (const std::string& corpus : BadCorpora()) {
    ExpectClearError({BinaryPath("gasloc-train"), "train",
                      "--data=" + corpus, "--steps=1"},
                     corpus);
  }
}

TEST_F(CorpusErrorsTest, BenchmarksNameTheBadCorpus) {
  const std::string bench = absl::StrCat(GASLOC_BINARY_DIR, "/bench/gasloc-bench");
  for (const std::string& corpus : BadCorpora()) {
    // Space-separated values, as Abseil's flags accept them.
    ExpectClearError({bench, "train", "--data", corpus, "--steps", "1"},
                     corpus);
    ExpectClearError({bench, "metrics", "--data=" + corpus}, corpus);
    ExpectClearError({bench, "noninferiority", "--quick", "--corpus", corpus},
                     corpus);
  }
}

}  // namespace
}  // namespace gasloc::testing
