#include "server/model_export_relay.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/status_macros.h"
#include "gasloc/v1/peer.grpc.pb.h"
#include "grpcpp/client_context.h"
#include "server/grpc_status.h"

namespace gasloc {

ModelExportRelay::Attempt ModelExportRelay::RelayFrom(
    grpc::ServerContext* context, const v1::ExportModelRequest& request,
    const coordinator::ModelSources::Member& member,
    grpc::ServerWriter<v1::ExchangeChunk>* writer) const {
  Attempt attempt;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel =
      dial_(member.address);
  if (!channel.ok()) {
    attempt.status = channel.status();
    return attempt;
  }
  auto stub = v1::Peer::NewStub(*channel);
  std::unique_ptr<grpc::ClientContext> upstream =
      grpc::ClientContext::FromServerContext(*context);
  v1::FetchModelRequest fetch;
  fetch.set_job_id(request.job_id());
  fetch.set_requester_id(0);  // the coordinator is no worker
  fetch.set_encoding(request.encoding());
  fetch.set_chunk_bytes(request.chunk_bytes());
  fetch.set_parameters_only(true);
  auto reader = stub->FetchModel(upstream.get(), fetch);
  v1::ExchangeChunk chunk;
  while (reader->Read(&chunk)) {
    if (!writer->Write(chunk)) {
      upstream->TryCancel();
      reader->Finish().ok();  // cancelled by us: the operator went away
      attempt.status = absl::CancelledError(
          "the operator ended the export while it was relayed");
      return attempt;
    }
    attempt.started = true;
    ++attempt.chunks;
    attempt.bytes += chunk.payload().size();
  }
  attempt.status = FromGrpcStatus(reader->Finish());
  if (attempt.status.ok() && !attempt.started)
    attempt.status = absl::DataLossError("the member sent no chunk");
  return attempt;
}

absl::Status ModelExportRelay::Relay(
    grpc::ServerContext* context, const v1::ExportModelRequest& request,
    const coordinator::ModelSources& sources,
    grpc::ServerWriter<v1::ExchangeChunk>* writer) const {
  std::vector<std::string> reasons = sources.unavailable;
  for (const auto& member : sources.members) {
    const absl::Time start = RealClock::Get().Now();
    Attempt attempt = RelayFrom(context, request, member, writer);
    const std::string from = absl::StrCat("worker ", member.worker_id, " at ",
                                          member.address);
    if (attempt.status.ok()) {
      GASLOC_LOG(INFO) << "export of job " << request.job_id() << ": "
                       << attempt.bytes << " bytes in " << attempt.chunks
                       << " chunks relayed from " << from << " in "
                       << RealClock::Get().Now() - start;
      return absl::OkStatus();
    }
    if (attempt.started || absl::IsCancelled(attempt.status)) {
      GASLOC_LOG(WARNING) << "export of job " << request.job_id() << " from "
                          << from << " broke off after " << attempt.chunks
                          << " chunks: " << attempt.status;
      return Annotate(attempt.status,
                      absl::StrCat("export of job ", request.job_id(),
                                   " from ", from, " broke off after ",
                                   attempt.chunks, " chunks"));
    }
    GASLOC_LOG(WARNING) << "export of job " << request.job_id() << ": "
                        << from << " did not serve the model: "
                        << attempt.status;
    reasons.push_back(absl::StrCat(from, ": ", attempt.status.message()));
  }
  return absl::UnavailableError(
      absl::StrCat("no member of job ", request.job_id(),
                   " served its model: ", absl::StrJoin(reasons, "; ")));
}

}  // namespace gasloc
