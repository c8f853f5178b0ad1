// A job's paths confined to the worker's roots
// (worker/daemon/path_confinement.h): outside paths, ".." and symbolic
// links that lead out are refused naming the field and the root.
#include "worker/daemon/path_confinement.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gasloc {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class PathConfinementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::path(::testing::TempDir()) /
            absl::StrCat("confine-", getpid(), "/root");
    fs::remove_all(root_.parent_path());
    fs::create_directories(root_ / "data");
    std::ofstream(root_ / "data/corpus.txt") << "text";
  }
  void TearDown() override { fs::remove_all(root_.parent_path()); }
  fs::path root_;
};

TEST_F(PathConfinementTest, InsideTheRootIsResolved) {
  auto inside = ConfinePath("data.corpus_path",
                            (root_ / "data/corpus.txt").string(),
                            root_.string());
  ASSERT_TRUE(inside.ok()) << inside.status();
  EXPECT_EQ(*inside, fs::canonical(root_ / "data/corpus.txt").string());
  // Relative paths are under the root; a directory not made yet is fine.
  auto relative = ConfinePath("checkpoint.directory", "ckpt/new",
                              root_.string());
  ASSERT_TRUE(relative.ok()) << relative.status();
  EXPECT_EQ(*relative, (fs::canonical(root_) / "ckpt/new").string());
}

TEST_F(PathConfinementTest, OutsideIsRefusedNamingFieldAndRoot) {
  for (const std::string& path :
       {std::string("/etc/shadow"), std::string("/root/.ssh/gasloc"),
        (root_ / "../elsewhere").string(), std::string("../../etc/passwd")}) {
    auto refused = ConfinePath("data.corpus_path", path, root_.string());
    ASSERT_FALSE(refused.ok()) << path;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(refused.status().message(), HasSubstr("data.corpus_path"));
    EXPECT_THAT(refused.status().message(), HasSubstr("outside"));
    EXPECT_THAT(refused.status().message(),
                HasSubstr(fs::canonical(root_).string()));
  }
  // A sibling whose name starts like the root is not inside it.
  fs::create_directories(root_.string() + "x");
  EXPECT_FALSE(
      ConfinePath("f", root_.string() + "x/file", root_.string()).ok());
}

TEST_F(PathConfinementTest, SymbolicLinkOutOfTheRootIsRefused) {
  fs::create_symlink("/etc", root_ / "data/etc");
  auto refused = ConfinePath("data.corpus_path",
                             (root_ / "data/etc/passwd").string(),
                             root_.string());
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(refused.status().message(), HasSubstr("/etc/passwd"));
}

TEST_F(PathConfinementTest, NoRootConfinesNothing) {
  EXPECT_TRUE(ConfinePath("data.corpus_path", "/etc/hostname", "").ok());
}

}  // namespace
}  // namespace gasloc
