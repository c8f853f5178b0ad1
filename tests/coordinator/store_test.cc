// SQLite persistence: round trips and the migration path.
#include "coordinator/store.h"

#include <sqlite3.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gasloc::coordinator {
namespace {

using ::testing::HasSubstr;

std::string TempDb(const std::string& name) {
  const std::string path = absl::StrCat(::testing::TempDir(), "/", name);
  std::remove(path.c_str());
  std::remove((path + "-wal").c_str());
  std::remove((path + "-shm").c_str());
  return path;
}

TEST(StoreTest, RoundTripsEveryTable) {
  const std::string path = TempDb("store_roundtrip.sqlite");
  std::vector<std::string> reasons;
  {
    auto store = Store::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    EXPECT_EQ(*(*store)->SchemaVersion(), kSchemaVersion);
    StoredWorker w;
    w.worker_id = 7;
    w.info.set_address("10.0.0.1:7000");
    w.info.set_cores(8);
    w.registered_unix_ms = 123;
    w.job_id = 3;
    ASSERT_TRUE((*store)->PutWorker(w).ok());
    StoredJob j;
    j.status.set_job_id(3);
    j.status.mutable_spec()->set_name("j");
    j.status.set_state(v1::JOB_STATE_RUNNING);
    j.stop_round = 9;
    j.rounds_failed = 2;
    j.rounds_decided = 6;
    j.first_failure = "worker 7 round 3: no bf16 matmul";
    j.dropped = {4, 8};
    ASSERT_TRUE((*store)->PutJob(j).ok());
    StoredMember m;
    m.job_id = 3;
    m.worker_id = 7;
    m.first_round = 2;
    m.last_reported_round = 5;
    m.steps_per_second = 2.5;
    m.local_steps = 40;
    m.got_stop = true;
    m.consecutive_failures = 2;
    ASSERT_TRUE((*store)->PutMember(m).ok());
    ASSERT_TRUE((*store)->PutEpoch({3, 2, 4, {7, 9}}).ok());
    StoredRound r;
    r.job_id = 3;
    r.round = 4;
    r.epoch = 2;
    r.budgets.resize(2);
    r.budgets[0].local_steps = 40;
    r.budgets[0].basis = Budget::Basis::kAdaptive;
    r.budgets[0].link_known = true;
    r.budgets[0].nominal_steps = 100;
    r.budgets[0].min_steps = 10;
    r.budgets[0].steps_per_second = 4;
    r.budgets[0].fastest_steps_per_second = 10;
    r.budgets[0].exchange_seconds = 1;
    r.budgets[0].target_seconds = 11;
    r.budgets[0].raw_steps = 40;
    r.budgets[1].local_steps = 100;
    reasons = {r.budgets[0].Reason(), r.budgets[1].Reason()};
    ASSERT_TRUE((*store)->PutRound(r).ok());
  }
  auto store = Store::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  auto workers = (*store)->LoadWorkers();
  ASSERT_TRUE(workers.ok());
  ASSERT_EQ(workers->size(), 1u);
  EXPECT_EQ((*workers)[0].info.address(), "10.0.0.1:7000");
  EXPECT_EQ((*workers)[0].job_id, 3u);
  auto jobs = (*store)->LoadJobs();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].stop_round, 9);
  EXPECT_EQ((*jobs)[0].rounds_failed, 2u);
  EXPECT_EQ((*jobs)[0].rounds_decided, 6u);
  EXPECT_EQ((*jobs)[0].first_failure, "worker 7 round 3: no bf16 matmul");
  EXPECT_EQ((*jobs)[0].dropped, (std::vector<uint64_t>{4, 8}));
  EXPECT_EQ((*jobs)[0].status.spec().name(), "j");
  auto members = (*store)->LoadMembers(3);
  ASSERT_EQ(members->size(), 1u);
  EXPECT_EQ((*members)[0].last_reported_round, 5);
  EXPECT_DOUBLE_EQ((*members)[0].steps_per_second, 2.5);
  EXPECT_TRUE((*members)[0].got_stop);
  EXPECT_EQ((*members)[0].consecutive_failures, 2u);
  auto epochs = (*store)->LoadEpochs(3);
  ASSERT_EQ(epochs->size(), 1u);
  EXPECT_EQ((*epochs)[0].members, (std::vector<uint64_t>{7, 9}));
  auto rounds = (*store)->LoadRounds(3, 0);
  ASSERT_EQ(rounds->size(), 1u);
  ASSERT_EQ((*rounds)[0].budgets.size(), 2u);
  EXPECT_EQ((*rounds)[0].budgets[0].local_steps, 40u);
  EXPECT_EQ((*rounds)[0].budgets[1].local_steps, 100u);
  EXPECT_EQ((*rounds)[0].budgets[0].Reason(), reasons[0]);
  EXPECT_EQ((*rounds)[0].budgets[1].Reason(), "no measurement yet");
  EXPECT_THAT(reasons[0], HasSubstr("0.40x fastest"));
  ASSERT_TRUE((*store)->PruneRounds(3, 5).ok());
  EXPECT_TRUE((*store)->LoadRounds(3, 0)->empty());
}

