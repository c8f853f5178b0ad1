// Group commit for the coordinator's database: commits are written to
// SQLite's log without a sync, under the coordinator's lock, and a call's
// reply waits (with the lock released) until one sync has covered every
// commit made before it. One fdatasync then serves every call that
// committed while the previous one ran, instead of one fsync per commit
// held under the lock (which serialised the whole coordinator behind the
// disk: at 1,000 simulated workers a heartbeat's p99 went from 8 to 100 ms,
// docs/benchmarks.md "Coordinator under simulated workers").
//
//   GroupSync sync([&] { return store.SyncLog(); });
//   ... under the coordinator's lock, after each COMMIT that wrote:
//   sync.Committed();
//   ... after releasing the lock, before replying:
//   RETURN_IF_ERROR(sync.AwaitDurable());
//
// A failed sync is final: the data it was to cover may be lost (Linux may
// drop the failed pages and report success to a later fsync), so every
// later AwaitDurable fails too, naming the first failure, until the
// coordinator is restarted and recovers from what is on disk.
//
// Thread safety: all methods may be called from any thread; `sync` runs on
// one caller's thread at a time, with no lock of this class held.
#ifndef GASLOC_COORDINATOR_GROUP_SYNC_H_
#define GASLOC_COORDINATOR_GROUP_SYNC_H_

#include <cstdint>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

namespace gasloc::coordinator {

class GroupSync {
 public:
  // `sync` makes every commit written so far durable.
  explicit GroupSync(std::function<absl::Status()> sync);

  // One more commit written (not yet durable).
  void Committed();
  // Returns once every commit counted before this call is durable: runs
  // `sync` itself unless one that started after those commits is running,
  // then waits for that one. UNAVAILABLE when a sync failed (now or before).
  absl::Status AwaitDurable();

  // Syncs run so far (tests and metrics: how many commits one sync served).
  uint64_t syncs() const;

 private:
  const std::function<absl::Status()> sync_;
  mutable absl::Mutex mu_;
  uint64_t committed_ ABSL_GUARDED_BY(mu_) = 0;
  // Commits that a finished sync covered.
  uint64_t durable_ ABSL_GUARDED_BY(mu_) = 0;
  bool syncing_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t syncs_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status failed_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gasloc::coordinator

#endif  // GASLOC_COORDINATOR_GROUP_SYNC_H_
