#include "server/job_export_client.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/arena.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "grpcpp/client_context.h"
#include "server/grpc_status.h"
#include "worker/exchange/model_fetch.h"
#include "worker/model/model.h"

namespace gasloc {
namespace {

absl::StatusOr<v1::JobStatus> GetJob(v1::Coordinator::Stub& stub,
                                     uint64_t job_id, absl::Time deadline) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::GetJobResponse response;
  RETURN_IF_ERROR(FromGrpcStatus(stub.GetJob(&context, request, &response)));
  return response.job();
}

// One member's parameters (worker_id 0 = whichever member serves them),
// checked against the spec's model size.
absl::StatusOr<FetchedModel> FetchParameters(
    v1::Coordinator::Stub& stub, uint64_t job_id, uint64_t worker_id,
    uint64_t elements, const JobExportOptions& options, absl::Time deadline,
    uint64_t* bytes_received) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(deadline));
  v1::ExportModelRequest request;
  request.set_job_id(job_id);
  request.set_worker_id(worker_id);
  auto reader = stub.ExportModel(&context, request);
  ModelAssembler assembler(job_id, /*requester_id=*/0, elements, elements);
  v1::ExchangeChunk chunk;
  const uint64_t total_bytes = elements * sizeof(float);
  uint64_t received = 0, next_report = total_bytes / 10;
  while (reader->Read(&chunk)) {
    if (absl::Status added = assembler.Add(chunk); !added.ok()) {
      context.TryCancel();
      reader->Finish().ok();  // cancelled by us; the bad chunk matters
      return Annotate(added, "the exported model's chunks");
    }
    received += chunk.payload().size();
    if (options.progress && received >= next_report && received < total_bytes) {
      options.progress(absl::StrFormat(
          "received %.1f of %.1f MB from worker %d", received / 1e6,
          total_bytes / 1e6, chunk.header().sender_id()));
      next_report += total_bytes / 10;
    }
  }
  RETURN_IF_ERROR(FromGrpcStatus(reader->Finish()));
  *bytes_received += received;
  ASSIGN_OR_RETURN(FetchedModel model, assembler.Finish());
  if (worker_id != 0 && model.sender_id != worker_id)
    return absl::DataLossError(absl::StrCat(
        "asked for worker ", worker_id, "'s model, received worker ",
        model.sender_id, "'s"));
  return model;
}

}  // namespace

absl::StatusOr<JobExportResult> ExportJob(v1::Coordinator::Stub& stub,
                                          uint64_t job_id,
                                          const JobExportOptions& options) {
  const absl::Time deadline = RealClock::Get().Now() + options.timeout;
  JobExportResult result;
  ASSIGN_OR_RETURN(result.job, GetJob(stub, job_id, deadline));
  const v1::JobStatus& job = result.job;
  const ModelConfig config = ModelConfigFromSpec(job.spec().model());
  FloatArena params(MakeModelLayout(config));
  std::vector<uint64_t> wanted = {options.worker_id};
  if (options.average) {
    wanted.assign(job.worker_ids().begin(), job.worker_ids().end());
    if (wanted.empty())
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job_id, " has no members whose models could be averaged"));
  }
  std::fill(params.flat().begin(), params.flat().end(), 0.0f);
  for (uint64_t worker_id : wanted) {
    absl::StatusOr<FetchedModel> model =
        FetchParameters(stub, job_id, worker_id, params.size(), options,
                        deadline, &result.bytes_received);
    if (!model.ok())
      return Annotate(model.status(),
                      worker_id == 0
                          ? absl::StrCat("export of job ", job_id)
                          : absl::StrCat("export of job ", job_id,
                                         " from worker ", worker_id));
    float* sum = params.data();
    for (size_t i = 0; i < params.size(); ++i) sum[i] += model->params[i];
    result.members.push_back(model->sender_id);
  }
  const float scale = 1.0f / static_cast<float>(wanted.size());
  for (float& v : params.flat()) v *= scale;

  ExportOptions exported;
  exported.dtype = options.dtype;
  exported.spec = job.spec();
  exported.metrics = {
      {"rounds_completed", static_cast<double>(job.rounds_completed())},
      {"tokens", static_cast<double>(job.tokens())}};
  if (job.val_bpb() > 0) exported.metrics["val_bpb"] = job.val_bpb();
  if (job.train_loss() > 0) exported.metrics["train_loss"] = job.train_loss();
  if (result.members.size() > 1)
    exported.metrics["members"] = static_cast<double>(result.members.size());
  exported.values = {
      {"source", "gaslocctl job export"},
      {"job_id", absl::StrCat(job_id)},
      {"job_state", v1::JobState_Name(job.state())},
      {"worker_ids", absl::StrJoin(result.members, ",")}};
  RETURN_IF_ERROR(ExportModel(options.out_dir, config, params, exported));
  return result;
}

}  // namespace gasloc