// One transaction that writes worker 1.
void CommitOneWorker(Store& store) {
  ASSERT_TRUE(store.Begin().ok());
  StoredWorker worker;
  worker.worker_id = 1;
  ASSERT_TRUE(store.PutWorker(worker).ok());
  ASSERT_TRUE(store.Commit().ok());
}

// Durable commits by group commit: synchronous=NORMAL writes a commit to
// the WAL without a sync, and SyncLog syncs the WAL (the coordinator calls
// it before replying, coordinator/group_sync.h), so a power loss cannot
// undo a commit that handed out a worker or job id.
TEST(StoreTest, FileCommitsAreDurableAfterSyncLog) {
  auto store = Store::Open(TempDb("store_durable.sqlite"));
  ASSERT_TRUE(store.ok()) << store.status();
  auto level = (*store)->SynchronousLevel();
  ASSERT_TRUE(level.ok()) << level.status();
  EXPECT_EQ(*level, 1);  // NORMAL
  CommitOneWorker(**store);
  EXPECT_TRUE((*store)->SyncLog().ok());
  EXPECT_TRUE((*store)->SyncLog().ok());  // again: nothing new, still OK

  auto memory = Store::Open(":memory:");
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_TRUE((*memory)->SyncLog().ok());
}

// A database that cannot use a WAL (here SQLite's private temporary file,
// the empty path; a file system without shared memory is the same): each
// commit syncs itself (FULL) and SyncLog, with no WAL to sync, succeeds
// rather than failing every call on a missing "-wal" file.
TEST(StoreTest, WithoutAWalEachCommitSyncsItself) {
  auto store = Store::Open("");
  ASSERT_TRUE(store.ok()) << store.status();
  auto level = (*store)->SynchronousLevel();
  ASSERT_TRUE(level.ok()) << level.status();
  EXPECT_EQ(*level, 2);  // FULL
  CommitOneWorker(**store);
  EXPECT_TRUE((*store)->SyncLog().ok());
}

// A database file at schema `version`, built by hand with the first
// `version` migrations, then `rows` (SQL) run in it.
void MakeOldFile(const std::string& path, int version, const char* rows) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  for (int v = 0; v < version; ++v)
    ASSERT_EQ(
        sqlite3_exec(db, Migrations()[v].c_str(), nullptr, nullptr, nullptr),
        SQLITE_OK);
  const std::string sql =
      absl::StrCat("PRAGMA user_version=", version, "; ", rows);
  ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
}

