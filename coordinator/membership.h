// The coordinator's worker registry: every worker ever seen (ids are never
// reused), which of them are alive, which of those are idle (bound to no
// job), and their leases. It decides nothing about jobs: the Coordinator
// binds and releases workers (SetJob) and persists what changes here.
//
//   register --> ALIVE (idle) --SetJob(job)--> ALIVE (bound) --SetJob(0)--> idle
//   ALIVE --lease expired (ExpireNext)--> DEAD;  ALIVE --Leave--> LEFT
//
// Leases are kept in memory only (a restarted coordinator gives every
// worker that was alive a fresh lease, Restore), ordered by expiry so that
// expiring them costs O(log n) per expired worker.
//
// Thread safety: not thread-safe; the Coordinator calls it under its mutex.
#ifndef GASLOC_COORDINATOR_MEMBERSHIP_H_
#define GASLOC_COORDINATOR_MEMBERSHIP_H_

#include <cstdint>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/store.h"
#include "gasloc/v1/coordinator.pb.h"

namespace gasloc::coordinator {

class Membership {
 public:
  // A live worker and the time since its last call (the gauges).
  struct Age {
    uint64_t worker_id = 0;
    double heartbeat_age_seconds = 0;
  };
  struct Worker {
    StoredWorker stored;  // persisted
    absl::Time lease_expiry;
    absl::Time last_heartbeat;
    v1::WorkerProgress progress;  // from the last heartbeat
  };

  explicit Membership(absl::Duration lease) : lease_(lease) {}

  // A new worker with the next id: ALIVE, idle, leased from `now`.
  Worker& Register(const v1::WorkerInfo& info, absl::Time now);
  // Loads the stored workers (ascending ids) into an empty registry; the
  // alive ones get a lease from `now` and are idle until SetJob binds them.
  void Restore(std::vector<StoredWorker> workers, absl::Time now);
  // After Restore: the memory-only state (leases, heartbeat times,
  // progress) of the workers `previous` knew, so rebuilding the registry
  // from the database keeps every lease where it was.
  void KeepLeasesOf(const Membership& previous);

  // The worker if it is alive, else NOT_FOUND naming it and why ("worker 7
  // is dead (its lease expired); register again").
  absl::StatusOr<Worker*> Live(uint64_t worker_id);
  Worker& at(uint64_t worker_id) { return workers_.at(worker_id); }
  Worker* Find(uint64_t worker_id);

  // Extends the lease to now + lease.
  void Renew(Worker& w, absl::Time now);
  // The next worker whose lease ran out by `now`, now DEAD and not idle
  // (still bound: the caller releases it); nullptr when there is none.
  Worker* ExpireNext(absl::Time now);
  // Marks the worker LEFT: its lease is dropped and it is not idle.
  void Leave(Worker& w);
  // Binds the worker to `job_id`, or releases it with 0 (idle again if
  // alive).
  void SetJob(Worker& w, uint64_t job_id);

  const std::set<uint64_t>& idle() const { return idle_; }
  std::map<uint64_t, Worker>& workers() { return workers_; }
  const std::map<uint64_t, Worker>& workers() const { return workers_; }
  size_t live_count() const { return leases_.size(); }

  // Lease length for RegisterWorkerResponse / HeartbeatResponse.
  uint32_t lease_ms() const;
  // One row of ListWorkers (without the job's local steps).
  v1::WorkerStatus StatusOf(const Worker& w, absl::Time now) const;
  // Every live worker with its heartbeat age, by id.
  std::vector<Age> LiveAges(absl::Time now) const;

 private:
  absl::Duration lease_;
  std::map<uint64_t, Worker> workers_;
  std::set<uint64_t> idle_;  // alive, no job
  std::set<std::pair<absl::Time, uint64_t>> leases_;  // alive workers
  uint64_t next_worker_id_ = 1;
};

}  // namespace gasloc::coordinator

#endif  // GASLOC_COORDINATOR_MEMBERSHIP_H_
