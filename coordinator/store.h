// SQLite persistence of the coordinator's state: one file, WAL journal.
// Holds the workers ever seen, the jobs (spec and status), each running
// job's members with their measured rates, the membership epochs and the
// recently planned rounds, so a restarted coordinator resumes its running
// jobs where they were (docs/coordinator.md has the schema).
//
// The schema version is SQLite's `PRAGMA user_version`; Open() applies every
// migration above the file's version in order, each in a transaction
// (kSchemaVersion is the newest). A file from a newer gasloc is refused.
//
// Thread safety: not thread-safe; the Coordinator calls it under its mutex.
#ifndef GASLOC_COORDINATOR_STORE_H_
#define GASLOC_COORDINATOR_STORE_H_

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/budget.h"
#include "gasloc/v1/coordinator.pb.h"

struct sqlite3;

namespace gasloc::coordinator {

inline constexpr int kSchemaVersion = 4;

// Migrations()[v - 1] takes a database from version v - 1 to v.
const std::vector<std::string>& Migrations();

struct StoredWorker {
  uint64_t worker_id = 0;
  v1::WorkerInfo info;
  int64_t registered_unix_ms = 0;
  v1::WorkerState state = v1::WORKER_STATE_ALIVE;
  // Job the worker is bound to; 0 = idle.
  uint64_t job_id = 0;
};

struct StoredJob {
  // status.job_id is the key; status carries spec, state, counters and the
  // budget-change log.
  v1::JobStatus status;
  // First round that will not be planned (the stop condition was reached
  // when it was requested); -1 = not decided yet.
  int64_t stop_round = -1;
  // Rounds below rounds_decided whose outcome is settled, and how many of
  // them failed (no member completed them): those do not count toward
  // stop.max_rounds (Coordinator::SettleRounds).
  uint64_t rounds_failed = 0;
  uint64_t rounds_decided = 0;
  // "worker W round R: error": the first failure reported since a member
  // last completed a round ("" = none); a job that fails names it.
  std::string first_failure;
  // Workers dropped from the job for failing
  // spec.max_consecutive_round_failures rounds in a row: they do not join
  // it again (until ResumeJob).
  std::vector<uint64_t> dropped;
};

struct StoredMember {
  uint64_t job_id = 0;
  uint64_t worker_id = 0;
  // First planned round that includes the worker; -1 = none yet.
  int64_t first_round = -1;
  // Last round the worker reported; -1 = none.
  int64_t last_reported_round = -1;
  double steps_per_second = 0;  // EMA of s_i
  // EMA of a round's relative deviation from s_i, squared (link_model.h
  // UpdateStepRateVariance; < 0 = not measured; not persisted: after a
  // restart the planner uses its widest noise band until the next reports).
  double step_rate_variance = -1;
  // Var(s_i) / Var(one round's rate) (link_model.h
  // UpdateStepRateEstimateShare); not persisted: 1 (an estimate as noisy as
  // one round, the widest band its spread allows) after a restart.
  double step_rate_estimate_share = 1;
  double bytes_per_second = 0;  // EMA of b_i
  uint32_t local_steps = 0;     // H_i of the latest planned round
  float train_loss = 0;
  float val_bpb = 0;
  bool got_stop = false;
  // Rounds failed in a row (failed set-ups included) since the member last
  // completed one; at spec.max_consecutive_round_failures it is dropped.
  uint32_t consecutive_failures = 0;
  // Fraction of the latest reported round spent waiting for peers (not
  // persisted: shown by GetJob's worker_budgets until the next report).
  double wait_fraction = 0;
  // The latest round the member finished, completed or failed: its failed
  // reports and the after_round it asks with (not persisted: after a
  // restart last_reported_round stands in until the member asks again).
  // The round lead bound waits on it (round_planner.h DecideRoundLead).
  int64_t last_finished_round = -1;
  // The round this member was last held back from by the round lead bound
  // (not persisted; -1 = none): each hold is logged and counted once.
  int64_t lead_held_round = -1;
};

struct StoredEpoch {
  uint64_t job_id = 0;
  uint64_t epoch = 0;
  uint64_t first_round = 0;
  std::vector<uint64_t> members;  // sorted worker ids
};

struct StoredRound {
  uint64_t job_id = 0;
  uint64_t round = 0;
  uint64_t epoch = 0;
  int64_t planned_unix_ms = 0;
  int64_t deadline_unix_ms = 0;
  // The round's place on the learning-rate horizon (coordinator.h
  // RoundRec::schedule_progress); -1 = none (a ROUNDS horizon, or a round
  // stored before schema version 4).
  double schedule_begin = -1;
  double schedule_end = -1;
  // Aligned with the epoch's sorted members (stored as fixed-size binary
  // records, so a round of 10,000 workers is one 560 KB blob).
  std::vector<Budget> budgets;
};

// Fault injection, the seam tests make a store fail through (as leveldb's
// SpecialEnv): asked before every Begin, Commit and write (Put*,
// DeleteMember, PruneRounds) with the operation's name ("Begin", "Commit",
// "PutWorker", ...); a non-OK answer fails that operation without touching
// the database. Production stores have none (tests/coordinator/
// store_faults.h has the tests' implementation).
class StoreFaults {
 public:
  virtual ~StoreFaults() = default;
  virtual absl::Status Before(absl::string_view op) = 0;
};

class Store {
 public:
  // Opens (creating if missing) the database at `path`; ":memory:" gives a
  // private in-memory database (unit tests). `faults` (none in production)
  // apply to the calls after Open.
  static absl::StatusOr<std::unique_ptr<Store>> Open(
      const std::string& path, std::shared_ptr<StoreFaults> faults = nullptr);
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  absl::StatusOr<int> SchemaVersion();

