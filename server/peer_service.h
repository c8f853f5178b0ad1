// The gRPC Peer service (proto/gasloc/v1/peer.proto) every gasloc-worker
// serves; wire protocol in docs/exchange.md.
//
//   Exchange    one transfer per stream: the dialer streams its chunks; the
//               service feeds them to the worker's Mailbox (which checks
//               and decodes them into the registered scratch buffer) and,
//               once the transfer committed, writes the codec's
//               acknowledgement (MakeAck, worker/exchange/wire_codec.h).
//               Its messages are ChunkFrames (server/chunk_frame.h): the
//               payload is decoded straight out of gRPC's receive slices,
//               and a message that is not an ExchangeChunk is refused
//               with INVALID_ARGUMENT. A rejected chunk ends the RPC with the
//               Mailbox's status (INVALID_ARGUMENT, FAILED_PRECONDITION,
//               DEADLINE_EXCEEDED); a stream that ends without the last
//               chunk fails the transfer (UNAVAILABLE).
//   FetchModel  streams the snapshot the installed ModelProvider returns:
//               MODEL chunks, then OUTER_STATE chunks (empty, and no
//               optimizer part, when the request asks for the parameters
//               only). Also served to the coordinator's role, which relays
//               a model for `gaslocctl job export`.
//   Ping        this worker's id and the (job, round) it reports.
//
// Limits (worker/exchange/inbound_limits.h): each Exchange stream and
// FetchModel call is admitted per peer host (RESOURCE_EXHAUSTED over the
// cap) and cancelled by a watchdog thread when it stays silent past the
// idle deadline or open past the total one (the dialer sees CANCELLED:
// a synchronous gRPC server can end a blocked read only so; the log says
// which deadline); FetchModel's chunk_bytes must be in [min_fetch_chunk_bytes,
// max_fetch_chunk_bytes].
// Every handler first asks the Authenticator (server/auth.h) for the peer
// role (FetchModel: peer or coordinator). A caller bound to a worker name (a "worker:<name>" certificate or a
// named peer token) may only write, as Exchange sender_id or FetchModel
// requester_id, the worker id the coordinator scheduled under that name
// (PeerRoster, learnt from the assignments); anything else is refused with
// PERMISSION_DENIED before the chunk reaches the Mailbox, so a forged
// stream cannot spoil the honest transfer.
//
// On shutdown call Mailbox::Shutdown() before stopping the server: open
// transfers and waiting streams then end at once with UNAVAILABLE.
//
// Thread safety: gRPC calls the handlers concurrently; the providers may
// be (re)installed at any time from any thread.
#ifndef GASLOC_SERVER_PEER_SERVICE_H_
#define GASLOC_SERVER_PEER_SERVICE_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "gasloc/v1/peer.grpc.pb.h"
#include "server/auth.h"
#include "server/chunk_frame.h"
#include "server/peer_roster.h"
#include "grpcpp/grpcpp.h"
#include "absl/synchronization/notification.h"
#include "worker/exchange/inbound_limits.h"
#include "worker/exchange/mailbox.h"
#include "worker/exchange/model_fetch.h"

namespace gasloc {

// (job_id, round) the worker is in, for Ping; (0, 0) when idle.
using RoundReporter = std::function<std::pair<uint64_t, uint64_t>()>;

struct PeerServiceOptions {
  // Payload bytes per FetchModel chunk when the request says 0, and the
  // most a request may ask for (keep it under the clients' receive limit).
  uint32_t default_fetch_chunk_bytes = 1u << 20;
  uint32_t max_fetch_chunk_bytes = 3u << 20;
  // The least a request may ask for (tiny chunks cost a message each).
  uint32_t min_fetch_chunk_bytes = 4096;
  // Per-peer caps and server-side deadlines of inbound calls.
  InboundLimitsOptions limits;
  // How often the watchdog looks for calls past their deadlines.
  absl::Duration watchdog_period = absl::Milliseconds(200);
  // Who may call; not owned. Null = every call is refused
  // (UNAUTHENTICATED).
  const Authenticator* authenticator = nullptr;
  // Identities of the worker ids this worker was scheduled with; not
  // owned. Null = callers bound to a worker name are refused.
  PeerRoster* roster = nullptr;
  // Longest wait for the roster to learn a sender's identity when the
  // call has no deadline.
  absl::Duration identity_wait = absl::Seconds(30);
};

class PeerService final : public v1::Peer::Service {
 public:
  // `mailbox` (not owned) is the local worker's; it must outlive the
  // service. Its self_id is this worker's id.
  PeerService(Mailbox* mailbox, PeerServiceOptions options = {});
  ~PeerService() override;

  // Without a provider FetchModel answers FAILED_PRECONDITION.
  void SetModelProvider(ModelProvider provider);
  void SetRoundReporter(RoundReporter reporter);

  // Peer.Exchange, registered in place of the generated handler so that
  // its messages are ChunkFrames (server/chunk_frame.h): the payload is
  // decoded straight out of gRPC's receive slices.
  grpc::Status ExchangeFrames(grpc::ServerContext* context,
                              ExchangeServerStream* stream);
  grpc::Status FetchModel(grpc::ServerContext* context,
                          const v1::FetchModelRequest* request,
                          grpc::ServerWriter<v1::ExchangeChunk>* writer)
      override;
  grpc::Status Ping(grpc::ServerContext* context,
                    const v1::PingRequest* request,
                    v1::PingResponse* response) override;

 private:
  // The caller's host ("ipv4:10.0.0.2" from "ipv4:10.0.0.2:51234").
  static std::string PeerHost(const grpc::ServerContext& context);
  // `deadline` is real time (the identity check's), `mailbox_deadline` the
  // same on the mailbox's clock (the chunks' waits).
  grpc::Status ExchangeAdmitted(
      ExchangeServerStream* stream,
      const Caller& caller, absl::Time deadline, absl::Time mailbox_deadline,
      InboundLimits::Ticket& ticket);
  absl::StatusOr<Caller> Authorize(grpc::ServerContext* context,
                                   std::initializer_list<Role> roles,
                                   absl::string_view method) const;
  // OK when `caller` may write `worker_id` as its own id.
  absl::Status CheckWritesOwnId(const Caller& caller, uint64_t worker_id,
                                absl::string_view field,
                                absl::Time deadline) const;

  Mailbox* const mailbox_;
  const PeerServiceOptions options_;
  InboundLimits limits_;
  absl::Notification stop_watchdog_;
  std::thread watchdog_;
  absl::Mutex mu_;
  ModelProvider model_provider_ ABSL_GUARDED_BY(mu_);
  RoundReporter round_reporter_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gasloc

#endif  // GASLOC_SERVER_PEER_SERVICE_H_
