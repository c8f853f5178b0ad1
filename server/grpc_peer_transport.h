// PeerTransport over gRPC (wire protocol: docs/exchange.md). Each
// OutgoingTransfer is one Peer.Exchange stream to the peer's address that
// sends its chunks and waits for the acknowledgement; each IncomingTransfer
// is registered in the local Mailbox, which the PeerService of the same
// process feeds. All transfers of an Exchange call run at once (both
// directions of a gossip pair stream at the same time). Every stream
// carries options.deadline as its gRPC deadline and every wait ends there:
// a peer that is down yields UNAVAILABLE, one that never sends or stops
// mid-stream DEADLINE_EXCEEDED / UNAVAILABLE, never a hang.
//
// One channel per peer address is created on first use and cached, with
// the receive limit set deliberately (max_message_bytes, above a chunk of
// at most 3 MiB plus its header).
//
// The header keeps gRPC out (gasloc-worker's main and the benchmarks
// include it).
//
// Thread safety: Exchange and FetchModel may be called concurrently from
// any threads.
#ifndef GASLOC_SERVER_GRPC_PEER_TRANSPORT_H_
#define GASLOC_SERVER_GRPC_PEER_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/credentials.h"
#include "worker/exchange/mailbox.h"
#include "worker/exchange/model_fetch.h"
#include "worker/exchange/peer_transport.h"

namespace gasloc {

struct GrpcPeerTransportOptions {
  // The local worker's Mailbox (not owned), shared with its PeerService;
  // its self_id is this worker's id.
  Mailbox* mailbox = nullptr;
  CredentialsOptions credentials;
  // Largest message a channel accepts (FetchModel chunks, acks).
  int max_message_bytes = 8 << 20;
  // HTTP/2 settings for bulk transfers on every peer channel
  // (server/http2_tuning.h); false = gRPC's defaults, which measured as
  // fast or faster once malloc was tuned (docs/benchmarks.md).
  bool http2_bulk_tuning = false;
};

struct FetchModelOptions {
  std::string address;  // the member's Peer service
  uint64_t job_id = 0;
  v1::WireEncoding encoding = v1::WIRE_ENCODING_FP32;
  uint32_t chunk_bytes = 1u << 20;
  absl::Time deadline = absl::InfiniteFuture();
  uint64_t max_elements = uint64_t{1} << 32;
  // The joiner's own model size: the sender's announced size must equal
  // it before anything is allocated (0 = not known: max_elements only).
  uint64_t expected_elements = 0;
};

class GrpcPeerTransport final : public PeerTransport {
 public:
  explicit GrpcPeerTransport(GrpcPeerTransportOptions options);
  ~GrpcPeerTransport() override;

  uint64_t self_id() const override;
  std::vector<TransferOutcome> Exchange(
      const TransferKey& key, std::span<const OutgoingTransfer> sends,
      std::span<const IncomingTransfer> receives,
      const ExchangeOptions& options) override;

  // Pulls a member's model of a job (FetchModel RPC), checked chunk by
  // chunk like an exchange.
  absl::StatusOr<FetchedModel> FetchModel(const FetchModelOptions& options);

  // Peer.Ping: the peer's (worker id, job, round).
  absl::StatusOr<v1::PingResponse> Ping(const std::string& address,
                                        absl::Time deadline);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gasloc

#endif  // GASLOC_SERVER_GRPC_PEER_TRANSPORT_H_
