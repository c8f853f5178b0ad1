// The worker daemon's CoordinatorLink over gRPC (Coordinator service):
// registration, heartbeats, leave, the assignment long-poll and round
// reports, each call with a deadline and its gRPC status turned into an
// absl::Status (server/grpc_status.h). No decision is taken here: what to
// do with an answer is worker/daemon/'s business.
//
// Thread safety: all methods may be called concurrently (gRPC stubs are
// thread-safe); CancelWaits() aborts an in-flight GetAssignment from any
// thread (used on SIGTERM). Every assignment is shown to the PeerRoster
// (if given) before the daemon sees it, so the Peer service knows the
// identities of the peers it is scheduled with.
#ifndef GASLOC_SERVER_GRPC_COORDINATOR_LINK_H_
#define GASLOC_SERVER_GRPC_COORDINATOR_LINK_H_

#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gasloc/v1/coordinator.grpc.pb.h"
#include "server/credentials.h"
#include "server/peer_roster.h"
#include "worker/daemon/coordinator_link.h"

namespace gasloc {

class GrpcCoordinatorLink final : public CoordinatorLink {
 public:
  static absl::StatusOr<std::unique_ptr<GrpcCoordinatorLink>> Create(
      const std::string& address, const CredentialsOptions& credentials,
      PeerRoster* roster = nullptr);

  absl::StatusOr<v1::RegisterWorkerResponse> Register(
      const v1::WorkerInfo& info) override;
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request) override;
  absl::Status Leave(uint64_t worker_id, const std::string& reason) override;
  absl::StatusOr<v1::Assignment> GetAssignment(
      const v1::GetAssignmentRequest& request) override;
  absl::Status ReportRound(const v1::ReportRoundRequest& request) override;
  void CancelWaits() override;

 private:
  GrpcCoordinatorLink(std::shared_ptr<grpc::Channel> channel,
                      PeerRoster* roster);
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
  PeerRoster* const roster_;  // not owned; may be null
  absl::Mutex mu_;
  std::set<grpc::ClientContext*> waits_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gasloc

#endif  // GASLOC_SERVER_GRPC_COORDINATOR_LINK_H_
