#include "coordinator/store.h"

#include <sqlite3.h>

#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace gasloc::coordinator {

const std::vector<std::string>& Migrations() {
  static const auto* const kMigrations = new std::vector<std::string>{
      // 1: workers, jobs, job members, membership epochs.
      R"sql(
        CREATE TABLE workers (
          worker_id INTEGER PRIMARY KEY,
          info BLOB NOT NULL,              -- gasloc.v1.WorkerInfo
          registered_unix_ms INTEGER NOT NULL,
          state INTEGER NOT NULL,          -- gasloc.v1.WorkerState
          job_id INTEGER NOT NULL DEFAULT 0);
        CREATE TABLE jobs (
          job_id INTEGER PRIMARY KEY,
          name TEXT NOT NULL,
          state INTEGER NOT NULL,          -- gasloc.v1.JobState
          status BLOB NOT NULL,            -- gasloc.v1.JobStatus
          stop_round INTEGER NOT NULL DEFAULT -1);
        CREATE TABLE job_members (
          job_id INTEGER NOT NULL,
          worker_id INTEGER NOT NULL,
          first_round INTEGER NOT NULL,
          last_reported_round INTEGER NOT NULL,
          steps_per_second REAL NOT NULL,
          bytes_per_second REAL NOT NULL,
          local_steps INTEGER NOT NULL,
          train_loss REAL NOT NULL,
          val_bpb REAL NOT NULL,
          got_stop INTEGER NOT NULL,
          PRIMARY KEY (job_id, worker_id));
        CREATE TABLE epochs (
          job_id INTEGER NOT NULL,
          epoch INTEGER NOT NULL,
          first_round INTEGER NOT NULL,
          members TEXT NOT NULL,           -- sorted worker ids, comma-separated
          PRIMARY KEY (job_id, epoch));
      )sql",
      // 2: planned rounds with their budgets, so a restarted coordinator
      // hands out exactly the rounds it had planned.
      R"sql(
        CREATE TABLE rounds (
          job_id INTEGER NOT NULL,
          round INTEGER NOT NULL,
          epoch INTEGER NOT NULL,
          planned_unix_ms INTEGER NOT NULL,
          deadline_unix_ms INTEGER NOT NULL,
          budgets BLOB NOT NULL,           -- EncodeBudgets(), member order
          PRIMARY KEY (job_id, round));
      )sql",
  };
  return *kMigrations;
}

