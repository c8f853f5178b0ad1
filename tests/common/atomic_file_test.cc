#include "common/atomic_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace gasloc {
namespace {

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

int Files(const std::string& dir) {
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    (void)entry;
    ++files;
  }
  return files;
}

std::string Dir(const char* name) {
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/atomic_file-", getpid(), "-", name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(AtomicFile, ReplacesTheFileAndLeavesNoTemporary) {
  const std::string dir = Dir("replace");
  const std::string path = dir + "/f";
  ASSERT_TRUE(WriteFileAtomically(path, "old\n").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "new\n", 0644).ok());
  EXPECT_EQ(Read(path), "new\n");
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  EXPECT_EQ(Files(dir), 1);
}

TEST(AtomicFile, AFailedWriteKeepsTheOldFileAndRemovesItsTemporary) {
  const std::string dir = Dir("failed");
  const std::string path = dir + "/f";
  ASSERT_TRUE(WriteFileAtomically(path, "old\n").ok());
  absl::Status s =
      WriteFileAtomically(path, [](std::FILE*) { return false; });
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_NE(s.message().find("cannot write"), absl::string_view::npos) << s;
  EXPECT_EQ(Read(path), "old\n");
  EXPECT_EQ(Files(dir), 1);
}

TEST(AtomicFile, AMissingFolderIsAnError) {
  const std::string path = Dir("missing") + "/no/such/f";
  EXPECT_EQ(WriteFileAtomically(path, "x").code(),
            absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace gasloc
