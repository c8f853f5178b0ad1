#include "worker/train/stage_threads.h"

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace gasloc {
namespace {

// Every Run calls fn(k) once per stage, each stage always on the same
// thread, the stages on distinct threads, at the same time (a stage can
// wait for another inside one Run), and Run returns only after all.
TEST(StageThreadsTest, RunsEachStageOnItsOwnThreadConcurrently) {
  StageThreads threads(3);
  ASSERT_EQ(threads.size(), 3);
  std::vector<std::thread::id> first(3), again(3);
  std::atomic<int> arrived{0};
  threads.Run([&](int k) {
    first[k] = std::this_thread::get_id();
    ++arrived;
    while (arrived.load() < 3) std::this_thread::yield();  // needs all 3 at once
  });
  EXPECT_EQ(arrived.load(), 3);
  EXPECT_EQ(std::set<std::thread::id>(first.begin(), first.end()).size(), 3u);
  EXPECT_EQ(first[0] == std::this_thread::get_id(), false);
  for (int round = 0; round < 50; ++round) {
    std::vector<int> calls(3, 0);
    threads.Run([&](int k) {
      again[k] = std::this_thread::get_id();
      ++calls[k];
    });
    EXPECT_EQ(calls, std::vector<int>(3, 1));
    EXPECT_EQ(again, first);
  }
}

}  // namespace
}  // namespace gasloc
