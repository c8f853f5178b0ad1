// The gRPC Coordinator service (proto/gasloc/v1/coordinator.proto): a thin
// layer that translates each RPC into a call on coordinator::Coordinator and
// its absl::Status into a grpc::Status with the same code and message.
// WatchJob streams the SNAPSHOT, then the job's events, plus a PROGRESS
// event whenever nothing happened for `progress_interval`, until the job
// ends, the client cancels, or the server shuts down.
//
// Thread safety: gRPC calls the handlers from many threads; the
// Coordinator is thread-safe and this class holds no other state besides
// the shutdown flag (atomic).
#ifndef GASLOC_SERVER_COORDINATOR_SERVICE_H_
#define GASLOC_SERVER_COORDINATOR_SERVICE_H_

#include <atomic>

#include "absl/time/time.h"
#include "coordinator/coordinator.h"
#include "gasloc/v1/coordinator.grpc.pb.h"

namespace gasloc {

struct CoordinatorServiceOptions {
  // A WatchJob stream sends a PROGRESS event after this long without events.
  absl::Duration progress_interval = absl::Seconds(2);
  // Counts every RPC by method and every error by method and code; not
  // owned, null = no metrics.
  coordinator::CoordinatorMetrics* metrics = nullptr;
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
  // Records the RPC in the metrics and returns `status`.
  grpc::Status Counted(absl::string_view method, grpc::Status status) const;

  coordinator::Coordinator* const coordinator_;
  const CoordinatorServiceOptions options_;
  std::atomic<bool> shutting_down_{false};
};

}  // namespace gasloc

#endif  // GASLOC_SERVER_COORDINATOR_SERVICE_H_
