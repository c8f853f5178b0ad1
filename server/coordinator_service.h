// The gRPC Coordinator service (proto/gasloc/v1/coordinator.proto): a thin
// layer that translates each RPC into a call on coordinator::Coordinator and
// its absl::Status into a grpc::Status with the same code and message.
// WatchJob streams the SNAPSHOT, then the job's events, plus a PROGRESS
// event whenever nothing happened for `progress_interval`, until the job
// ends, the client cancels, or the server shuts down.
//
// Every handler first asks the Authenticator (server/auth.h) whether the
// caller holds the RPC's role: operator for job control, ListWorkers and
// ExportModel (relayed from a member by ModelExportRelay),
// worker for membership, assignments and reports. A caller bound to a
// worker name registers under that name (WorkerInfo.identity) and may then
// act only for the worker ids registered under it (PERMISSION_DENIED
// otherwise). Assignments carry every peer's and member's identity so the
// Peer services can check who sends (docs/security.md).
//
// Thread safety: gRPC calls the handlers from many threads; the
// Coordinator is thread-safe; the owner cache is guarded by mu_ and the
// shutdown flag is atomic.
#ifndef GASLOC_SERVER_COORDINATOR_SERVICE_H_
#define GASLOC_SERVER_COORDINATOR_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"

#include "absl/time/time.h"
#include "common/clock.h"
#include "coordinator/coordinator.h"
#include "gasloc/v1/coordinator.grpc.pb.h"
#include "server/auth.h"
#include "server/model_export_relay.h"

namespace gasloc {

struct CoordinatorServiceOptions {
  // A WatchJob stream sends a PROGRESS event after this long without events.
  absl::Duration progress_interval = absl::Seconds(2);
  // Counts every RPC by method and every error by method and code; not
  // owned, null = no metrics.
  coordinator::CoordinatorMetrics* metrics = nullptr;
  // Who may call what; not owned. Null = every call is refused
  // (UNAUTHENTICATED): a server without authentication must be asked for
  // with an insecure Authenticator.
  const Authenticator* authenticator = nullptr;
  // The clock of WatchJob's progress interval and timestamps (not owned).
  // Real time: a watch's waits are real-time waits (Coordinator::
  // WaitJobEvents).
  const Clock* clock = &RealClock::Get();
  // Fetches a job's model from a member for ExportModel (not owned). Null
  // = ExportModel is refused (FAILED_PRECONDITION).
  const ModelExportRelay* export_relay = nullptr;
};

class CoordinatorService final : public v1::Coordinator::Service {
 public:
  CoordinatorService(coordinator::Coordinator* coordinator,
                     CoordinatorServiceOptions options = {});

  // Ends open WatchJob streams (call before the server's Shutdown).
  void BeginShutdown() { shutting_down_ = true; }

  grpc::Status RegisterWorker(grpc::ServerContext* context,
                              const v1::RegisterWorkerRequest* request,
                              v1::RegisterWorkerResponse* response) override;
  grpc::Status Heartbeat(grpc::ServerContext* context,
                         const v1::HeartbeatRequest* request,
                         v1::HeartbeatResponse* response) override;
  grpc::Status LeaveWorker(grpc::ServerContext* context,
                           const v1::LeaveWorkerRequest* request,
                           v1::LeaveWorkerResponse* response) override;
  grpc::Status ListWorkers(grpc::ServerContext* context,
                           const v1::ListWorkersRequest* request,
                           v1::ListWorkersResponse* response) override;
  grpc::Status StartJob(grpc::ServerContext* context,
                        const v1::StartJobRequest* request,
                        v1::StartJobResponse* response) override;
  grpc::Status GetJob(grpc::ServerContext* context,
                      const v1::GetJobRequest* request,
                      v1::GetJobResponse* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context,
                        const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status StopJob(grpc::ServerContext* context,
                       const v1::StopJobRequest* request,
                       v1::StopJobResponse* response) override;
  grpc::Status ResumeJob(grpc::ServerContext* context,
                         const v1::ResumeJobRequest* request,
                         v1::ResumeJobResponse* response) override;
  grpc::Status WatchJob(grpc::ServerContext* context,
                        const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::JobEvent>* writer) override;
  grpc::Status ExportModel(grpc::ServerContext* context,
                           const v1::ExportModelRequest* request,
                           grpc::ServerWriter<v1::ExchangeChunk>* writer) override;
  grpc::Status GetAssignment(grpc::ServerContext* context,
                             const v1::GetAssignmentRequest* request,
                             v1::Assignment* response) override;
  grpc::Status ReportRound(grpc::ServerContext* context,
                           const v1::ReportRoundRequest* request,
                           v1::ReportRoundResponse* response) override;

 private:
  // WatchJob's stream (WatchJob counts its outcome).
  grpc::Status StreamJobEvents(grpc::ServerContext* context,
                               const v1::WatchJobRequest* request,
                               grpc::ServerWriter<v1::JobEvent>* writer);
  // The caller if it may call `method` (needs `role`); the refusal status
  // otherwise.
  absl::StatusOr<Caller> Authorize(grpc::ServerContext* context, Role role,
                                   absl::string_view method) const;
  // Authorize(kWorker) and CheckActsFor in one: OK when the caller is a
  // worker that may act for `worker_id`.
  absl::Status AuthorizeWorker(grpc::ServerContext* context,
                               absl::string_view method, uint64_t worker_id);
  // OK when `caller` may act for `worker_id`: unbound callers may; a
  // caller bound to a name only for ids registered under that name.
  absl::Status CheckActsFor(const Caller& caller, uint64_t worker_id,
                            absl::string_view method);
  // The identity worker_id registered with; nullopt when the coordinator
  // does not know the id.
  std::optional<std::string> OwnerOf(uint64_t worker_id);
  // Lists the job's members in a round assignment unless `request` says
  // the caller holds the job's current list (GetAssignmentRequest
  // .members_epoch), and sets Assignment.members_epoch.
  void AddMembers(const v1::GetAssignmentRequest& request,
                  v1::Assignment* assignment);
  // Fills in the identity of every peer, ring member, model source and job
  // member of `assignment`.
  void AddIdentities(v1::Assignment* assignment);
  // Records the RPC in the metrics and returns `status`.
  grpc::Status Counted(absl::string_view method, grpc::Status status) const;

  coordinator::Coordinator* const coordinator_;
  const CoordinatorServiceOptions options_;
  std::atomic<bool> shutting_down_{false};
  absl::Mutex mu_;
  // worker id -> WorkerInfo.identity, filled at registration and from
  // ListWorkers on a miss (ids registered before a restart).
  absl::flat_hash_map<uint64_t, std::string> owners_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gasloc

#endif  // GASLOC_SERVER_COORDINATOR_SERVICE_H_
