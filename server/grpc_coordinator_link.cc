#include "server/grpc_coordinator_link.h"

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "grpcpp/create_channel.h"
#include "server/grpc_status.h"

namespace gasloc {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(10);

void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  // gRPC deadlines are real time.
  context->set_deadline(
      absl::ToChronoTime(RealClock::Get().Now() + timeout));
}

}  // namespace

absl::StatusOr<std::unique_ptr<GrpcCoordinatorLink>> GrpcCoordinatorLink::Create(
    const std::string& address, const CredentialsOptions& credentials,
    PeerRoster* roster) {
  ASSIGN_OR_RETURN(auto channel, MakeChannel(address, credentials));
  return std::unique_ptr<GrpcCoordinatorLink>(
      new GrpcCoordinatorLink(std::move(channel), roster));
}

GrpcCoordinatorLink::GrpcCoordinatorLink(std::shared_ptr<grpc::Channel> channel,
                                         PeerRoster* roster)
    : channel_(std::move(channel)),
      stub_(v1::Coordinator::NewStub(channel_)),
      roster_(roster) {}

absl::StatusOr<v1::RegisterWorkerResponse> GrpcCoordinatorLink::Register(
    const v1::WorkerInfo& info) {
  grpc::ClientContext context;
  SetDeadline(&context, kCallTimeout);
  v1::RegisterWorkerRequest request;
  *request.mutable_info() = info;
  v1::RegisterWorkerResponse response;
  RETURN_IF_ERROR(FromGrpcStatus(stub_->RegisterWorker(&context, request, &response)));
  return response;
}

absl::StatusOr<v1::HeartbeatResponse> GrpcCoordinatorLink::Heartbeat(
    const v1::HeartbeatRequest& request) {
  grpc::ClientContext context;
  SetDeadline(&context, kCallTimeout);
  v1::HeartbeatResponse response;
  RETURN_IF_ERROR(FromGrpcStatus(stub_->Heartbeat(&context, request, &response)));
  return response;
}

absl::Status GrpcCoordinatorLink::Leave(uint64_t worker_id,
                                      const std::string& reason) {
  grpc::ClientContext context;
  SetDeadline(&context, absl::Seconds(3));
  v1::LeaveWorkerRequest request;
  request.set_worker_id(worker_id);
  request.set_reason(reason);
  v1::LeaveWorkerResponse response;
  return FromGrpcStatus(stub_->LeaveWorker(&context, request, &response));
}

absl::StatusOr<v1::Assignment> GrpcCoordinatorLink::GetAssignment(
    const v1::GetAssignmentRequest& request) {
  grpc::ClientContext context;
  SetDeadline(&context, absl::Milliseconds(request.wait_ms()) + kCallTimeout);
  {
    absl::MutexLock lock(&mu_);
    if (cancelled_) return absl::CancelledError("worker is shutting down");
    waits_.insert(&context);
  }
  v1::GetAssignmentRequest sent = request;
  if (roster_ != nullptr) roster_->SayMembersHeld(sent);
  v1::Assignment response;
  grpc::Status status = stub_->GetAssignment(&context, sent, &response);
  {
    absl::MutexLock lock(&mu_);
    waits_.erase(&context);
  }
  RETURN_IF_ERROR(FromGrpcStatus(status));
  if (roster_ != nullptr) roster_->Learn(response);
  return response;
}

absl::Status GrpcCoordinatorLink::ReportRound(
    const v1::ReportRoundRequest& request) {
  grpc::ClientContext context;
  SetDeadline(&context, kCallTimeout);
  v1::ReportRoundResponse response;
  return FromGrpcStatus(stub_->ReportRound(&context, request, &response));
}

void GrpcCoordinatorLink::CancelWaits() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
  for (grpc::ClientContext* context : waits_) context->TryCancel();
}

}  // namespace gasloc
