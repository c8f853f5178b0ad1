#include "coordinator/store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/log.h"
#include "common/status_macros.h"

namespace gasloc::coordinator {

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
  // Reads the row's columns 0, 1, ... into `out...`, each by its type.
  template <typename... T>
  void Read(T&... out) {
    int c = 0;
    (Col(c++, out), ...);
  }
  double ColReal(int c) { return sqlite3_column_double(stmt_, c); }
  std::string ColText(int c) {
    const auto* p = sqlite3_column_blob(stmt_, c);
    const int n = sqlite3_column_bytes(stmt_, c);
    return p == nullptr ? std::string()
                        : std::string(static_cast<const char*>(p), n);
  }

 private:
  void Col(int c, int64_t& v) { v = ColInt(c); }
  void Col(int c, uint64_t& v) { v = static_cast<uint64_t>(ColInt(c)); }
  void Col(int c, uint32_t& v) { v = static_cast<uint32_t>(ColInt(c)); }
  void Col(int c, bool& v) { v = ColInt(c) != 0; }
  void Col(int c, double& v) { v = ColReal(c); }
  void Col(int c, float& v) { v = static_cast<float>(ColReal(c)); }
  void Col(int c, std::string& v) { v = ColText(c); }

  sqlite3* db_;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_OK;
  int index_ = 0;
};

std::string JoinIds(const std::vector<uint64_t>& ids) {
  return absl::StrJoin(ids, ",");
}

}  // namespace

// One bound parameter of a write statement.
struct Store::SqlValue {
  enum class Kind { kInt, kReal, kText, kBlob };
  SqlValue(int64_t v) : kind(Kind::kInt), i(v) {}  // NOLINT(runtime/explicit)
  SqlValue(uint64_t v) : SqlValue(static_cast<int64_t>(v)) {}  // NOLINT
  SqlValue(int v) : SqlValue(static_cast<int64_t>(v)) {}       // NOLINT
  SqlValue(uint32_t v) : SqlValue(static_cast<int64_t>(v)) {}  // NOLINT
  SqlValue(double v) : kind(Kind::kReal), r(v) {}              // NOLINT
  static SqlValue Text(std::string v) {
    return SqlValue(Kind::kText, std::move(v));
  }
  static SqlValue Blob(std::string v) {
    return SqlValue(Kind::kBlob, std::move(v));
  }

  Kind kind;
  int64_t i = 0;
  double r = 0;
  std::string s;

 private:
  SqlValue(Kind k, std::string v) : kind(k), s(std::move(v)) {}
};

// A column of a row to write: its name and value.
struct Store::Column {
  const char* name;
  SqlValue value;
};

absl::Status Store::Upsert(absl::string_view op, const char* table,
                           const std::vector<Column>& row) {
  std::vector<absl::string_view> names;
  std::vector<SqlValue> values;
  for (const Column& c : row) {
    names.push_back(c.name);
    values.push_back(c.value);
  }
  const std::vector<absl::string_view> marks(row.size(), "?");
  const std::string sql = absl::StrCat(
      "INSERT OR REPLACE INTO ", table, " (", absl::StrJoin(names, ", "),
      ") VALUES (", absl::StrJoin(marks, ", "), ")");
  return Write(op, sql.c_str(), values);
}

absl::Status Store::Write(absl::string_view op, const char* sql,
                          const std::vector<SqlValue>& values) {
  RETURN_IF_ERROR(Injected(op));
  Statement statement(db_, sql);
  for (const SqlValue& v : values) {
    if (v.kind == SqlValue::Kind::kInt) {
      statement.Int(v.i);
    } else if (v.kind == SqlValue::Kind::kReal) {
      statement.Real(v.r);
    } else if (v.kind == SqlValue::Kind::kText) {
      statement.Text(v.s);
    } else {
      statement.Blob(v.s);
    }
  }
  return statement.Run();
}

