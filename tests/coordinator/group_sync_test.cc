// Group commit (coordinator/group_sync.h) and the coordinator's use of it:
// a call returns only after a sync that covers its commit, one sync serves
// the calls that committed while the previous sync ran, and a failed sync
// fails that call and every later one.
#include "coordinator/group_sync.h"

#include <atomic>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/recording_coordinator.h"

namespace gasloc::coordinator {
namespace {

using ::testing::HasSubstr;

TEST(GroupSync, NothingCommittedNeedsNoSync) {
  GroupSync sync([] { return absl::OkStatus(); });
  EXPECT_TRUE(sync.AwaitDurable().ok());
  EXPECT_EQ(sync.syncs(), 0u);
}

TEST(GroupSync, OneSyncServesTheCommitsMadeWhileThePreviousRan) {
  absl::Notification first_started, release_first;
  std::atomic<int> calls{0};
  GroupSync sync([&] {
    if (calls.fetch_add(1) == 0) {
      first_started.Notify();
      release_first.WaitForNotification();
    }
    return absl::OkStatus();
  });
  sync.Committed();
  std::thread first([&] { EXPECT_TRUE(sync.AwaitDurable().ok()); });
  first_started.WaitForNotification();
  // Eight calls commit while the first sync runs: it does not cover them,
  // so they wait for it and then share one more.
  std::atomic<int> returned{0};
  std::vector<std::thread> later;
  for (int i = 0; i < 8; ++i) {
    sync.Committed();
    later.emplace_back([&] {
      EXPECT_TRUE(sync.AwaitDurable().ok());
      ++returned;
    });
  }
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(returned.load(), 0) << "returned before a sync covered them";
  release_first.Notify();
  first.join();
  for (std::thread& t : later) t.join();
  EXPECT_EQ(returned.load(), 8);
  EXPECT_EQ(sync.syncs(), 2u);
}

TEST(GroupSync, AFailedSyncFailsThatWaitAndEveryLaterOne) {
  int calls = 0;
  GroupSync sync([&] {
    ++calls;
    return absl::InternalError("fdatasync: input/output error");
  });
  sync.Committed();
  const absl::Status failed = sync.AwaitDurable();
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(failed.message(), HasSubstr("input/output error"));
  EXPECT_THAT(failed.message(), HasSubstr("restart the coordinator"));
  // Final: no retry that could report success for lost pages.
  EXPECT_EQ(sync.AwaitDurable().code(), absl::StatusCode::kUnavailable);
  sync.Committed();
  EXPECT_EQ(sync.AwaitDurable().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(calls, 1);
}

using CoordinatorDurabilityTest = RecordingCoordinatorTest;

TEST_F(CoordinatorDurabilityTest, ACallReturnsOnlyAfterItsCommitIsSynced) {
  TakeOps();
  ASSERT_TRUE(Register().ok());
  const std::vector<std::string> ops = TakeOps();
  ASSERT_GE(ops.size(), 2u);
  EXPECT_EQ(ops[ops.size() - 2], "Commit");
  EXPECT_EQ(ops.back(), "SyncLog");
  // A call that wrote nothing, after everything is durable, syncs nothing.
  v1::HeartbeatRequest beat;
  beat.set_worker_id(1);
  ASSERT_TRUE(coord_->Heartbeat(beat).ok());
  for (const std::string& op : TakeOps()) EXPECT_NE(op, "SyncLog");
}

TEST_F(CoordinatorDurabilityTest, AFailedSyncFailsTheCallAndTheLaterOnes) {
  Fail("SyncLog");
  auto failed = Register();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(failed.status().message(), HasSubstr("injected failure"));
  Fail("");
  v1::HeartbeatRequest beat;
  beat.set_worker_id(1);
  EXPECT_EQ(coord_->Heartbeat(beat).status().code(),
            absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace gasloc::coordinator