TEST(StoreTest, MigratesAVersionOneFile) {
  const std::string path = TempDb("store_v1.sqlite");
  ASSERT_NO_FATAL_FAILURE(
      MakeOldFile(path, 1, "INSERT INTO workers VALUES (5, x'', 1, 1, 0);"));

  auto store = Store::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->SchemaVersion(), kSchemaVersion);
  auto workers = (*store)->LoadWorkers();
  ASSERT_TRUE(workers.ok());
  ASSERT_EQ(workers->size(), 1u);
  EXPECT_EQ((*workers)[0].worker_id, 5u);
  // The table version 2 added is usable.
  StoredRound r;
  r.job_id = 1;
  EXPECT_TRUE((*store)->PutRound(r).ok());
  // So are the columns version 3 added.
  StoredJob j;
  j.status.set_job_id(1);
  j.rounds_failed = 1;
  ASSERT_TRUE((*store)->PutJob(j).ok());
  EXPECT_EQ((*(*store)->LoadJobs())[0].rounds_failed, 1u);
}

// A version-2 file (before failed rounds were counted): its jobs and
// members load with nothing failed and nobody dropped.
TEST(StoreTest, MigratesAVersionTwoFile) {
  const std::string path = TempDb("store_v2.sqlite");
  ASSERT_NO_FATAL_FAILURE(MakeOldFile(
      path, 2,
      "INSERT INTO jobs VALUES (3, 'j', 2, x'', -1); INSERT INTO job_members "
      "VALUES (3, 7, 0, 4, 1, 1, 100, 2, 0, 0);"));
  auto store = Store::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->SchemaVersion(), kSchemaVersion);
  auto jobs = (*store)->LoadJobs();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 1u);
  EXPECT_EQ((*jobs)[0].rounds_failed, 0u);
  EXPECT_EQ((*jobs)[0].first_failure, "");
  EXPECT_TRUE((*jobs)[0].dropped.empty());
  auto members = (*store)->LoadMembers(3);
  ASSERT_TRUE(members.ok()) << members.status();
  ASSERT_EQ(members->size(), 1u);
  EXPECT_EQ((*members)[0].last_reported_round, 4);
  EXPECT_EQ((*members)[0].consecutive_failures, 0u);
}

// A version-3 file (before the learning-rate horizon): its rounds load
// without a place on it (the rounds x H schedule), and a round's place
// round-trips.
TEST(StoreTest, MigratesAVersionThreeFile) {
  const std::string path = TempDb("store_v3.sqlite");
  ASSERT_NO_FATAL_FAILURE(MakeOldFile(
      path, 3, "INSERT INTO rounds VALUES (3, 0, 1, 1000, 2000, x'');"));
  auto store = Store::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ(*(*store)->SchemaVersion(), kSchemaVersion);
  auto rounds = (*store)->LoadRounds(3, 0);
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  ASSERT_EQ(rounds->size(), 1u);
  EXPECT_EQ((*rounds)[0].deadline_unix_ms, 2000);
  EXPECT_EQ((*rounds)[0].schedule_begin, -1);
  EXPECT_EQ((*rounds)[0].schedule_end, -1);
  StoredRound placed = (*rounds)[0];
  placed.round = 1;
  placed.schedule_begin = 0.25;
  placed.schedule_end = 0.375;
  ASSERT_TRUE((*store)->PutRound(placed).ok());
  rounds = (*store)->LoadRounds(3, 1);
  ASSERT_TRUE(rounds.ok()) << rounds.status();
  ASSERT_EQ(rounds->size(), 1u);
  EXPECT_EQ((*rounds)[0].schedule_begin, 0.25);
  EXPECT_EQ((*rounds)[0].schedule_end, 0.375);
}

TEST(StoreTest, CorruptBudgetsAreDataLoss) {
  auto decoded = DecodeBudgets("short");
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(decoded.status().message(), HasSubstr("rounds.budgets"));
  EXPECT_TRUE(DecodeBudgets("")->empty());
}

TEST(StoreTest, RefusesANewerSchema) {
  const std::string path = TempDb("store_future.sqlite");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version=99", nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto store = Store::Open(path);
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr("schema version 99"));
}

TEST(StoreTest, UnopenablePathIsUnavailable) {
  auto store = Store::Open("/nonexistent-dir/x/y.sqlite");
  ASSERT_FALSE(store.ok());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(store.status().message(), HasSubstr("/nonexistent-dir/x/y.sqlite"));
}

}  // namespace
}  // namespace gasloc::coordinator
