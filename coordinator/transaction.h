// One SQLite transaction of a coordinator call, as a scoped object: the
// constructor begins it, Commit() commits it, and the destructor rolls it
// back if it was not committed (an early return, a failed write). Writes go
// through Write(): after the first failure the later writes are skipped, so
// nothing after a failed write reaches the database, and Commit() reports
// that first failure as UNAVAILABLE (the call may be retried).
//
// Side effects that must happen only once the change is durable (metrics)
// are queued with OnCommit() and run by a successful Commit(), in order.
//
// A null store (a coordinator with no database) commits every time.
//
//   Transaction txn(store);
//   txn.Write([&](Store& s) { return s.PutWorker(w); });
//   RETURN_IF_ERROR(txn.Commit());
//
// Thread safety: not thread-safe; one call's transaction lives on the
// calling thread, under the coordinator's mutex.
#ifndef GASLOC_COORDINATOR_TRANSACTION_H_
#define GASLOC_COORDINATOR_TRANSACTION_H_

#include <functional>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "coordinator/store.h"

namespace gasloc::coordinator {

class Transaction {
 public:
  // Begins a transaction on `store` (not owned; may be null). A failed
  // begin is remembered: every write is skipped and Commit() fails.
  explicit Transaction(Store* store);
  // Rolls back unless Commit() succeeded.
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  // Runs `write` on the store unless an earlier step failed (or there is
  // no store); keeps its error.
  void Write(absl::FunctionRef<absl::Status(Store&)> write);
  // Queues `action` to run after a successful commit.
  void OnCommit(std::function<void()> action);

  // Commits (once). On any failure (begin, a write, the commit itself)
  // rolls back and returns UNAVAILABLE naming the cause; the queued
  // actions are dropped.
  absl::Status Commit();

  // The first failure so far (OK = none).
  const absl::Status& error() const { return error_; }

 private:
  Store* const store_;
  absl::Status error_;
  bool open_ = false;  // BEGIN succeeded, not yet committed or rolled back
  bool finished_ = false;
  std::vector<std::function<void()>> on_commit_;
};

}  // namespace gasloc::coordinator

#endif  // GASLOC_COORDINATOR_TRANSACTION_H_
