// The Coordinator service's ExportModel (gaslocctl job export): fetches a
// job's model from one of its members' Peer.FetchModel (parameters only)
// and relays the member's chunks to the operator unchanged, so that an
// operator who can reach the coordinator needs no access to the workers.
//
// The members are tried in order until one starts sending; a member that
// fails before its first chunk (unreachable, no longer holding the model,
// refusing the coordinator's credentials) is skipped and its reason kept;
// once chunks flow, a failure ends the export with that member's error
// (the operator's ModelAssembler would see a cut stream anyway). The
// chunks are not decoded here: the receiving gaslocctl checks every one
// (CRC, geometry, finite values, the spec's size; worker/exchange/
// model_fetch.h). The upstream call inherits the operator's deadline and
// cancellation (grpc::ClientContext::FromServerContext).
//
// Thread safety: immutable after construction; Relay may run on any number
// of threads at once.
#ifndef GASLOC_SERVER_MODEL_EXPORT_RELAY_H_
#define GASLOC_SERVER_MODEL_EXPORT_RELAY_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/coordinator.h"
#include "gasloc/v1/coordinator.pb.h"
#include "gasloc/v1/peer.pb.h"
#include "grpcpp/channel.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/sync_stream.h"

namespace gasloc {

// A channel to a worker's Peer service with the coordinator's credentials
// (the coordinator role: a "coordinator" certificate or a token the
// workers' --coordinator_token_file lists).
using PeerDialer = std::function<absl::StatusOr<std::shared_ptr<grpc::Channel>>(
    const std::string& address)>;

class ModelExportRelay {
 public:
  explicit ModelExportRelay(PeerDialer dial) : dial_(std::move(dial)) {}

  // Relays `request`'s model from the first of `sources` that serves it.
  // UNAVAILABLE naming every member's reason when none did.
  absl::Status Relay(grpc::ServerContext* context,
                     const v1::ExportModelRequest& request,
                     const coordinator::ModelSources& sources,
                     grpc::ServerWriter<v1::ExchangeChunk>* writer) const;

 private:
  struct Attempt {
    absl::Status status;
    bool started = false;  // a chunk reached the operator
    uint64_t chunks = 0;
    uint64_t bytes = 0;
  };
  Attempt RelayFrom(grpc::ServerContext* context,
                    const v1::ExportModelRequest& request,
                    const coordinator::ModelSources::Member& member,
                    grpc::ServerWriter<v1::ExchangeChunk>* writer) const;

  const PeerDialer dial_;
};

}  // namespace gasloc

#endif  // GASLOC_SERVER_MODEL_EXPORT_RELAY_H_
