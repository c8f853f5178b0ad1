#include "server/peer_service.h"

#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/log.h"
#include "grpcpp/support/method_handler.h"
#include "server/grpc_status.h"
#include "worker/exchange/wire_codec.h"

namespace gasloc {

PeerService::PeerService(Mailbox* mailbox, PeerServiceOptions options)
    : mailbox_(mailbox),
      options_(std::move(options)),
      limits_(options_.limits),
      watchdog_([this] {
        while (!stop_watchdog_.WaitForNotificationWithTimeout(
            options_.watchdog_period)) {
          if (const int n = limits_.CancelExpired(); n > 0)
            GASLOC_LOG(WARNING) << "peer service: cancelled " << n
                                << " inbound call(s) past their deadline";
        }
      }) {
  // Same method, same bytes on the wire; frames instead of ExchangeChunk.
  MarkMethodStreamed(
      kExchangeMethodIndex,
      new grpc::internal::BidiStreamingHandler<PeerService, ChunkFrame,
                                               ChunkFrame>(
          [](PeerService* service, grpc::ServerContext* context,
             ExchangeServerStream* stream) {
            return service->ExchangeFrames(context, stream);
          },
          this));
}

PeerService::~PeerService() {
  stop_watchdog_.Notify();
  watchdog_.join();
}

std::string PeerService::PeerHost(const grpc::ServerContext& context) {
  const std::string peer = context.peer();
  const size_t colon = peer.rfind(':');
  const size_t scheme = peer.find(':');
  return colon == std::string::npos || colon == scheme ? peer
                                                       : peer.substr(0, colon);
}

void PeerService::SetModelProvider(ModelProvider provider) {
  absl::MutexLock lock(&mu_);
  model_provider_ = std::move(provider);
}

void PeerService::SetRoundReporter(RoundReporter reporter) {
  absl::MutexLock lock(&mu_);
  round_reporter_ = std::move(reporter);
}

absl::StatusOr<Caller> PeerService::Authorize(
    grpc::ServerContext* context, std::initializer_list<Role> roles,
    absl::string_view method) const {
  if (options_.authenticator == nullptr)
    return absl::UnauthenticatedError(absl::StrCat(
        method, ": this server was started without an authenticator"));
  return options_.authenticator->Authorize(*context, roles, method);
}

absl::Status PeerService::CheckWritesOwnId(const Caller& caller,
                                           uint64_t worker_id,
                                           absl::string_view field,
                                           absl::Time deadline) const {
  if (caller.worker_name.empty()) return absl::OkStatus();
  std::optional<std::string> identity;
  // The roster waits in real time (a mutex's deadline), as gRPC does.
  if (options_.roster != nullptr)
    identity = options_.roster->IdentityOf(
        worker_id,
        std::min(deadline, RealClock::Get().Now() + options_.identity_wait));
  if (identity.has_value() && *identity == caller.worker_name)
    return absl::OkStatus();
  const std::string scheduled =
      identity.has_value()
          ? absl::StrCat("is worker \"", *identity, "\" in the schedule")
          : "is not in this worker's schedule";
  GASLOC_LOG(WARNING) << "peer " << mailbox_->self_id() << ": "
                      << caller.description << " wrote " << field << " "
                      << worker_id << ", which " << scheduled << ": refused";
  return absl::PermissionDeniedError(
      absl::StrCat(field, " ", worker_id, " ", scheduled, "; ",
                   caller.description, " may only write its own id"));
}

grpc::Status PeerService::ExchangeFrames(grpc::ServerContext* context,
                                         ExchangeServerStream* stream) {
  auto caller = Authorize(context, {Role::kPeer}, "Exchange");
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  auto ticket = limits_.Admit(PeerHost(*context), InboundKind::kExchange,
                              [context] { context->TryCancel(); });
  if (!ticket.ok()) return ToGrpcStatus(ticket.status());
  // The dialer's deadline bounds how long an early chunk may wait, and
  // so does the server's own total deadline. Both are real time (gRPC's
  // clock, and the roster's wait for a caller's identity); the mailbox
  // waits on its own clock, so it gets what is left of them on that clock.
  const absl::Time now = RealClock::Get().Now();
  const absl::Time deadline =
      std::min(absl::FromChrono(context->deadline()),
               now + options_.limits.exchange_total_timeout);
  const Clock& mailbox_clock = mailbox_->clock();
  const absl::Time mailbox_deadline =
      deadline == absl::InfiniteFuture()
          ? deadline
          : mailbox_clock.Now() + (deadline - now);
  grpc::Status status = ExchangeAdmitted(stream, *caller, deadline,
                                         mailbox_deadline, **ticket);
  if (const std::string why = (*ticket)->cancelled_because(); !why.empty()) {
    GASLOC_LOG(WARNING) << "Exchange stream from " << context->peer()
                        << " cancelled: " << why;
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                        absl::StrCat("stream cancelled by the receiver: ", why));
  }
  return status;
}

