#include "server/grpc_peer_transport.h"

#include <map>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gasloc/v1/peer.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "common/clock.h"
#include "common/status_macros.h"
#include "server/chunk_frame.h"
#include "server/grpc_status.h"
#include "server/http2_tuning.h"
#include "worker/exchange/wire_codec.h"

namespace gasloc {

struct GrpcPeerTransport::Impl {
  explicit Impl(GrpcPeerTransportOptions o) : options(std::move(o)) {}

  // The cached channel to `address`, or why none can be made.
  absl::StatusOr<std::shared_ptr<grpc::Channel>> Channel(
      const std::string& address) {
    absl::MutexLock lock(&mu);
    auto it = channels.find(address);
    if (it != channels.end()) return it->second;
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(options.max_message_bytes);
    args.SetMaxSendMessageSize(-1);
    // Each peer address gets its own connection even when two share a
    // host (no subchannel sharing between our channels).
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    if (options.http2_bulk_tuning) ApplyBulkTransferArgs(args);
    auto channel = MakeChannel(address, options.credentials, args);
    if (!channel.ok()) return channel.status();
    channels.emplace(address, *channel);
    return *channel;
  }

  TransferOutcome Send(const TransferKey& key, const OutgoingTransfer& send,
                       const ExchangeOptions& exchange_options);

  const GrpcPeerTransportOptions options;
  absl::Mutex mu;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels
      ABSL_GUARDED_BY(mu);
};

namespace {

void SetDeadline(grpc::ClientContext* context, absl::Time deadline) {
  if (deadline != absl::InfiniteFuture())
    context->set_deadline(absl::ToChronoTime(deadline));
}

}  // namespace

TransferOutcome GrpcPeerTransport::Impl::Send(
    const TransferKey& key, const OutgoingTransfer& send,
    const ExchangeOptions& exchange_options) {
  TransferOutcome outcome;
  outcome.peer_id = send.peer_id;
  // Wire time is a real-time measurement (gRPC runs on real time).
  const Clock& real = RealClock::Get();
  const absl::Time start = real.Now();
  auto finish = [&](absl::Status status) {
    outcome.status = Annotate(
        status, absl::StrCat("send of ", DescribeKey(key), " to peer ",
                             send.peer_id, " at ", send.address));
    outcome.seconds = absl::ToDoubleSeconds(real.Now() - start);
    return outcome;
  };
  auto plan = PlanChunks(send.range_begin, send.range_end,
                         exchange_options.encoding,
                         exchange_options.chunk_bytes);
  if (!plan.ok()) return finish(plan.status());
  auto channel = Channel(send.address);
  if (!channel.ok()) return finish(channel.status());
  grpc::ClientContext context;
  SetDeadline(&context, exchange_options.deadline);
  auto stream = OpenExchangeStream(*channel, &context);
  const ChunkContext chunk_context{
      .key = key,
      .sender_id = options.mailbox->self_id(),
      .range_begin = send.range_begin,
      .range_end = send.range_end,
      .encoding = exchange_options.encoding,
      .arena_elements = send.data.size()};
  v1::ExchangeChunk chunk;
  bool written = true;
  for (size_t i = 0; i < plan->size() && written; ++i) {
    const bool last = i + 1 == plan->size();
    absl::Status status =
        EncodeChunk(chunk_context, send.data, (*plan)[i], last, &chunk);
    if (!status.ok()) {
      context.TryCancel();
      stream->Finish().ok();  // the local error is what matters
      return finish(status);
    }
    // The payload moves into a slice gRPC sends from (no copy).
    const ChunkFrame frame = ChunkFrame::Take(std::move(chunk));
    written = stream->Write(frame);
    if (written) outcome.bytes += frame.payload_bytes();
  }
  // A failed Write means the stream is broken; Finish says why.
  absl::Status acknowledged = absl::UnavailableError(
      "the peer closed the stream without an acknowledgement");
  if (written) {
    stream->WritesDone();
    ChunkFrame ack;
    if (stream->Read(&ack))
      acknowledged = ack.status().ok()
                         ? CheckAck(ack.HeaderChunk(), key, send.peer_id)
                         : absl::UnavailableError(ack.status().message());
  }
  absl::Status status = FromGrpcStatus(stream->Finish());
  if (status.ok()) status = acknowledged;
  return finish(status);
}

GrpcPeerTransport::GrpcPeerTransport(GrpcPeerTransportOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {}

GrpcPeerTransport::~GrpcPeerTransport() = default;

uint64_t GrpcPeerTransport::self_id() const {
  return impl_->options.mailbox->self_id();
}

std::vector<TransferOutcome> GrpcPeerTransport::Exchange(
    const TransferKey& key, std::span<const OutgoingTransfer> sends,
    std::span<const IncomingTransfer> receives,
    const ExchangeOptions& options) {
  return RunTransfers(*impl_->options.mailbox, key, sends, receives,
                      options.deadline, [&](const OutgoingTransfer& send) {
                        return impl_->Send(key, send, options);
                      });
}

absl::StatusOr<FetchedModel> GrpcPeerTransport::FetchModel(
    const FetchModelOptions& options) {
  ASSIGN_OR_RETURN(auto channel, impl_->Channel(options.address));
  auto stub = v1::Peer::NewStub(channel);
  grpc::ClientContext context;
  SetDeadline(&context, options.deadline);
  v1::FetchModelRequest request;
  request.set_job_id(options.job_id);
  request.set_requester_id(self_id());
  request.set_encoding(options.encoding);
  request.set_chunk_bytes(options.chunk_bytes);
  auto reader = stub->FetchModel(&context, request);
  ModelAssembler assembler(options.job_id, self_id(), options.max_elements,
                           options.expected_elements);
  v1::ExchangeChunk chunk;
  while (reader->Read(&chunk)) {
    absl::Status status = assembler.Add(chunk);
    if (!status.ok()) {
      context.TryCancel();
      reader->Finish().ok();  // cancelled by us; the check failure matters
      return Annotate(status, absl::StrCat("model fetch from ",
                                           options.address));
    }
  }
  RETURN_IF_ERROR(Annotate(FromGrpcStatus(reader->Finish()),
                           absl::StrCat("model fetch from ", options.address)));
  return assembler.Finish();
}

absl::StatusOr<v1::PingResponse> GrpcPeerTransport::Ping(
    const std::string& address, absl::Time deadline) {
  ASSIGN_OR_RETURN(auto channel, impl_->Channel(address));
  auto stub = v1::Peer::NewStub(channel);
  grpc::ClientContext context;
  SetDeadline(&context, deadline);
  v1::PingRequest request;
  request.set_sender_id(self_id());
  v1::PingResponse response;
  RETURN_IF_ERROR(FromGrpcStatus(stub->Ping(&context, request, &response)));
  return response;
}

}  // namespace gasloc
