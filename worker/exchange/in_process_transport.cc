#include "worker/exchange/in_process_transport.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/exchange/wire_codec.h"

namespace gasloc {

namespace {

InProcessFault MakeFault(InProcessFault::Kind kind, uint64_t from, uint64_t to,
                         uint32_t chunk_index, absl::Duration delay) {
  InProcessFault f;
  f.kind = kind;
  f.from = from;
  f.to = to;
  f.chunk_index = chunk_index;
  f.delay = delay;
  return f;
}

}  // namespace

InProcessFault InProcessFault::DropPeer(uint64_t peer) {
  return MakeFault(kDropPeer, peer, 0, 0, absl::ZeroDuration());
}
InProcessFault InProcessFault::CutAfterChunks(uint64_t from, uint64_t to,
                                              uint32_t chunks) {
  return MakeFault(kCutAfterChunks, from, to, chunks, absl::ZeroDuration());
}
InProcessFault InProcessFault::CorruptChunk(uint64_t from, uint64_t to,
                                            uint32_t chunk_index) {
  return MakeFault(kCorruptChunk, from, to, chunk_index,
                   absl::ZeroDuration());
}
InProcessFault InProcessFault::Delay(uint64_t from, uint64_t to,
                                     absl::Duration delay) {
  return MakeFault(kDelay, from, to, 0, delay);
}
InProcessFault InProcessFault::Silent(uint64_t from, uint64_t to) {
  return MakeFault(kSilent, from, to, 0, absl::ZeroDuration());
}

InProcessFault InProcessFault::DropAck(uint64_t from, uint64_t to) {
  return MakeFault(kDropAck, from, to, 0, absl::ZeroDuration());
}

InProcessFault InProcessFault::InRound(uint64_t r) const {
  InProcessFault f = *this;
  f.round = r;
  return f;
}

InProcessNetwork::InProcessNetwork(MailboxOptions mailbox)
    : mailbox_options_(std::move(mailbox)) {}

InProcessNetwork::~InProcessNetwork() = default;

std::string InProcessNetwork::Address(uint64_t worker_id) {
  return absl::StrCat("inproc:", worker_id);
}

std::unique_ptr<InProcessTransport> InProcessNetwork::Join(
    uint64_t worker_id) {
  MailboxOptions options = mailbox_options_;
  options.self_id = worker_id;
  auto mailbox = std::make_shared<Mailbox>(std::move(options));
  absl::MutexLock lock(&mu_);
  if (!members_.emplace(worker_id, mailbox).second) return nullptr;
  return std::unique_ptr<InProcessTransport>(
      new InProcessTransport(this, std::move(mailbox)));
}

void InProcessNetwork::Leave(uint64_t worker_id) {
  absl::MutexLock lock(&mu_);
  members_.erase(worker_id);
}

std::shared_ptr<Mailbox> InProcessNetwork::Find(uint64_t worker_id) {
  absl::MutexLock lock(&mu_);
  auto it = members_.find(worker_id);
  return it == members_.end() ? nullptr : it->second;
}

void InProcessNetwork::AddFault(const InProcessFault& fault) {
  absl::MutexLock lock(&mu_);
  faults_.push_back(fault);
}

void InProcessNetwork::ClearFaults() {
  absl::MutexLock lock(&mu_);
  faults_.clear();
}

std::vector<InProcessFault> InProcessNetwork::FaultsFor(uint64_t from,
                                                        uint64_t to,
                                                        uint64_t round) {
  absl::MutexLock lock(&mu_);
  std::vector<InProcessFault> result;
  for (const InProcessFault& f : faults_) {
    if (f.round.has_value() && *f.round != round) continue;
    const bool applies =
        f.kind == InProcessFault::kDropPeer
            ? (f.from == from || f.from == to)
            : (f.from == from && (f.to == 0 || f.to == to));
    if (applies) result.push_back(f);
  }
  return result;
}

InProcessTransport::~InProcessTransport() { network_->Leave(self_id()); }

std::vector<TransferOutcome> InProcessTransport::Exchange(
    const TransferKey& key, std::span<const OutgoingTransfer> sends,
    std::span<const IncomingTransfer> receives,
    const ExchangeOptions& options) {
  return RunTransfers(*mailbox_, key, sends, receives, options.deadline,
                      [&](const OutgoingTransfer& send) {
                        return Send(key, send, options);
                      });
}

TransferOutcome InProcessTransport::Send(const TransferKey& key,
                                         const OutgoingTransfer& send,
                                         const ExchangeOptions& options) {
  TransferOutcome outcome;
  outcome.peer_id = send.peer_id;
  const Clock& clock = mailbox_->clock();
  const absl::Time start = clock.Now();
  auto finish = [&](absl::Status status) {
    outcome.status = std::move(status);
    outcome.seconds = absl::ToDoubleSeconds(clock.Now() - start);
    return outcome;
  };
  const uint64_t self = self_id();
  const std::vector<InProcessFault> faults =
      network_->FaultsFor(self, send.peer_id, key.round);
  std::optional<uint32_t> cut_after, corrupt;
  absl::Duration delay = absl::ZeroDuration();
  bool drop_ack = false;
  for (const InProcessFault& f : faults) {
    switch (f.kind) {
      case InProcessFault::kDropPeer:
        return finish(absl::UnavailableError(
            absl::StrCat("peer ", f.from, " dropped (injected fault)")));
      case InProcessFault::kCutAfterChunks:
        cut_after = f.chunk_index;
        break;
      case InProcessFault::kCorruptChunk:
        corrupt = f.chunk_index;
        break;
      case InProcessFault::kDelay:
        delay = f.delay;
        break;
      case InProcessFault::kSilent:
        delay = absl::InfiniteDuration();
        break;
      case InProcessFault::kDropAck:
        drop_ack = true;
        break;
    }
  }
  std::shared_ptr<Mailbox> peer = network_->Find(send.peer_id);
  if (peer == nullptr)
    return finish(absl::UnavailableError(
        absl::StrCat("peer ", send.peer_id, " (", send.address,
                     ") is not on the in-process network")));
  if (delay > absl::ZeroDuration()) {
    clock.SleepUntil(std::min(options.deadline, start + delay));
  }
  if (clock.Now() >= options.deadline)
    return finish(absl::DeadlineExceededError(absl::StrCat(
        "send of ", DescribeKey(key), " to peer ", send.peer_id,
        ": deadline passed before the first chunk")));
  auto chunks = PlanChunks(send.range_begin, send.range_end,
                           options.encoding, options.chunk_bytes);
  if (!chunks.ok()) return finish(chunks.status());
  const ChunkContext context{.key = key,
                             .sender_id = self,
                             .range_begin = send.range_begin,
                             .range_end = send.range_end,
                             .encoding = options.encoding,
                             .arena_elements = send.data.size()};
  std::unique_ptr<Mailbox::InboundStream> stream = peer->OpenStream();
  v1::ExchangeChunk chunk;
  for (size_t i = 0; i < chunks->size(); ++i) {
    if (cut_after.has_value() && i == *cut_after) {
      stream->End();
      return finish(absl::UnavailableError(absl::StrCat(
          "stream to peer ", send.peer_id, " cut after ", i,
          " chunks (injected fault)")));
    }
    if (clock.Now() >= options.deadline) {
      const absl::Status late = absl::DeadlineExceededError(
          absl::StrCat("sender ", self, " passed the deadline after ", i,
                       " of ", chunks->size(), " chunks"));
      stream->End(late);
      return finish(late);
    }
    const bool last = i + 1 == chunks->size();
    absl::Status status =
        EncodeChunk(context, send.data, (*chunks)[i], last, &chunk);
    if (!status.ok()) {
      stream->End(status);
      return finish(status);
    }
    if (corrupt.has_value() && i == *corrupt) {
      if (chunk.payload().empty())
        chunk.mutable_header()->set_crc32c(chunk.header().crc32c() ^ 1u);
      else
        (*chunk.mutable_payload())[0] ^= 0x5a;
    }
    status = stream->Accept(chunk, options.deadline);
    if (!status.ok()) {
      stream->End(status);
      return finish(status);
    }
    outcome.bytes += chunk.payload().size();
  }
  // The receiver's end of the stream: the committed transfer is answered
  // with the codec's acknowledgement, which the sender checks (as over
  // gRPC); without it the send has not succeeded.
  absl::Status acknowledged = absl::UnavailableError(absl::StrCat(
      "peer ", send.peer_id, " closed the stream without an acknowledgement",
      drop_ack ? " (injected fault)" : ""));
  if (stream->committed() && !drop_ack)
    acknowledged =
        CheckAck(MakeAck(chunk.header(), peer->self_id()), key, send.peer_id);
  stream->End();
  return finish(acknowledged);
}

}  // namespace gasloc
