// A CoordinatorLink for daemon tests that calls a coordinator::Coordinator
// directly (no gRPC): the worker daemon against the real coordinator state
// machine in one process. CancelWaits does nothing (tests keep
// assignment_wait short).
//
// Thread safety: as the Coordinator (every method may be called
// concurrently).
#ifndef GASLOC_TESTS_WORKER_DAEMON_DIRECT_LINK_H_
#define GASLOC_TESTS_WORKER_DAEMON_DIRECT_LINK_H_

#include <cstdint>
#include <string>

#include "coordinator/coordinator.h"
#include "worker/daemon/coordinator_link.h"

namespace gasloc::testing {

class DirectLink final : public CoordinatorLink {
 public:
  explicit DirectLink(coordinator::Coordinator* c) : c_(c) {}
  absl::StatusOr<v1::RegisterWorkerResponse> Register(
      const v1::WorkerInfo& info) override {
    v1::RegisterWorkerRequest request;
    *request.mutable_info() = info;
    return c_->RegisterWorker(request);
  }
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request) override {
    return c_->Heartbeat(request);
  }
  absl::Status Leave(uint64_t worker_id, const std::string& reason) override {
    v1::LeaveWorkerRequest request;
    request.set_worker_id(worker_id);
    request.set_reason(reason);
    return c_->LeaveWorker(request);
  }
  absl::StatusOr<v1::Assignment> GetAssignment(
      const v1::GetAssignmentRequest& request) override {
    return c_->GetAssignment(request);
  }
  absl::Status ReportRound(const v1::ReportRoundRequest& request) override {
    return c_->ReportRound(request);
  }
  void CancelWaits() override {}

 private:
  coordinator::Coordinator* const c_;
};

}  // namespace gasloc::testing

#endif  // GASLOC_TESTS_WORKER_DAEMON_DIRECT_LINK_H_