namespace {

// Runs the query `sql` with `key` bound to its parameters and makes one T
// of each row with `row` (which fails on a corrupt row).
template <typename T>
absl::StatusOr<std::vector<T>> Rows(sqlite3* db, const char* sql,
                                    std::initializer_list<uint64_t> key,
                                    absl::StatusOr<T> (*row)(Statement&)) {
  Statement q(db, sql);
  for (uint64_t k : key) q.Int(static_cast<int64_t>(k));
  std::vector<T> out;
  while (q.Next()) {
    absl::StatusOr<T> item = row(q);
    if (!item.ok()) return item.status();
    out.push_back(std::move(*item));
  }
  RETURN_IF_ERROR(q.status());
  return out;
}

// `field` names the column in the error.
absl::StatusOr<std::vector<uint64_t>> SplitIds(const std::string& text,
                                               absl::string_view field) {
  std::vector<uint64_t> ids;
  if (text.empty()) return ids;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    uint64_t id;
    if (!absl::SimpleAtoi(part, &id))
      return absl::DataLossError(
          absl::StrCat(field, " holds a bad id '", part, "'"));
    ids.push_back(id);
  }
  return ids;
}

// One row of each table (the columns in the order the Load* queries name).
absl::StatusOr<StoredWorker> WorkerRow(Statement& q) {
  StoredWorker w;
  std::string info;
  int64_t state;
  q.Read(w.worker_id, info, w.registered_unix_ms, state, w.job_id);
  w.state = static_cast<v1::WorkerState>(state);
  if (!w.info.ParseFromString(info))
    return absl::DataLossError(
        absl::StrCat("workers.info of worker ", w.worker_id, " is corrupt"));
  return w;
}

absl::StatusOr<StoredJob> JobRow(Statement& q) {
  StoredJob j;
  uint64_t id;
  std::string status, dropped;
  q.Read(id, status, j.stop_round, j.rounds_failed, j.rounds_decided,
         j.first_failure, dropped);
  if (!j.status.ParseFromString(status))
    return absl::DataLossError(
        absl::StrCat("jobs.status of job ", id, " is corrupt"));
  ASSIGN_OR_RETURN(j.dropped, SplitIds(dropped, "jobs.dropped"));
  return j;
}

absl::StatusOr<StoredMember> MemberRow(Statement& q) {
  StoredMember m;
  q.Read(m.job_id, m.worker_id, m.first_round, m.last_reported_round,
         m.steps_per_second, m.bytes_per_second, m.local_steps, m.train_loss,
         m.val_bpb, m.got_stop, m.consecutive_failures);
  return m;
}

absl::StatusOr<StoredEpoch> EpochRow(Statement& q) {
  StoredEpoch e;
  std::string members;
  q.Read(e.job_id, e.epoch, e.first_round, members);
  ASSIGN_OR_RETURN(e.members, SplitIds(members, "epochs.members"));
  return e;
}

absl::StatusOr<StoredRound> RoundRow(Statement& q) {
  StoredRound r;
  std::string budgets;
  q.Read(r.job_id, r.round, r.epoch, r.planned_unix_ms, r.deadline_unix_ms,
         budgets, r.schedule_begin, r.schedule_end);
  auto decoded = DecodeBudgets(budgets);
  if (!decoded.ok())
    return Annotate(decoded.status(),
                    absl::StrCat("job ", r.job_id, " round ", r.round));
  r.budgets = std::move(*decoded);
  return r;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Store>> Store::Open(
    const std::string& path, std::shared_ptr<StoreFaults> faults) {
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
    // WAL: readers never block the writer. NORMAL: a commit is written to
    // the WAL without a sync; SyncLog makes the commits durable, once for
    // many of them, before the coordinator replies (group_sync.h). Where
    // the file system cannot hold a WAL (SQLite keeps its rollback
    // journal), FULL: each commit syncs itself and SyncLog has nothing to
    // do.
    Statement mode(db, "PRAGMA journal_mode=WAL");
    if (!mode.Next())
      return Annotate(mode.status().ok() ? SqlError(db, "journal_mode")
                                         : mode.status(),
                      path);
    store->wal_ = mode.ColText(0) == "wal";
    if (!store->wal_)
      GASLOC_LOG(WARNING) << "database '" << path << "' cannot use a WAL "
                          << "(journal mode " << mode.ColText(0)
                          << "): every commit syncs itself, one at a time";
    RETURN_IF_ERROR(store->Exec(store->wal_ ? "PRAGMA synchronous=NORMAL"
                                            : "PRAGMA synchronous=FULL"));
  }
  RETURN_IF_ERROR(Annotate(store->Migrate(), path));
  // Faults apply to the calls after Open (the migrations run unharmed).
  store->faults_ = std::move(faults);
  return store;
}

