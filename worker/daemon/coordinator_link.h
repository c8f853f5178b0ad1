// The worker daemon's link to the coordinator: the calls of the
// Coordinator service a worker makes (proto/gasloc/v1/coordinator.proto),
// as plain data in and absl::Status out. The daemon (worker_daemon.h) is
// written against this interface only; server/grpc_coordinator_link.h is
// the gRPC implementation and tests/worker/daemon/ has a fake coordinator
// that drops heartbeats, restarts, answers NOT_FOUND or hands out broken
// jobs.
//
// Errors follow the service: UNAVAILABLE / DEADLINE_EXCEEDED = the call may
// be retried; NOT_FOUND = the coordinator does not know this worker (it
// restarted or the lease expired: register again) or, with the kind
// JOB_NOT_FOUND (common/error_kind.h, carried over gRPC as the status's
// ErrorInfo), the job (IsUnknownJob: drop it); CANCELLED = CancelWaits was
// called.
//
// Thread safety: implementations must allow every method to be called
// concurrently (the daemon's round loop and heartbeat thread share it);
// CancelWaits() may be called from any thread and makes the in-flight and
// every later GetAssignment return CANCELLED at once.
#ifndef GASLOC_WORKER_DAEMON_COORDINATOR_LINK_H_
#define GASLOC_WORKER_DAEMON_COORDINATOR_LINK_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/error_kind.h"
#include "gasloc/v1/coordinator.pb.h"

namespace gasloc {

// True for the coordinator's NOT_FOUND about a job (kind JOB_NOT_FOUND,
// common/error_kind.h): the job is unknown (the coordinator lost its
// database), as opposed to an unknown worker (register again).
inline bool IsUnknownJob(const absl::Status& status) {
  return status.code() == absl::StatusCode::kNotFound &&
         HasErrorKind(status, kJobNotFound);
}

class CoordinatorLink {
 public:
  virtual ~CoordinatorLink() = default;

  // RegisterWorker: a (new) worker id and the lease.
  virtual absl::StatusOr<v1::RegisterWorkerResponse> Register(
      const v1::WorkerInfo& info) = 0;
  // Heartbeat with the worker's progress; the answer carries the lease and
  // whether to abandon the current job.
  virtual absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request) = 0;
  // LeaveWorker: the worker is going away on purpose.
  virtual absl::Status Leave(uint64_t worker_id, const std::string& reason) = 0;
  // The assignment long-poll: blocks up to request.wait_ms (plus a margin)
  // for the worker's next round (kind ROUND), STOP, or NONE.
  virtual absl::StatusOr<v1::Assignment> GetAssignment(
      const v1::GetAssignmentRequest& request) = 0;
  // ReportRound: what the worker measured in a round.
  virtual absl::Status ReportRound(const v1::ReportRoundRequest& request) = 0;
  // Aborts GetAssignment calls (shutdown).
  virtual void CancelWaits() = 0;
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_DAEMON_COORDINATOR_LINK_H_
