// gaslocctl job export: a job's model, taken out through the coordinator
// (its ExportModel relays a member's Peer.FetchModel) and written as
// model.safetensors + config.json (worker/train/export.h), with the job's
// spec and final figures as metadata. The chunks are checked as a joining
// worker checks them (worker/exchange/model_fetch.h: CRC, geometry, finite
// values, the spec's model size) before anything is written, and the
// files are written atomically: a broken transfer leaves no export.
//
// Thread safety: a pure function of its arguments (one call per stub at a
// time is not required: gRPC stubs are thread-safe).
#ifndef GASLOC_SERVER_JOB_EXPORT_CLIENT_H_
#define GASLOC_SERVER_JOB_EXPORT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gasloc/v1/coordinator.grpc.pb.h"
#include "worker/train/export.h"

namespace gasloc {

struct JobExportOptions {
  std::string out_dir;
  ExportDtype dtype = ExportDtype::kF32;
  // One member's model (0 = the first member that serves it) ...
  uint64_t worker_id = 0;
  // ... or the mean of every member's (GASLoC and D-PSGD leave the
  // members' models different; all-reduce algorithms keep them equal).
  bool average = false;
  // The whole export's deadline.
  absl::Duration timeout = absl::Minutes(30);
  // Called with a line of progress now and then (bytes received).
  std::function<void(const std::string&)> progress;
};

struct JobExportResult {
  v1::JobStatus job;                 // as GetJob returned it
  std::vector<uint64_t> members;     // whose model(s) went in
  uint64_t bytes_received = 0;       // payload bytes, all members
};

// Fetches and writes the model. The coordinator's errors keep their code
// and message (NOT_FOUND job, UNAVAILABLE no member serves it, ...).
absl::StatusOr<JobExportResult> ExportJob(v1::Coordinator::Stub& stub,
                                          uint64_t job_id,
                                          const JobExportOptions& options);

}  // namespace gasloc

#endif  // GASLOC_SERVER_JOB_EXPORT_CLIENT_H_
