#include "server/coordinator_service.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "coordinator/round_planner.h"
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
    grpc::ServerContext* context, const v1::RegisterWorkerRequest* request,
    v1::RegisterWorkerResponse* response) {
  auto caller = Authorize(context, Role::kWorker, "RegisterWorker");
  if (!caller.ok()) return Counted("RegisterWorker", ToGrpcStatus(caller.status()));
  // The identity is the authenticated one, never what the request says.
  v1::RegisterWorkerRequest bound = *request;
  bound.mutable_info()->set_identity(caller->worker_name);
  auto registered = coordinator_->RegisterWorker(bound);
  if (registered.ok()) {
    absl::MutexLock lock(&mu_);
    owners_[registered->worker_id()] = caller->worker_name;
  }
  return Counted("RegisterWorker",
                 Unwrap(std::move(registered),
                        [&](auto r) { *response = std::move(r); }));
}

grpc::Status CoordinatorService::Heartbeat(grpc::ServerContext* context,
                                           const v1::HeartbeatRequest* request,
                                           v1::HeartbeatResponse* response) {
  if (absl::Status allowed =
          AuthorizeWorker(context, "Heartbeat", request->worker_id());
      !allowed.ok())
    return Counted("Heartbeat", ToGrpcStatus(allowed));
  return Counted("Heartbeat",
                 Unwrap(coordinator_->Heartbeat(*request),
                        [&](auto r) { *response = std::move(r); }));
}

grpc::Status CoordinatorService::LeaveWorker(
    grpc::ServerContext* context, const v1::LeaveWorkerRequest* request,
    v1::LeaveWorkerResponse*) {
  if (absl::Status allowed =
          AuthorizeWorker(context, "LeaveWorker", request->worker_id());
      !allowed.ok())
    return Counted("LeaveWorker", ToGrpcStatus(allowed));
  return Counted("LeaveWorker",
                 ToGrpcStatus(coordinator_->LeaveWorker(*request)));
}

grpc::Status CoordinatorService::ListWorkers(
    grpc::ServerContext* context, const v1::ListWorkersRequest* request,
    v1::ListWorkersResponse* response) {
  auto caller = Authorize(context, Role::kOperator, "ListWorkers");
  if (!caller.ok()) return Counted("ListWorkers", ToGrpcStatus(caller.status()));
  *response = coordinator_->ListWorkers(*request);
  return Counted("ListWorkers", grpc::Status::OK);
}

grpc::Status CoordinatorService::StartJob(grpc::ServerContext* context,
                                          const v1::StartJobRequest* request,
                                          v1::StartJobResponse* response) {
  auto caller = Authorize(context, Role::kOperator, "StartJob");
  if (!caller.ok()) return Counted("StartJob", ToGrpcStatus(caller.status()));
  return Counted(
      "StartJob",
      Unwrap(coordinator_->StartJob(request->spec()),
             [&](auto s) { *response->mutable_job() = std::move(s); }));
}

grpc::Status CoordinatorService::GetJob(grpc::ServerContext* context,
                                        const v1::GetJobRequest* request,
                                        v1::GetJobResponse* response) {
  auto caller = Authorize(context, Role::kOperator, "GetJob");
  if (!caller.ok()) return Counted("GetJob", ToGrpcStatus(caller.status()));
  return Counted(
      "GetJob",
      Unwrap(coordinator_->GetJob(request->job_id()),
             [&](auto s) { *response->mutable_job() = std::move(s); }));
}

grpc::Status CoordinatorService::ListJobs(grpc::ServerContext* context,
                                          const v1::ListJobsRequest*,
                                          v1::ListJobsResponse* response) {
  auto caller = Authorize(context, Role::kOperator, "ListJobs");
  if (!caller.ok()) return Counted("ListJobs", ToGrpcStatus(caller.status()));
  *response = coordinator_->ListJobs();
  return Counted("ListJobs", grpc::Status::OK);
}

grpc::Status CoordinatorService::StopJob(grpc::ServerContext* context,
                                         const v1::StopJobRequest* request,
                                         v1::StopJobResponse* response) {
  auto caller = Authorize(context, Role::kOperator, "StopJob");
  if (!caller.ok()) return Counted("StopJob", ToGrpcStatus(caller.status()));
  return Counted(
      "StopJob",
      Unwrap(coordinator_->StopJob(request->job_id(), request->reason()),
             [&](auto s) { *response->mutable_job() = std::move(s); }));
}

