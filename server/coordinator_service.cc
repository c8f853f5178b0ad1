#include "server/coordinator_service.h"

#include <string>

#include "absl/time/clock.h"
#include "server/grpc_status.h"

namespace gasloc {

namespace {

template <typename T, typename F>
grpc::Status Unwrap(absl::StatusOr<T> result, F&& assign) {
  if (!result.ok()) return ToGrpcStatus(result.status());
  assign(std::move(*result));
  return grpc::Status::OK;
}

}  // namespace

CoordinatorService::CoordinatorService(coordinator::Coordinator* coordinator,
                                       CoordinatorServiceOptions options)
    : coordinator_(coordinator), options_(options) {}

grpc::Status CoordinatorService::RegisterWorker(
    grpc::ServerContext*, const v1::RegisterWorkerRequest* request,
    v1::RegisterWorkerResponse* response) {
  return Counted("RegisterWorker",
                 Unwrap(coordinator_->RegisterWorker(*request),
                        [&](auto r) { *response = std::move(r); }));
}

grpc::Status CoordinatorService::Heartbeat(grpc::ServerContext*,
                                           const v1::HeartbeatRequest* request,
                                           v1::HeartbeatResponse* response) {
  return Counted("Heartbeat",
                 Unwrap(coordinator_->Heartbeat(*request),
                        [&](auto r) { *response = std::move(r); }));
}

grpc::Status CoordinatorService::LeaveWorker(
    grpc::ServerContext*, const v1::LeaveWorkerRequest* request,
    v1::LeaveWorkerResponse*) {
  return Counted("LeaveWorker",
                 ToGrpcStatus(coordinator_->LeaveWorker(*request)));
}

grpc::Status CoordinatorService::ListWorkers(
    grpc::ServerContext*, const v1::ListWorkersRequest* request,
    v1::ListWorkersResponse* response) {
  *response = coordinator_->ListWorkers(*request);
  return Counted("ListWorkers", grpc::Status::OK);
}

grpc::Status CoordinatorService::StartJob(grpc::ServerContext*,
                                          const v1::StartJobRequest* request,
                                          v1::StartJobResponse* response) {
  return Counted(
      "StartJob",
      Unwrap(coordinator_->StartJob(request->spec()),
             [&](auto s) { *response->mutable_job() = std::move(s); }));
}

grpc::Status CoordinatorService::GetJob(grpc::ServerContext*,
                                        const v1::GetJobRequest* request,
                                        v1::GetJobResponse* response) {
  return Counted(
      "GetJob",
      Unwrap(coordinator_->GetJob(request->job_id()),
             [&](auto s) { *response->mutable_job() = std::move(s); }));
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext*,
                                          const v1::ListJobsRequest*,
                                          v1::ListJobsResponse* response) {
  *response = coordinator_->ListJobs();
  return Counted("ListJobs", grpc::Status::OK);
}

grpc::Status CoordinatorService::StopJob(grpc::ServerContext*,
                                         const v1::StopJobRequest* request,
                                         v1::StopJobResponse* response) {
  return Counted(
      "StopJob",
      Unwrap(coordinator_->StopJob(request->job_id(), request->reason()),
             [&](auto s) { *response->mutable_job() = std::move(s); }));
}

grpc::Status CoordinatorService::ResumeJob(
    grpc::ServerContext*, const v1::ResumeJobRequest* request,
    v1::ResumeJobResponse* response) {
  return Counted(
      "ResumeJob",
      Unwrap(coordinator_->ResumeJob(request->job_id(), request->reason()),
             [&](auto s) { *response->mutable_job() = std::move(s); }));
}

grpc::Status CoordinatorService::WatchJob(
    grpc::ServerContext* context, const v1::WatchJobRequest* request,
    grpc::ServerWriter<v1::JobEvent>* writer) {
  return Counted("WatchJob", StreamJobEvents(context, request, writer));
}

grpc::Status CoordinatorService::StreamJobEvents(
    grpc::ServerContext* context, const v1::WatchJobRequest* request,
    grpc::ServerWriter<v1::JobEvent>* writer) {
  auto snapshot = coordinator_->WatchSnapshot(request->job_id());
  if (!snapshot.ok()) return ToGrpcStatus(snapshot.status());
  const auto final_state = [](v1::JobState s) {
    return s == v1::JOB_STATE_FINISHED || s == v1::JOB_STATE_FAILED ||
           s == v1::JOB_STATE_STOPPED;
  };
  if (!writer->Write(snapshot->first)) return grpc::Status::CANCELLED;
  if (final_state(snapshot->first.job().state())) return grpc::Status::OK;
  uint64_t seq = snapshot->second;
  absl::Time last_sent = absl::Now();
  while (!context->IsCancelled() && !shutting_down_) {
    // Short waits so cancellation and shutdown are noticed promptly.
    auto batch = coordinator_->WaitJobEvents(request->job_id(), seq,
                                             absl::Milliseconds(250));
    if (!batch.ok()) return ToGrpcStatus(batch.status());
    seq = batch->next_seq;
    for (const v1::JobEvent& event : batch->events) {
      if (!writer->Write(event)) return grpc::Status::CANCELLED;
      last_sent = absl::Now();
    }
    if (batch->ended) return grpc::Status::OK;
    if (absl::Now() - last_sent >= options_.progress_interval) {
      auto status = coordinator_->GetJob(request->job_id());
      if (!status.ok()) return ToGrpcStatus(status.status());
      v1::JobEvent progress;
      progress.set_kind(v1::JOB_EVENT_KIND_PROGRESS);
      progress.set_unix_ms(absl::ToUnixMillis(absl::Now()));
      progress.set_description("progress");
      *progress.mutable_job() = std::move(*status);
      if (!writer->Write(progress)) return grpc::Status::CANCELLED;
      last_sent = absl::Now();
    }
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "watch ended");
}

grpc::Status CoordinatorService::GetAssignment(
    grpc::ServerContext* context, const v1::GetAssignmentRequest* request,
    v1::Assignment* response) {
  auto cancelled = [&] { return context->IsCancelled() || shutting_down_; };
  return Counted("GetAssignment",
                 Unwrap(coordinator_->GetAssignment(*request, cancelled),
                        [&](auto a) { *response = std::move(a); }));
}

grpc::Status CoordinatorService::ReportRound(
    grpc::ServerContext*, const v1::ReportRoundRequest* request,
    v1::ReportRoundResponse*) {
  return Counted("ReportRound",
                 ToGrpcStatus(coordinator_->ReportRound(*request)));
}

grpc::Status CoordinatorService::Counted(absl::string_view method,
                                         grpc::Status status) const {
  if (options_.metrics != nullptr)
    options_.metrics->RecordRpc(
        method, static_cast<absl::StatusCode>(status.error_code()));
  return status;
}

}  // namespace gasloc
