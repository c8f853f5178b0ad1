// The scoped SQLite transaction: commit makes writes durable, destruction
// without commit rolls them back, the first failure skips later writes and
// fails the commit as UNAVAILABLE, and commit-time actions run only after a
// successful commit.
#include "coordinator/transaction.h"

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/store_faults.h"

namespace gasloc::coordinator {
namespace {

using ::testing::HasSubstr;

StoredWorker Worker(uint64_t id) {
  StoredWorker w;
  w.worker_id = id;
  w.info.set_address(absl::StrCat("10.0.0.", id, ":7000"));
  w.info.set_cores(1);
  return w;
}

class TransactionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = Store::Open(":memory:", Faults([this](absl::string_view op) {
      ops_.emplace_back(op);
      if (fail_ == op) return absl::InternalError(absl::StrCat("no ", op));
      return absl::OkStatus();
    }));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  size_t Workers() { return store_->LoadWorkers()->size(); }

  std::unique_ptr<Store> store_;
  std::string fail_;
  std::vector<std::string> ops_;
};

TEST_F(TransactionTest, CommitKeepsTheWritesAndRunsTheActions) {
  int ran = 0;
  {
    Transaction txn(store_.get());
    txn.Write([](Store& s) { return s.PutWorker(Worker(1)); });
    txn.OnCommit([&ran] { ++ran; });
    EXPECT_EQ(ran, 0) << "actions wait for the commit";
    ASSERT_TRUE(txn.Commit().ok());
  }
  EXPECT_EQ(ran, 1);
  EXPECT_EQ(Workers(), 1u);
}

TEST_F(TransactionTest, DestructionWithoutCommitRollsBack) {
  int ran = 0;
  {
    Transaction txn(store_.get());
    txn.Write([](Store& s) { return s.PutWorker(Worker(1)); });
    txn.OnCommit([&ran] { ++ran; });
  }
  EXPECT_EQ(ran, 0);
  EXPECT_EQ(Workers(), 0u);
  // The store is usable again (no transaction left open).
  Transaction next(store_.get());
  next.Write([](Store& s) { return s.PutWorker(Worker(2)); });
  EXPECT_TRUE(next.Commit().ok());
  EXPECT_EQ(Workers(), 1u);
}

TEST_F(TransactionTest, AFailedWriteSkipsTheRestAndFailsTheCommit) {
  fail_ = "PutJob";
  int ran = 0;
  Transaction txn(store_.get());
  txn.Write([](Store& s) { return s.PutWorker(Worker(1)); });
  txn.Write([](Store& s) { return s.PutJob(StoredJob()); });
  txn.Write([](Store& s) { return s.PutWorker(Worker(2)); });
  txn.OnCommit([&ran] { ++ran; });
  EXPECT_FALSE(txn.error().ok());
  const absl::Status committed = txn.Commit();
  EXPECT_EQ(committed.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(committed.message(), HasSubstr("no PutJob"));
  EXPECT_THAT(ops_, ::testing::ElementsAre("Begin", "PutWorker", "PutJob"));
  EXPECT_EQ(ran, 0);
  EXPECT_EQ(Workers(), 0u) << "the write before the failure is rolled back";
  EXPECT_EQ(txn.Commit().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(TransactionTest, AFailedBeginOrCommitLeavesNothingBehind) {
  for (const char* op : {"Begin", "Commit"}) {
    SCOPED_TRACE(op);
    fail_ = op;
    ops_.clear();
    {
      Transaction txn(store_.get());
      txn.Write([](Store& s) { return s.PutWorker(Worker(1)); });
      EXPECT_EQ(txn.Commit().code(), absl::StatusCode::kUnavailable);
    }
    fail_.clear();
    EXPECT_EQ(Workers(), 0u);
    if (std::string(op) == "Begin") {
      EXPECT_THAT(ops_, ::testing::ElementsAre("Begin")) << "nothing written";
    }
    Transaction next(store_.get());
    EXPECT_TRUE(next.Commit().ok()) << "no transaction was left open";
  }
}

TEST(TransactionNoStoreTest, AlwaysCommits) {
  int ran = 0;
  Transaction txn(nullptr);
  txn.Write([](Store&) { return absl::InternalError("never called"); });
  txn.OnCommit([&ran] { ++ran; });
  EXPECT_TRUE(txn.Commit().ok());
  EXPECT_EQ(ran, 1);
}

}  // namespace
}  // namespace gasloc::coordinator