grpc::Status CoordinatorService::ResumeJob(
    grpc::ServerContext* context, const v1::ResumeJobRequest* request,
    v1::ResumeJobResponse* response) {
  auto caller = Authorize(context, Role::kOperator, "ResumeJob");
  if (!caller.ok()) return Counted("ResumeJob", ToGrpcStatus(caller.status()));
  return Counted(
      "ResumeJob",
      Unwrap(coordinator_->ResumeJob(request->job_id(), request->reason()),
             [&](auto s) { *response->mutable_job() = std::move(s); }));
}

grpc::Status CoordinatorService::WatchJob(
    grpc::ServerContext* context, const v1::WatchJobRequest* request,
    grpc::ServerWriter<v1::JobEvent>* writer) {
  auto caller = Authorize(context, Role::kOperator, "WatchJob");
  if (!caller.ok()) return Counted("WatchJob", ToGrpcStatus(caller.status()));
  return Counted("WatchJob", StreamJobEvents(context, request, writer));
}

grpc::Status CoordinatorService::ExportModel(
    grpc::ServerContext* context, const v1::ExportModelRequest* request,
    grpc::ServerWriter<v1::ExchangeChunk>* writer) {
  auto caller = Authorize(context, Role::kOperator, "ExportModel");
  if (!caller.ok())
    return Counted("ExportModel", ToGrpcStatus(caller.status()));
  if (options_.export_relay == nullptr)
    return Counted("ExportModel",
                   ToGrpcStatus(absl::FailedPreconditionError(
                       "this coordinator was started without a way to reach "
                       "the workers' Peer service")));
  auto sources =
      coordinator_->ModelSourcesOf(request->job_id(), request->worker_id());
  if (!sources.ok())
    return Counted("ExportModel", ToGrpcStatus(sources.status()));
  GASLOC_LOG(INFO) << "export of job " << request->job_id() << " asked by "
                   << caller->description;
  return Counted("ExportModel",
                 ToGrpcStatus(options_.export_relay->Relay(
                     context, *request, *sources, writer)));
}

grpc::Status CoordinatorService::StreamJobEvents(
    grpc::ServerContext* context, const v1::WatchJobRequest* request,
    grpc::ServerWriter<v1::JobEvent>* writer) {
  auto snapshot = coordinator_->WatchSnapshot(request->job_id());
  if (!snapshot.ok()) return ToGrpcStatus(snapshot.status());
  if (!writer->Write(snapshot->first)) return grpc::Status::CANCELLED;
  if (coordinator::IsEnded(snapshot->first.job().state()))
    return grpc::Status::OK;
  uint64_t seq = snapshot->second;
  const Clock& clock = *options_.clock;
  absl::Time last_sent = clock.Now();
  while (!context->IsCancelled() && !shutting_down_) {
    // Short waits so cancellation and shutdown are noticed promptly.
    auto batch = coordinator_->WaitJobEvents(request->job_id(), seq,
                                             absl::Milliseconds(250));
    if (!batch.ok()) return ToGrpcStatus(batch.status());
    seq = batch->next_seq;
    for (const v1::JobEvent& event : batch->events) {
      if (!writer->Write(event)) return grpc::Status::CANCELLED;
      last_sent = clock.Now();
    }
    if (batch->ended) return grpc::Status::OK;
    if (clock.Now() - last_sent >= options_.progress_interval) {
      auto status = coordinator_->GetJob(request->job_id());
      if (!status.ok()) return ToGrpcStatus(status.status());
      v1::JobEvent progress;
      progress.set_kind(v1::JOB_EVENT_KIND_PROGRESS);
      progress.set_unix_ms(absl::ToUnixMillis(clock.Now()));
      progress.set_description("progress");
      *progress.mutable_job() = std::move(*status);
      if (!writer->Write(progress)) return grpc::Status::CANCELLED;
      last_sent = clock.Now();
    }
  }
  return grpc::Status(grpc::StatusCode::CANCELLED, "watch ended");
}

grpc::Status CoordinatorService::GetAssignment(
    grpc::ServerContext* context, const v1::GetAssignmentRequest* request,
    v1::Assignment* response) {
  if (absl::Status allowed =
          AuthorizeWorker(context, "GetAssignment", request->worker_id());
      !allowed.ok())
    return Counted("GetAssignment", ToGrpcStatus(allowed));
  auto cancelled = [&] { return context->IsCancelled() || shutting_down_; };
  return Counted("GetAssignment",
                 Unwrap(coordinator_->GetAssignment(*request, cancelled),
                        [&](auto a) {
                          *response = std::move(a);
                          AddMembers(*request, response);
                          AddIdentities(response);
                        }));
}