  // Groups the writes of one coordinator operation into one transaction.
  absl::Status Begin();
  absl::Status Commit();
  void Rollback();

  absl::Status PutWorker(const StoredWorker& worker);
  absl::StatusOr<std::vector<StoredWorker>> LoadWorkers();

  absl::Status PutJob(const StoredJob& job);
  absl::StatusOr<std::vector<StoredJob>> LoadJobs();

  absl::Status PutMember(const StoredMember& member);
  absl::Status DeleteMember(uint64_t job_id, uint64_t worker_id);
  absl::StatusOr<std::vector<StoredMember>> LoadMembers(uint64_t job_id);

  absl::Status PutEpoch(const StoredEpoch& epoch);
  absl::StatusOr<std::vector<StoredEpoch>> LoadEpochs(uint64_t job_id);

  absl::Status PutRound(const StoredRound& round);
  // Rounds of `job_id` with round >= min_round, ascending.
  absl::StatusOr<std::vector<StoredRound>> LoadRounds(uint64_t job_id,
                                                      uint64_t min_round);
  // Deletes the rounds of `job_id` below `below_round`.
  absl::Status PruneRounds(uint64_t job_id, uint64_t below_round);
  // Deletes the job with its members, epochs and rounds.
  absl::Status DeleteJob(uint64_t job_id);

  // PRAGMA synchronous of this connection: 1 (NORMAL) for a file in WAL
  // mode: a commit is in the WAL when it returns, on disk only after
  // SyncLog (2, FULL, where the file system cannot hold a WAL).
  absl::StatusOr<int> SynchronousLevel();
  // Makes every commit so far durable (fdatasync of the WAL file, and of
  // its directory the first time a WAL file is seen), so a power loss
  // cannot drop them (a lost commit would hand out a worker or job id
  // again). OK at once for an in-memory database. May run on another
  // thread while the connection is in use; not concurrently with itself
  // (coordinator/group_sync.h calls it).
  absl::Status SyncLog();

 private:
  struct SqlValue;  // a bound parameter (store.cc)
  struct Column;    // a column's name and value (store.cc)

  explicit Store(sqlite3* db) : db_(db) {}
  // Runs raw SQL (pragmas, migrations, transactions).
  absl::Status Exec(absl::string_view sql);
  absl::Status Migrate();
  // Runs the write statement `sql` with `values` bound to its parameters,
  // unless `faults_` fails `op`.
  absl::Status Write(absl::string_view op, const char* sql,
                     const std::vector<SqlValue>& values);
  // INSERT OR REPLACE of one row of `table` (through Write).
  absl::Status Upsert(absl::string_view op, const char* table,
                      const std::vector<Column>& row);
  // The injected failure of `op` (OK without faults).
  absl::Status Injected(absl::string_view op) const {
    return faults_ != nullptr ? faults_->Before(op) : absl::OkStatus();
  }
  sqlite3* db_;
  std::shared_ptr<StoreFaults> faults_;  // set once, by Open
  bool wal_ = false;  // a file in WAL mode: SyncLog syncs the WAL (Open's)
  ino_t synced_log_inode_ = 0;  // the WAL file SyncLog last synced (SyncLog's)
};

}  // namespace gasloc::coordinator

#endif  // GASLOC_COORDINATOR_STORE_H_