Store::~Store() { sqlite3_close(db_); }

absl::Status Store::SyncLog() {
  RETURN_IF_ERROR(Injected("SyncLog"));
  if (!wal_) return absl::OkStatus();  // in memory, or commits synced (FULL)
  const char* db_file = sqlite3_db_filename(db_, "main");
  if (db_file == nullptr || *db_file == '\0') return absl::OkStatus();
  const std::string wal = sqlite3_filename_wal(db_file);
  const int fd = ::open(wal.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return absl::UnavailableError(absl::StrCat(
        "cannot open the database log '", wal, "': ", std::strerror(errno)));
  struct stat st{};
  int rc = ::fstat(fd, &st);
  if (rc == 0) rc = ::fdatasync(fd);
  const int saved = errno;
  ::close(fd);
  if (rc != 0)
    return absl::UnavailableError(absl::StrCat(
        "fdatasync of '", wal, "' failed: ", std::strerror(saved)));
  if (st.st_ino == synced_log_inode_) return absl::OkStatus();
  // A new log file: its directory entry must survive a power loss too.
  const std::string dir = wal.substr(0, wal.find_last_of('/') + 1);
  const int dir_fd = ::open(dir.empty() ? "." : dir.c_str(),
                            O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0 || ::fsync(dir_fd) != 0) {
    const int dir_errno = errno;
    if (dir_fd >= 0) ::close(dir_fd);
    return absl::UnavailableError(absl::StrCat(
        "fsync of the directory of '", wal, "' failed: ",
        std::strerror(dir_errno)));
  }
  ::close(dir_fd);
  synced_log_inode_ = st.st_ino;
  return absl::OkStatus();
}

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

absl::StatusOr<int> Store::SynchronousLevel() {
  Statement q(db_, "PRAGMA synchronous");
  if (!q.Next()) return q.status().ok() ? SqlError(db_, "synchronous")
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

absl::Status Store::Begin() {
  RETURN_IF_ERROR(Injected("Begin"));
  return Exec("BEGIN IMMEDIATE");
}

absl::Status Store::Commit() {
  RETURN_IF_ERROR(Injected("Commit"));
  return Exec("COMMIT");
}

void Store::Rollback() { Exec("ROLLBACK").IgnoreError(); }

absl::Status Store::PutWorker(const StoredWorker& w) {
  return Upsert("PutWorker", "workers",
                {{"worker_id", w.worker_id},
                 {"info", SqlValue::Blob(w.info.SerializeAsString())},
                 {"registered_unix_ms", w.registered_unix_ms},
                 {"state", w.state}, {"job_id", w.job_id}});
}

absl::StatusOr<std::vector<StoredWorker>> Store::LoadWorkers() {
  return Rows<StoredWorker>(db_,
                            "SELECT worker_id, info, registered_unix_ms, "
                            "state, job_id FROM workers ORDER BY worker_id",
                            {}, WorkerRow);
}

absl::Status Store::PutJob(const StoredJob& job) {
  const v1::JobStatus& st = job.status;
  return Upsert("PutJob", "jobs",
                {{"job_id", st.job_id()},
                 {"name", SqlValue::Text(st.spec().name())},
                 {"state", st.state()},
                 {"status", SqlValue::Blob(st.SerializeAsString())},
                 {"stop_round", job.stop_round},
                 {"rounds_failed", job.rounds_failed},
                 {"rounds_decided", job.rounds_decided},
                 {"first_failure", SqlValue::Text(job.first_failure)},
                 {"dropped", SqlValue::Text(JoinIds(job.dropped))}});
}

absl::StatusOr<std::vector<StoredJob>> Store::LoadJobs() {
  return Rows<StoredJob>(
      db_,
      "SELECT job_id, status, stop_round, rounds_failed, rounds_decided, "
      "first_failure, dropped FROM jobs ORDER BY job_id",
      {}, JobRow);
}

absl::Status Store::PutMember(const StoredMember& m) {
  return Upsert("PutMember", "job_members",
                {{"job_id", m.job_id}, {"worker_id", m.worker_id},
                 {"first_round", m.first_round},
                 {"last_reported_round", m.last_reported_round},
                 {"steps_per_second", m.steps_per_second},
                 {"bytes_per_second", m.bytes_per_second},
                 {"local_steps", m.local_steps},
                 {"train_loss", static_cast<double>(m.train_loss)},
                 {"val_bpb", static_cast<double>(m.val_bpb)},
                 {"got_stop", m.got_stop ? 1 : 0},
                 {"consecutive_failures", m.consecutive_failures}});
}

absl::Status Store::DeleteMember(uint64_t job_id, uint64_t worker_id) {
  return Write("DeleteMember",
               "DELETE FROM job_members WHERE job_id = ? AND worker_id = ?",
               {job_id, worker_id});
}

absl::StatusOr<std::vector<StoredMember>> Store::LoadMembers(uint64_t job_id) {
  return Rows<StoredMember>(
      db_,
      "SELECT job_id, worker_id, first_round, last_reported_round, "
      "steps_per_second, bytes_per_second, local_steps, train_loss, val_bpb, "
      "got_stop, consecutive_failures FROM job_members WHERE job_id = ? "
      "ORDER BY worker_id",
      {job_id}, MemberRow);
}

absl::Status Store::PutEpoch(const StoredEpoch& e) {
  return Upsert("PutEpoch", "epochs",
                {{"job_id", e.job_id}, {"epoch", e.epoch},
                 {"first_round", e.first_round},
                 {"members", SqlValue::Text(JoinIds(e.members))}});
}

absl::StatusOr<std::vector<StoredEpoch>> Store::LoadEpochs(uint64_t job_id) {
  return Rows<StoredEpoch>(db_,
                           "SELECT job_id, epoch, first_round, members FROM "
                           "epochs WHERE job_id = ? ORDER BY epoch",
                           {job_id}, EpochRow);
}

absl::Status Store::PutRound(const StoredRound& r) {
  return Upsert("PutRound", "rounds",
                {{"job_id", r.job_id}, {"round", r.round}, {"epoch", r.epoch},
                 {"planned_unix_ms", r.planned_unix_ms},
                 {"deadline_unix_ms", r.deadline_unix_ms},
                 {"budgets", SqlValue::Blob(EncodeBudgets(r.budgets))},
                 {"schedule_begin", r.schedule_begin},
                 {"schedule_end", r.schedule_end}});
}

absl::StatusOr<std::vector<StoredRound>> Store::LoadRounds(uint64_t job_id,
                                                          uint64_t min_round) {
  return Rows<StoredRound>(db_,
                           "SELECT job_id, round, epoch, planned_unix_ms, "
                           "deadline_unix_ms, budgets, schedule_begin, "
                           "schedule_end FROM rounds WHERE "
                           "job_id = ? AND round >= ? ORDER BY round",
                           {job_id, min_round}, RoundRow);
}

absl::Status Store::DeleteJob(uint64_t job_id) {
  for (const char* sql : {"DELETE FROM rounds WHERE job_id = ?",
                          "DELETE FROM epochs WHERE job_id = ?",
                          "DELETE FROM job_members WHERE job_id = ?",
                          "DELETE FROM jobs WHERE job_id = ?"}) {
    if (absl::Status s = Write("DeleteJob", sql, {job_id}); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status Store::PruneRounds(uint64_t job_id, uint64_t below_round) {
  return Write("PruneRounds",
               "DELETE FROM rounds WHERE job_id = ? AND round < ?",
               {job_id, below_round});
}

}  // namespace gasloc::coordinator
