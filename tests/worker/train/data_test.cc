#include "worker/train/data.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "tests/support/test_corpus.h"

namespace gasloc {
namespace {

constexpr const char* kShakespeare = gasloc::testing::kTinyShakespeare;

std::string TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             (name + "." + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(CorpusTest, SplitsTinyShakespeareAsTheDataReadmeSays) {
  auto corpus = Corpus::Open({.path = kShakespeare});
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  EXPECT_EQ((*corpus)->size(), 1115394u);
  EXPECT_EQ((*corpus)->train().size(), 1003854u);
  EXPECT_EQ((*corpus)->validation().size(), 111540u);
  const std::string head((*corpus)->train().begin(),
                         (*corpus)->train().begin() + 14);
  EXPECT_EQ(head, "First Citizen:");
  EXPECT_EQ((*corpus)->validation().data(),
            (*corpus)->train().data() + 1003854);
}

TEST(CorpusTest, DirectoryConcatenatesRegularFilesInNameOrder) {
  const std::string dir = TempDir("corpus_dir");
  WriteFile(dir + "/b", "BBBB");
  WriteFile(dir + "/a", "AAAA");
  WriteFile(dir + "/c", "");
  WriteFile(dir + "/d", "DD");
  std::filesystem::create_directories(dir + "/sub");
  WriteFile(dir + "/sub/z", "ZZZZ");
  auto corpus = Corpus::Open({.path = dir, .train_fraction = 0.5});
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  const auto bytes = (*corpus)->bytes();
  EXPECT_EQ(std::string(bytes.begin(), bytes.end()), "AAAABBBBDD");
  EXPECT_EQ((*corpus)->train().size(), 5u);
  EXPECT_EQ((*corpus)->validation().size(), 5u);
  std::filesystem::remove_all(dir);
}

TEST(CorpusTest, RefusesMissingEmptyAndTooSmallCorpora) {
  auto missing = Corpus::Open({.path = "/nonexistent/corpus.txt"});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("/nonexistent/corpus.txt"),
            std::string::npos);

  const std::string dir = TempDir("corpus_small");
  WriteFile(dir + "/empty", "");
  auto empty = Corpus::Open({.path = dir + "/empty"});
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("empty"), std::string::npos);

  WriteFile(dir + "/small", std::string(100, 'x'));
  auto small = Corpus::Open({.path = dir + "/small", .min_part_bytes = 20});
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find("too small"), std::string::npos)
      << small.status();
  EXPECT_TRUE(Corpus::Open({.path = dir + "/small", .min_part_bytes = 10}).ok());

  auto bad_fraction = Corpus::Open({.path = dir + "/small",
                                    .train_fraction = 1.0});
  EXPECT_EQ(bad_fraction.status().code(), absl::StatusCode::kInvalidArgument);
  std::filesystem::remove_all(dir);
}

// Opens `path` on another thread and waits at most 10 s: a corpus path
// that blocks the open (a named pipe with no writer) fails the test
// instead of hanging it. `unblock` is called on a timeout so the opening
// thread can finish.
absl::StatusOr<std::unique_ptr<Corpus>> OpenWithDeadline(
    const std::string& path, const std::function<void()>& unblock) {
  auto future = std::async(std::launch::async,
                           [path] { return Corpus::Open({.path = path}); });
  if (future.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "Corpus::Open(\"" << path << "\") hung for 10 s";
    unblock();
  }
  return future.get();
}

void ExpectRefusedNaming(const absl::StatusOr<std::unique_ptr<Corpus>>& got,
                         const std::string& path, const std::string& what) {
  ASSERT_FALSE(got.ok()) << path << " was accepted as a corpus";
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument)
      << got.status();
  EXPECT_NE(got.status().message().find(path), std::string::npos)
      << got.status();
  EXPECT_NE(got.status().message().find(what), std::string::npos)
      << got.status();
}

TEST(CorpusTest, NamedPipeIsAClearErrorNotAHang) {
  const std::string dir = TempDir("corpus_fifo");
  const std::string fifo = dir + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto unblock = [&fifo] {
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  };
  ExpectRefusedNaming(OpenWithDeadline(fifo, unblock), fifo, "named pipe");
  std::filesystem::remove_all(dir);
}