grpc::Status PeerService::ExchangeAdmitted(
    ExchangeServerStream* stream, const Caller& caller, absl::Time deadline,
    absl::Time mailbox_deadline, InboundLimits::Ticket& ticket) {
  std::unique_ptr<Mailbox::InboundStream> inbound = mailbox_->OpenStream();
  ChunkFrame chunk;
  uint64_t chunks = 0;
  std::optional<uint64_t> verified_sender;
  while (stream->Read(&chunk)) {
    ++chunks;
    // A message that is not an ExchangeChunk at all fails the transfer
    // like a bad chunk (a refused first one binds none).
    if (!chunk.status().ok()) {
      inbound->End(chunk.status());
      return ToGrpcStatus(chunk.status());
    }
    // Who the chunk claims to be from is checked before the Mailbox sees
    // it: a refused first chunk binds no transfer.
    if (verified_sender != chunk.header().sender_id()) {
      absl::Status own = CheckWritesOwnId(caller, chunk.header().sender_id(),
                                          "sender_id", deadline);
      if (!own.ok()) {
        inbound->End(chunks == 1 ? absl::OkStatus() : own);
        return ToGrpcStatus(own);
      }
      verified_sender = chunk.header().sender_id();
    }
    // Waiting in the mailbox (an early chunk before its registration) is
    // not idleness.
    ticket.SetBusy(true);
    absl::Status status = inbound->Accept(chunk.header(), chunk.last(),
                                          chunk.payload(), mailbox_deadline);
    ticket.SetBusy(false);
    if (!status.ok()) {
      inbound->End(status);
      return ToGrpcStatus(status);
    }
    if (inbound->committed()) {
      inbound->End();
      stream->Write(
          ChunkFrame::Take(MakeAck(chunk.header(), mailbox_->self_id())));
      return grpc::Status::OK;
    }
  }
  // The stream ended (half-close, cancellation or a broken connection:
  // gRPC does not tell these apart) before the last chunk.
  const absl::Status cut = absl::UnavailableError(absl::StrCat(
      "stream ended after ", chunks, " chunks without the last one"));
  inbound->End();
  return ToGrpcStatus(cut);
}

grpc::Status PeerService::FetchModel(
    grpc::ServerContext* context, const v1::FetchModelRequest* request,
    grpc::ServerWriter<v1::ExchangeChunk>* writer) {
  auto caller = Authorize(context, {Role::kPeer, Role::kCoordinator}, "FetchModel");
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  if (absl::Status own =
          CheckWritesOwnId(*caller, request->requester_id(), "requester_id",
                           absl::FromChrono(context->deadline()));
      !own.ok())
    return ToGrpcStatus(own);
  ModelProvider provider;
  {
    absl::MutexLock lock(&mu_);
    provider = model_provider_;
  }
  if (!provider)
    return ToGrpcStatus(absl::FailedPreconditionError(absl::StrCat(
        "worker ", mailbox_->self_id(), " serves no model (idle)")));
  uint32_t chunk_bytes = request->chunk_bytes() == 0
                             ? options_.default_fetch_chunk_bytes
                             : request->chunk_bytes();
  if (chunk_bytes > options_.max_fetch_chunk_bytes ||
      chunk_bytes < options_.min_fetch_chunk_bytes)
    return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
        "chunk_bytes must be in [", options_.min_fetch_chunk_bytes, ", ",
        options_.max_fetch_chunk_bytes, "], got ", chunk_bytes)));
  auto ticket = limits_.Admit(PeerHost(*context), InboundKind::kFetch,
                              [context] { context->TryCancel(); });
  if (!ticket.ok()) return ToGrpcStatus(ticket.status());
  absl::StatusOr<ModelSnapshot> snapshot = provider(request->job_id());
  if (!snapshot.ok()) return ToGrpcStatus(snapshot.status());
  if (request->parameters_only()) {
    snapshot->outer_state = {};
    snapshot->optimizer_m = {};
    snapshot->optimizer_v = {};
  }
  if (snapshot->job_id != request->job_id())
    return ToGrpcStatus(absl::FailedPreconditionError(
        absl::StrCat("worker ", mailbox_->self_id(), " holds job ",
                     snapshot->job_id, ", not job ", request->job_id())));
  absl::Status sent = ModelChunks(
      *snapshot, mailbox_->self_id(), request->encoding(), chunk_bytes,
      [&](const v1::ExchangeChunk& chunk) {
        const bool ok = writer->Write(chunk);
        (*ticket)->Touch();
        return ok;
      });
  if (const std::string why = (*ticket)->cancelled_because(); !why.empty()) {
    GASLOC_LOG(WARNING) << "FetchModel from " << context->peer()
                        << " cancelled: " << why;
    return grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                        absl::StrCat("FetchModel cancelled by the server: ",
                                     why));
  }
  return ToGrpcStatus(sent);
}

grpc::Status PeerService::Ping(grpc::ServerContext* context,
                               const v1::PingRequest* request,
                               v1::PingResponse* response) {
  auto caller = Authorize(context, {Role::kPeer}, "Ping");
  if (!caller.ok()) return ToGrpcStatus(caller.status());
  response->set_worker_id(mailbox_->self_id());
  RoundReporter reporter;
  {
    absl::MutexLock lock(&mu_);
    reporter = round_reporter_;
  }
  if (reporter) {
    const auto [job, round] = reporter();
    response->set_job_id(job);
    response->set_round(round);
  }
  return grpc::Status::OK;
}

}  // namespace gasloc