namespace {

absl::Status SqlError(sqlite3* db, absl::string_view what) {
  return absl::InternalError(
      absl::StrCat("sqlite: ", what, ": ", sqlite3_errmsg(db)));
}

// A prepared statement with positional binding; finalised on destruction.
class Statement {
 public:
  Statement(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  absl::Status ok() const {
    return rc_ == SQLITE_OK ? absl::OkStatus() : SqlError(db_, "prepare");
  }
  Statement& Int(int64_t v) {
    sqlite3_bind_int64(stmt_, ++index_, v);
    return *this;
  }
  Statement& Real(double v) {
    sqlite3_bind_double(stmt_, ++index_, v);
    return *this;
  }
  Statement& Text(const std::string& v) {
    sqlite3_bind_text(stmt_, ++index_, v.data(), static_cast<int>(v.size()),
                      SQLITE_TRANSIENT);
    return *this;
  }
  Statement& Blob(const std::string& v) {
    sqlite3_bind_blob(stmt_, ++index_, v.data(), static_cast<int>(v.size()),
                      SQLITE_TRANSIENT);
    return *this;
  }
  // Runs a statement that returns no rows.
  absl::Status Run() {
    RETURN_IF_ERROR(ok());
    const int rc = sqlite3_step(stmt_);
    if (rc != SQLITE_DONE) return SqlError(db_, "step");
    return absl::OkStatus();
  }
  // Advances to the next row: true = a row, false = done (or error, see
  // status()).
  bool Next() {
    if (rc_ != SQLITE_OK) return false;
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE) rc_ = rc;
    return false;
  }
  absl::Status status() const {
    return rc_ == SQLITE_OK ? absl::OkStatus() : SqlError(db_, "query");
  }
  int64_t ColInt(int c) { return sqlite3_column_int64(stmt_, c); }
  double ColReal(int c) { return sqlite3_column_double(stmt_, c); }
  std::string ColText(int c) {
    const auto* p = sqlite3_column_blob(stmt_, c);
    const int n = sqlite3_column_bytes(stmt_, c);
    return p == nullptr ? std::string()
                        : std::string(static_cast<const char*>(p), n);
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_OK;
  int index_ = 0;
};

std::string JoinIds(const std::vector<uint64_t>& ids) {
  return absl::StrJoin(ids, ",");
}

absl::StatusOr<std::vector<uint64_t>> SplitIds(const std::string& text) {
  std::vector<uint64_t> ids;
  if (text.empty()) return ids;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    uint64_t id;
    if (!absl::SimpleAtoi(part, &id))
      return absl::DataLossError(
          absl::StrCat("epochs.members holds a bad id '", part, "'"));
    ids.push_back(id);
  }
  return ids;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(
      path.c_str(), &db,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
      nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return absl::UnavailableError(
        absl::StrCat("cannot open database '", path, "': ", message));
  }
  std::unique_ptr<Store> store(new Store(db));
  sqlite3_busy_timeout(db, 5000);
  if (path != ":memory:") {
    // WAL: readers never block the writer, one fsync per commit at most.
    RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode=WAL"));
    RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=NORMAL"));
  }
  RETURN_IF_ERROR(Annotate(store->Migrate(), path));
  return store;
}

Store::~Store() { sqlite3_close(db_); }

absl::Status Store::Exec(absl::string_view sql) {
  char* error = nullptr;
  const std::string text(sql);
  if (sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    absl::Status status = absl::InternalError(
        absl::StrCat("sqlite: ", error != nullptr ? error : "exec failed"));
    sqlite3_free(error);
    return status;
  }
  return absl::OkStatus();
}

absl::StatusOr<int> Store::SchemaVersion() {
  Statement q(db_, "PRAGMA user_version");
  if (!q.Next()) return q.status().ok() ? SqlError(db_, "user_version")
                                        : q.status();
  return static_cast<int>(q.ColInt(0));
}

absl::Status Store::Migrate() {
  ASSIGN_OR_RETURN(int version, SchemaVersion());
  const auto& migrations = Migrations();
  if (version > static_cast<int>(migrations.size()))
    return absl::FailedPreconditionError(absl::StrCat(
        "database schema version ", version, " is newer than this build's ",
        migrations.size(), "; use a newer gasloc-coordinator"));
  for (int v = version; v < static_cast<int>(migrations.size()); ++v) {
    RETURN_IF_ERROR(Begin());
    absl::Status s = Exec(migrations[v]);
    if (s.ok()) s = Exec(absl::StrCat("PRAGMA user_version=", v + 1));
    if (!s.ok()) {
      Rollback();
      return Annotate(s, absl::StrCat("migration to schema version ", v + 1));
    }
    RETURN_IF_ERROR(Commit());
  }
  return absl::OkStatus();
}

absl::Status Store::Begin() { return Exec("BEGIN IMMEDIATE"); }
absl::Status Store::Commit() { return Exec("COMMIT"); }
void Store::Rollback() { Exec("ROLLBACK").IgnoreError(); }

absl::Status Store::PutWorker(const StoredWorker& w) {
  Statement s(db_,
              "INSERT OR REPLACE INTO workers (worker_id, info, "
              "registered_unix_ms, state, job_id) VALUES (?, ?, ?, ?, ?)");
  return s.Int(static_cast<int64_t>(w.worker_id))
      .Blob(w.info.SerializeAsString())
      .Int(w.registered_unix_ms)
      .Int(w.state)
      .Int(static_cast<int64_t>(w.job_id))
      .Run();
}

absl::StatusOr<std::vector<StoredWorker>> Store::LoadWorkers() {
  Statement q(db_,
              "SELECT worker_id, info, registered_unix_ms, state, job_id FROM "
              "workers ORDER BY worker_id");
  std::vector<StoredWorker> out;
  while (q.Next()) {
    StoredWorker w;
    w.worker_id = static_cast<uint64_t>(q.ColInt(0));
    if (!w.info.ParseFromString(q.ColText(1)))
      return absl::DataLossError(
          absl::StrCat("workers.info of worker ", w.worker_id, " is corrupt"));
    w.registered_unix_ms = q.ColInt(2);
    w.state = static_cast<v1::WorkerState>(q.ColInt(3));
    w.job_id = static_cast<uint64_t>(q.ColInt(4));
    out.push_back(std::move(w));
  }
  RETURN_IF_ERROR(q.status());
  return out;
}

absl::Status Store::PutJob(const StoredJob& job) {
  Statement s(db_,
              "INSERT OR REPLACE INTO jobs (job_id, name, state, status, "
              "stop_round) VALUES (?, ?, ?, ?, ?)");
  return s.Int(static_cast<int64_t>(job.status.job_id()))
      .Text(job.status.spec().name())
      .Int(job.status.state())
      .Blob(job.status.SerializeAsString())
      .Int(job.stop_round)
      .Run();
}

absl::StatusOr<std::vector<StoredJob>> Store::LoadJobs() {
  Statement q(db_, "SELECT job_id, status, stop_round FROM jobs ORDER BY job_id");
  std::vector<StoredJob> out;
  while (q.Next()) {
    StoredJob j;
    if (!j.status.ParseFromString(q.ColText(1)))
      return absl::DataLossError(
          absl::StrCat("jobs.status of job ", q.ColInt(0), " is corrupt"));
    j.stop_round = q.ColInt(2);
    out.push_back(std::move(j));
  }
  RETURN_IF_ERROR(q.status());
  return out;
}

absl::Status Store::PutMember(const StoredMember& m) {
  Statement s(db_,
              "INSERT OR REPLACE INTO job_members (job_id, worker_id, "
              "first_round, last_reported_round, steps_per_second, "
              "bytes_per_second, local_steps, train_loss, val_bpb, got_stop) "
              "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
  return s.Int(static_cast<int64_t>(m.job_id))
      .Int(static_cast<int64_t>(m.worker_id))
      .Int(m.first_round)
      .Int(m.last_reported_round)
      .Real(m.steps_per_second)
      .Real(m.bytes_per_second)
      .Int(m.local_steps)
      .Real(m.train_loss)
      .Real(m.val_bpb)
      .Int(m.got_stop ? 1 : 0)
      .Run();
}

absl::Status Store::DeleteMember(uint64_t job_id, uint64_t worker_id) {
  Statement s(db_, "DELETE FROM job_members WHERE job_id = ? AND worker_id = ?");
  return s.Int(static_cast<int64_t>(job_id))
      .Int(static_cast<int64_t>(worker_id))
      .Run();
}

absl::StatusOr<std::vector<StoredMember>> Store::LoadMembers(uint64_t job_id) {
  Statement q(db_,
              "SELECT worker_id, first_round, last_reported_round, "
              "steps_per_second, bytes_per_second, local_steps, train_loss, "
              "val_bpb, got_stop FROM job_members WHERE job_id = ? ORDER BY "
              "worker_id");
  q.Int(static_cast<int64_t>(job_id));
  std::vector<StoredMember> out;
  while (q.Next()) {
    StoredMember m;
    m.job_id = job_id;
    m.worker_id = static_cast<uint64_t>(q.ColInt(0));
    m.first_round = q.ColInt(1);
    m.last_reported_round = q.ColInt(2);
    m.steps_per_second = q.ColReal(3);
    m.bytes_per_second = q.ColReal(4);
    m.local_steps = static_cast<uint32_t>(q.ColInt(5));
    m.train_loss = static_cast<float>(q.ColReal(6));
    m.val_bpb = static_cast<float>(q.ColReal(7));
    m.got_stop = q.ColInt(8) != 0;
    out.push_back(m);
  }
  RETURN_IF_ERROR(q.status());
  return out;
}

absl::Status Store::PutEpoch(const StoredEpoch& e) {
  Statement s(db_,
              "INSERT OR REPLACE INTO epochs (job_id, epoch, first_round, "
              "members) VALUES (?, ?, ?, ?)");
  return s.Int(static_cast<int64_t>(e.job_id))
      .Int(static_cast<int64_t>(e.epoch))
      .Int(static_cast<int64_t>(e.first_round))
      .Text(JoinIds(e.members))
      .Run();
}

absl::StatusOr<std::vector<StoredEpoch>> Store::LoadEpochs(uint64_t job_id) {
  Statement q(db_,
              "SELECT epoch, first_round, members FROM epochs WHERE job_id = ? "
              "ORDER BY epoch");
  q.Int(static_cast<int64_t>(job_id));
  std::vector<StoredEpoch> out;
  while (q.Next()) {
    StoredEpoch e;
    e.job_id = job_id;
    e.epoch = static_cast<uint64_t>(q.ColInt(0));
    e.first_round = static_cast<uint64_t>(q.ColInt(1));
    ASSIGN_OR_RETURN(e.members, SplitIds(q.ColText(2)));
    out.push_back(std::move(e));
  }
  RETURN_IF_ERROR(q.status());
  return out;
}

std::string EncodeBudgets(const std::vector<Budget>& budgets) {
  std::string out(budgets.size() * kBudgetRecordBytes, '\0');
  char* p = out.data();
  auto put = [&p](const auto& v) {
    std::memcpy(p, &v, sizeof(v));
    p += sizeof(v);
  };
  for (const Budget& b : budgets) {
    put(b.local_steps);
    put(static_cast<uint8_t>(b.basis));
    put(static_cast<uint8_t>(b.link_known));
    put(uint16_t{0});
    put(b.nominal_steps);
    put(b.min_steps);
    put(b.steps_per_second);
    put(b.fastest_steps_per_second);
    put(b.exchange_seconds);
    put(b.target_seconds);
    put(b.raw_steps);
  }
  return out;
}

absl::StatusOr<std::vector<Budget>> DecodeBudgets(absl::string_view blob) {
  if (blob.size() % kBudgetRecordBytes != 0)
    return absl::DataLossError(absl::StrCat(
        "rounds.budgets has ", blob.size(), " bytes, not a multiple of ",
        kBudgetRecordBytes));
  std::vector<Budget> budgets(blob.size() / kBudgetRecordBytes);
  const char* p = blob.data();
  auto get = [&p](auto& v) {
    std::memcpy(&v, p, sizeof(v));
    p += sizeof(v);
  };
  for (Budget& b : budgets) {
    uint8_t basis, link;
    uint16_t pad;
    get(b.local_steps);
    get(basis);
    get(link);
    get(pad);
    get(b.nominal_steps);
    get(b.min_steps);
    get(b.steps_per_second);
    get(b.fastest_steps_per_second);
    get(b.exchange_seconds);
    get(b.target_seconds);
    get(b.raw_steps);
    if (basis > static_cast<uint8_t>(Budget::Basis::kAdaptive))
      return absl::DataLossError("rounds.budgets holds an unknown basis");
    b.basis = static_cast<Budget::Basis>(basis);
    b.link_known = link != 0;
  }
  return budgets;
}

absl::Status Store::PutRound(const StoredRound& r) {
  Statement s(db_,
              "INSERT OR REPLACE INTO rounds (job_id, round, epoch, "
              "planned_unix_ms, deadline_unix_ms, budgets) VALUES (?, ?, ?, ?, "
              "?, ?)");
  return s.Int(static_cast<int64_t>(r.job_id))
      .Int(static_cast<int64_t>(r.round))
      .Int(static_cast<int64_t>(r.epoch))
      .Int(r.planned_unix_ms)
      .Int(r.deadline_unix_ms)
      .Blob(EncodeBudgets(r.budgets))
      .Run();
}

absl::StatusOr<std::vector<StoredRound>> Store::LoadRounds(uint64_t job_id,
                                                          uint64_t min_round) {
  Statement q(db_,
              "SELECT round, epoch, planned_unix_ms, deadline_unix_ms, budgets "
              "FROM rounds WHERE job_id = ? AND round >= ? ORDER BY round");
  q.Int(static_cast<int64_t>(job_id)).Int(static_cast<int64_t>(min_round));
  std::vector<StoredRound> out;
  while (q.Next()) {
    StoredRound r;
    r.job_id = job_id;
    r.round = static_cast<uint64_t>(q.ColInt(0));
    r.epoch = static_cast<uint64_t>(q.ColInt(1));
    r.planned_unix_ms = q.ColInt(2);
    r.deadline_unix_ms = q.ColInt(3);
    auto budgets = DecodeBudgets(q.ColText(4));
    if (!budgets.ok())
      return Annotate(budgets.status(),
                      absl::StrCat("job ", job_id, " round ", r.round));
    r.budgets = std::move(*budgets);
    out.push_back(std::move(r));
  }
  RETURN_IF_ERROR(q.status());
  return out;
}

absl::Status Store::PruneRounds(uint64_t job_id, uint64_t below_round) {
  Statement s(db_, "DELETE FROM rounds WHERE job_id = ? AND round < ?");
  return s.Int(static_cast<int64_t>(job_id))
      .Int(static_cast<int64_t>(below_round))
      .Run();
}

}  // namespace gasloc::coordinator