TEST(CorpusTest, DevicesAndEmptyPathsAreClearErrors) {
  ExpectRefusedNaming(Corpus::Open({.path = "/dev/null"}), "/dev/null",
                      "character device");
  auto empty_path = Corpus::Open({.path = ""});
  EXPECT_EQ(empty_path.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(empty_path.status().message().find("corpus path is empty"),
            std::string::npos);
}

TEST(CorpusTest, DirectoryWithoutRegularFilesIsAClearError) {
  const std::string dir = TempDir("corpus_no_text");
  std::filesystem::create_directories(dir + "/sub");
  ASSERT_EQ(::mkfifo((dir + "/pipe").c_str(), 0600), 0);
  ExpectRefusedNaming(OpenWithDeadline(dir, [] {}), dir,
                      "holds no regular files");
  std::filesystem::remove_all(dir);
}

TEST(CorpusTest, UnreadableFileIsAClearError) {
  if (::geteuid() == 0) {
    GTEST_SKIP() << "running as root: file permissions do not stop reads";
  }
  const std::string dir = TempDir("corpus_unreadable");
  WriteFile(dir + "/secret", std::string(100, 'x'));
  ASSERT_EQ(::chmod((dir + "/secret").c_str(), 0), 0);
  ExpectRefusedNaming(Corpus::Open({.path = dir + "/secret"}),
                      dir + "/secret", "Permission denied");
  std::filesystem::remove_all(dir);
}

std::vector<uint8_t> Counting(size_t n) {
  std::vector<uint8_t> data(n);
  for (size_t i = 0; i < n; ++i) data[i] = static_cast<uint8_t>(i * 7 + i / 256);
  return data;
}

TEST(WindowSamplerTest, IsAPureFunctionOfSeedRankAndDraw) {
  const auto data = Counting(10000);
  SamplerOptions options{.seed = 5, .rank = 1, .num_workers = 3, .window = 33};
  auto a = WindowSampler::Create(data, options);
  auto b = WindowSampler::Create(data, options);
  ASSERT_TRUE(a.ok() && b.ok());
  options.seed = 6;
  auto c = WindowSampler::Create(data, options);
  int differ = 0;
  for (uint64_t j = 0; j < 500; ++j) {
    EXPECT_EQ(a->WindowStart(j), b->WindowStart(j));
    EXPECT_LE(a->WindowStart(j) + 33, data.size());
    differ += a->WindowStart(j) != c->WindowStart(j);
  }
  EXPECT_GT(differ, 400);

  // NextBatch copies the windows of consecutive draws and moves the cursor;
  // restoring the cursor replays the same batch.
  std::vector<uint8_t> batch(4 * 33), again(4 * 33);
  a->set_cursor(10);
  a->NextBatch(4, batch.data());
  EXPECT_EQ(a->cursor(), 14u);
  for (int row = 0; row < 4; ++row) {
    EXPECT_TRUE(std::equal(batch.begin() + row * 33,
                           batch.begin() + (row + 1) * 33,
                           data.begin() + a->WindowStart(10 + row)));
  }
  a->set_cursor(10);
  a->NextBatch(4, again.data());
  EXPECT_EQ(batch, again);
}

TEST(WindowSamplerTest, WorkersOfOneJobReadDisjointWindowsWithinAnEpoch) {
  const auto data = Counting(50000);
  constexpr int kWorkers = 4, kWindow = 65;
  std::vector<WindowSampler> samplers;
  for (int rank = 0; rank < kWorkers; ++rank) {
    auto s = WindowSampler::Create(
        data, {.seed = 9, .rank = rank, .num_workers = kWorkers, .window = kWindow});
    ASSERT_TRUE(s.ok()) << s.status();
    samplers.push_back(*s);
  }
  const uint64_t slots = samplers[0].slots();
  ASSERT_EQ(slots, 50000u / kWindow);
  // One epoch = slots global draws = slots / kWorkers draws per worker.
  std::vector<size_t> starts;
  for (int rank = 0; rank < kWorkers; ++rank) {
    for (uint64_t j = 0; j < slots / kWorkers; ++j) {
      starts.push_back(samplers[rank].WindowStart(j));
    }
  }
  std::sort(starts.begin(), starts.end());
  for (size_t i = 1; i < starts.size(); ++i) {
    ASSERT_GE(starts[i] - starts[i - 1], static_cast<size_t>(kWindow))
        << "windows overlap at " << starts[i - 1] << " and " << starts[i];
  }
  // The same rank twice reads the same windows (sharing on purpose).
  EXPECT_EQ(samplers[2].WindowStart(3), samplers[2].WindowStart(3));
  // The next epoch visits the slots in another order.
  int moved = 0;
  for (uint64_t j = 0; j < slots / kWorkers; ++j) {
    moved += samplers[0].WindowStart(j) !=
             samplers[0].WindowStart(j + slots);
  }
  EXPECT_GT(moved, 0);
}

TEST(WindowSamplerTest, RefusesBadOptions) {
  const auto data = Counting(100);
  EXPECT_FALSE(WindowSampler::Create(data, {.rank = 2, .num_workers = 2}).ok());
  EXPECT_FALSE(WindowSampler::Create(data, {.window = 101}).ok());
  EXPECT_FALSE(WindowSampler::Create(data, {.window = 1}).ok());
}

TEST(EvalWindowsTest, EvenlySpacedFromStartToEnd) {
  auto starts = EvalWindowStarts(1000, 100, 4);
  ASSERT_TRUE(starts.ok());
  EXPECT_EQ(*starts, (std::vector<size_t>{0, 300, 600, 900}));
  auto one = EvalWindowStarts(1000, 100, 1);
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, std::vector<size_t>{0});
  EXPECT_FALSE(EvalWindowStarts(99, 100, 4).ok());
  EXPECT_FALSE(EvalWindowStarts(1000, 100, 0).ok());
}

}  // namespace
}  // namespace gasloc