grpc::Status CoordinatorService::ReportRound(
    grpc::ServerContext* context, const v1::ReportRoundRequest* request,
    v1::ReportRoundResponse*) {
  if (absl::Status allowed =
          AuthorizeWorker(context, "ReportRound", request->worker_id());
      !allowed.ok())
    return Counted("ReportRound", ToGrpcStatus(allowed));
  return Counted("ReportRound",
                 ToGrpcStatus(coordinator_->ReportRound(*request)));
}

absl::StatusOr<Caller> CoordinatorService::Authorize(
    grpc::ServerContext* context, Role role, absl::string_view method) const {
  if (options_.authenticator == nullptr)
    return absl::UnauthenticatedError(absl::StrCat(
        method, ": this server was started without an authenticator"));
  return options_.authenticator->Authorize(*context, role, method);
}

absl::Status CoordinatorService::AuthorizeWorker(grpc::ServerContext* context,
                                                 absl::string_view method,
                                                 uint64_t worker_id) {
  absl::StatusOr<Caller> caller = Authorize(context, Role::kWorker, method);
  if (!caller.ok()) return caller.status();
  return CheckActsFor(*caller, worker_id, method);
}

absl::Status CoordinatorService::CheckActsFor(const Caller& caller,
                                              uint64_t worker_id,
                                              absl::string_view method) {
  if (caller.worker_name.empty()) return absl::OkStatus();
  const std::optional<std::string> owner = OwnerOf(worker_id);
  // An id the coordinator does not know gets its NOT_FOUND from the
  // coordinator (the worker then registers again).
  if (!owner.has_value() || *owner == caller.worker_name)
    return absl::OkStatus();
  GASLOC_LOG(WARNING) << method << " for worker " << worker_id << " by "
                      << caller.description << " refused: registered by "
                      << (owner->empty() ? "an unbound caller" : *owner);
  return absl::PermissionDeniedError(absl::StrCat(
      method, ": worker ", worker_id, " was not registered by ",
      caller.description, "; a worker may act only for its own ids"));
}

std::optional<std::string> CoordinatorService::OwnerOf(uint64_t worker_id) {
  {
    absl::MutexLock lock(&mu_);
    auto it = owners_.find(worker_id);
    if (it != owners_.end()) return it->second;
  }
  v1::ListWorkersRequest everyone;
  everyone.set_include_gone(true);
  const v1::ListWorkersResponse workers = coordinator_->ListWorkers(everyone);
  std::optional<std::string> found;
  absl::MutexLock lock(&mu_);
  for (const v1::WorkerStatus& worker : workers.workers()) {
    owners_[worker.worker_id()] = worker.info().identity();
    if (worker.worker_id() == worker_id) found = worker.info().identity();
  }
  return found;
}

void CoordinatorService::AddMembers(const v1::GetAssignmentRequest& request,
                                    v1::Assignment* assignment) {
  if (assignment->kind() != v1::ASSIGNMENT_KIND_ROUND) return;
  auto members = coordinator_->GetJobMembers(assignment->job_id());
  if (!members.ok()) return;
  assignment->set_members_epoch(members->epoch);
  if (request.members_job_id() == assignment->job_id() &&
      request.members_epoch() == members->epoch)
    return;  // the caller holds this list
  for (uint64_t member : members->worker_ids)
    assignment->add_members()->set_worker_id(member);
}

void CoordinatorService::AddIdentities(v1::Assignment* assignment) {
  std::vector<v1::PeerAssignment*> entries;
  for (v1::PeerAssignment& peer : *assignment->mutable_peers())
    entries.push_back(&peer);
  for (v1::PeerAssignment& peer : *assignment->mutable_ring_order())
    entries.push_back(&peer);
  if (assignment->has_model_source())
    entries.push_back(assignment->mutable_model_source());
  for (v1::PeerAssignment& member : *assignment->mutable_members())
    entries.push_back(&member);
  // One lock for the whole assignment (a round's members are every worker
  // of the job); ids missing from the cache are looked up one by one.
  std::vector<v1::PeerAssignment*> missing;
  {
    absl::MutexLock lock(&mu_);
    for (v1::PeerAssignment* entry : entries) {
      if (entry->worker_id() == 0) continue;
      auto it = owners_.find(entry->worker_id());
      if (it != owners_.end())
        entry->set_identity(it->second);
      else
        missing.push_back(entry);
    }
  }
  for (v1::PeerAssignment* entry : missing)
    entry->set_identity(OwnerOf(entry->worker_id()).value_or(""));
}

grpc::Status CoordinatorService::Counted(absl::string_view method,
                                         grpc::Status status) const {
  if (options_.metrics != nullptr)
    options_.metrics->RecordRpc(
        method, static_cast<absl::StatusCode>(status.error_code()));
  return status;
}

}  // namespace gasloc
