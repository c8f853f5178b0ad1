// The worker daemon's client of the Coordinator service: registration,
// heartbeats, leave, the assignment long-poll and round reports, with
// deadlines on every call and gRPC statuses turned into absl::Status.
//
// Thread safety: all methods may be called concurrently (gRPC stubs are
// thread-safe); CancelWaits() aborts an in-flight GetAssignment from any
// thread (used on SIGTERM).
#ifndef GASLOC_SERVER_COORDINATOR_CLIENT_H_
#define GASLOC_SERVER_COORDINATOR_CLIENT_H_

#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "gasloc/v1/coordinator.grpc.pb.h"
#include "server/credentials.h"

namespace gasloc {

// grpc::Status -> absl::Status with the same code and message.
absl::Status FromGrpc(const grpc::Status& status);

class CoordinatorClient {
 public:
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Create(
      const std::string& address, const CredentialsOptions& credentials);

  absl::StatusOr<v1::RegisterWorkerResponse> Register(
      const v1::WorkerInfo& info);
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request);
  absl::Status Leave(uint64_t worker_id, const std::string& reason);
  // Blocks up to request.wait_ms on the coordinator (plus a margin here).
  absl::StatusOr<v1::Assignment> GetAssignment(
      const v1::GetAssignmentRequest& request);
  absl::Status ReportRound(const v1::ReportRoundRequest& request);
  void CancelWaits();

 private:
  explicit CoordinatorClient(std::shared_ptr<grpc::Channel> channel);
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  absl::Mutex mu_;
  std::set<grpc::ClientContext*> waits_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gasloc

#endif  // GASLOC_SERVER_COORDINATOR_CLIENT_H_
