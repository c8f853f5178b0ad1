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

#include <cstdint>
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

inline constexpr int kSchemaVersion = 2;

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
};

struct StoredMember {
  uint64_t job_id = 0;
  uint64_t worker_id = 0;
  // First planned round that includes the worker; -1 = none yet.
  int64_t first_round = -1;
  // Last round the worker reported; -1 = none.
  int64_t last_reported_round = -1;
  double steps_per_second = 0;  // EMA of s_i
  double bytes_per_second = 0;  // EMA of b_i
  uint32_t local_steps = 0;     // H_i of the latest planned round
  float train_loss = 0;
  float val_bpb = 0;
  bool got_stop = false;
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
  // Aligned with the epoch's sorted members (stored as fixed-size binary
  // records, so a round of 10,000 workers is one 560 KB blob).
  std::vector<Budget> budgets;
};

// The binary form of a round's budgets (little-endian records of
// kBudgetRecordBytes), and back.
inline constexpr size_t kBudgetRecordBytes = 56;
std::string EncodeBudgets(const std::vector<Budget>& budgets);
absl::StatusOr<std::vector<Budget>> DecodeBudgets(absl::string_view blob);

class Store {
 public:
  // Opens (creating if missing) the database at `path`; ":memory:" gives a
  // private in-memory database (unit tests).
  static absl::StatusOr<std::unique_ptr<Store>> Open(const std::string& path);
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

  // Runs raw SQL (tests build old schema versions with it).
  absl::Status Exec(absl::string_view sql);

 private:
  explicit Store(sqlite3* db) : db_(db) {}
  absl::Status Migrate();
  sqlite3* db_;
};

}  // namespace gasloc::coordinator

#endif  // GASLOC_COORDINATOR_STORE_H_
