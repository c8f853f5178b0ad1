#include "worker/exchange/mailbox.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/error_kind.h"
#include "common/log.h"

namespace gasloc {

struct Mailbox::Transfer {
  enum class State { kOpen, kCommitted, kFailed };
  ChunkExpectation expect;
  std::span<float> buffer;
  absl::Time deadline;
  absl::Time started;
  absl::Time ended;
  State state = State::kOpen;
  absl::Status error;
  uint64_t next_offset = 0;  // the next element the transfer expects
  uint64_t bytes = 0;        // payload bytes accepted
  // When the first chunk was taken in (after its registration: an early
  // chunk's wait for it is not wire time) and its payload bytes.
  absl::Time first_chunk = absl::InfinitePast();
  uint64_t first_chunk_bytes = 0;
  bool bound = false;        // a stream delivers to it
  // The stream's first chunk came before the registration and waited for
  // it: the sender's bytes piled up in the socket and HTTP/2 buffers
  // meanwhile and are then taken in at memory speed, so first chunk to
  // commit says nothing about the link (it would read as a link many times
  // faster: 52 MB/s for a 1 MB/s one was seen in the netns harness).
  bool receiver_was_late = false;
  bool busy = false;         // a chunk is being validated / decoded

  std::string Describe() const {
    return absl::StrCat("receive of ", DescribeKey(expect.key),
                        " from peer ", expect.sender_id, " at worker ",
                        expect.receiver_id);
  }
};

namespace {

// The seconds a committed receive's bytes were moving: first chunk taken in
// to commit covers every chunk but the first, so it is scaled by
// bytes / (bytes - first chunk's bytes). 0 when not measurable (one chunk
// only: its own transfer time is not seen; or the receiver was late, so
// the bytes were buffered before it took them in).
double WireSeconds(absl::Time first_chunk, absl::Time committed,
                   uint64_t bytes, uint64_t first_chunk_bytes,
                   bool receiver_was_late) {
  if (receiver_was_late || bytes <= first_chunk_bytes ||
      first_chunk == absl::InfinitePast())
    return 0;
  return absl::ToDoubleSeconds(committed - first_chunk) *
         static_cast<double>(bytes) /
         static_cast<double>(bytes - first_chunk_bytes);
}

absl::Status ShuttingDown() {
  return absl::UnavailableError("the worker is shutting down");
}

}  // namespace

Mailbox::Mailbox(MailboxOptions options) : options_(std::move(options)) {}
Mailbox::~Mailbox() = default;

Mailbox::Key Mailbox::MakeKey(const TransferKey& key, uint64_t sender) {
  return {key.job_id, key.round, static_cast<int>(key.phase), key.step,
          sender};
}

absl::Status Mailbox::Expect(const TransferKey& key,
                             std::span<const IncomingTransfer> receives,
                             absl::Time deadline) {
  std::set<uint64_t> peers;
  for (const IncomingTransfer& r : receives) {
    if (r.range_begin > r.range_end || r.range_end > r.buffer.size())
      return absl::InvalidArgumentError(absl::StrCat(
          "receive from peer ", r.peer_id, ": range [", r.range_begin, ", ",
          r.range_end, ") does not fit a buffer of ", r.buffer.size(),
          " elements"));
    if (!peers.insert(r.peer_id).second)
      return absl::InvalidArgumentError(absl::StrCat(
          "two receives from peer ", r.peer_id, " for ", DescribeKey(key)));
  }
  const absl::Time now = clock().Now();
  absl::MutexLock lock(&mu_);
  if (shut_down_) return ShuttingDown();
  auto finished = finished_below_.find(key.job_id);
  if (finished != finished_below_.end() && key.round < finished->second)
    return absl::FailedPreconditionError(
        absl::StrCat("round ", key.round, " of job ", key.job_id,
                     " is already finished on worker ", self_id()));
  for (const IncomingTransfer& r : receives) {
    if (transfers_.count(MakeKey(key, r.peer_id)) > 0)
      return absl::AlreadyExistsError(
          absl::StrCat("a receive of ", DescribeKey(key), " from peer ",
                       r.peer_id, " is already registered"));
  }
  for (const IncomingTransfer& r : receives) {
    auto transfer = std::make_shared<Transfer>();
    transfer->expect = {key,           r.peer_id,   self_id(),
                        r.range_begin, r.range_end, r.buffer.size()};
    transfer->buffer = r.buffer;
    transfer->deadline = deadline;
    transfer->started = now;
    transfer->next_offset = r.range_begin;
    const Key k = MakeKey(key, r.peer_id);
    ended_.erase(k);
    transfers_[k] = std::move(transfer);
  }
  uint64_t& below = finished_below_[key.job_id];
  below = std::max(below, key.round);
  changed_.SignalAll();
  return absl::OkStatus();
}

TransferOutcome Mailbox::Await(const TransferKey& key, uint64_t peer_id) {
  TransferOutcome outcome;
  outcome.peer_id = peer_id;
  outcome.incoming = true;
  const Key k = MakeKey(key, peer_id);
  absl::MutexLock lock(&mu_);
  auto it = transfers_.find(k);
  if (it == transfers_.end()) {
    outcome.status = absl::FailedPreconditionError(
        absl::StrCat("no receive of ", DescribeKey(key), " from peer ",
                     peer_id, " is registered at worker ", self_id()));
    return outcome;
  }
  std::shared_ptr<Transfer> t = it->second;
  while (t->state == Transfer::State::kOpen && clock().Now() < t->deadline)
    clock().WaitWithDeadline(&changed_, &mu_, t->deadline);
  if (t->state == Transfer::State::kOpen) {
    const uint64_t total = t->expect.range_end - t->expect.range_begin;
    FailLocked(*t, absl::DeadlineExceededError(absl::StrCat(
                       t->Describe(), ": deadline passed after ",
                       t->next_offset - t->expect.range_begin, " of ", total,
                       " elements")));
  }
  // A decode in flight finishes within one chunk; wait for it so the
  // caller owns the buffer again when this returns.
  while (t->busy) changed_.Wait(&mu_);
  transfers_.erase(k);
  if (ended_.insert(k).second) ended_order_.push_back(k);
  while (ended_order_.size() > options_.remembered_transfers) {
    ended_.erase(ended_order_.front());
    ended_order_.pop_front();
  }
  outcome.status = t->state == Transfer::State::kCommitted
                       ? absl::OkStatus()
                       : t->error;
  outcome.bytes = t->bytes;
  outcome.seconds = absl::ToDoubleSeconds(t->ended - t->started);
  if (t->state == Transfer::State::kCommitted)
    outcome.wire_seconds =
        WireSeconds(t->first_chunk, t->ended, t->bytes, t->first_chunk_bytes,
                    t->receiver_was_late);
  return outcome;
}

void Mailbox::FinishRound(uint64_t job_id, uint64_t round) {
  absl::MutexLock lock(&mu_);
  uint64_t& below = finished_below_[job_id];
  below = std::max(below, round + 1);
  changed_.SignalAll();
}

void Mailbox::Abandon(const TransferKey& key, uint64_t peer_id,
                      absl::Status why) {
  absl::MutexLock lock(&mu_);
  auto it = transfers_.find(MakeKey(key, peer_id));
  if (it != transfers_.end()) FailLocked(*it->second, std::move(why));
}

void Mailbox::Shutdown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
  for (auto& [key, transfer] : transfers_) {
    FailLocked(*transfer,
               absl::UnavailableError(absl::StrCat(
                   transfer->Describe(), ": the worker is shutting down")));
  }
  changed_.SignalAll();
}

size_t Mailbox::pending() const {
  absl::MutexLock lock(&mu_);
  return transfers_.size();
}

std::unique_ptr<Mailbox::InboundStream> Mailbox::OpenStream() {
  return std::unique_ptr<InboundStream>(new InboundStream(this));
}

void Mailbox::FailLocked(Transfer& transfer, absl::Status status) {
  if (transfer.state != Transfer::State::kOpen) return;
  transfer.state = Transfer::State::kFailed;
  transfer.error = std::move(status);
  transfer.ended = clock().Now();
  changed_.SignalAll();
}

// Why a chunk with header `h` has no registration, if that is already
// certain; OK if a registration may still come. With `final_check` the
// answer is never OK.
absl::Status Mailbox::UnexpectedLocked(const v1::ChunkHeader& h,
                                       bool final_check) {
  const TransferKey key{.job_id = h.job_id(),
                        .round = h.round(),
                        .phase = h.phase(),
                        .step = h.step()};
  const std::string what =
      absl::StrCat(DescribeKey(key), " from sender ", h.sender_id());
  auto finished = finished_below_.find(h.job_id());
  if (finished != finished_below_.end() && h.round() < finished->second)
    return absl::FailedPreconditionError(
        absl::StrCat("chunk of ", what, ": round ", h.round(), " of job ",
                     h.job_id(), " is already finished on worker ",
                     self_id()));
  if (ended_.count(MakeKey(key, h.sender_id())) > 0)
    return absl::FailedPreconditionError(
        absl::StrCat("chunk of ", what, ": that transfer already ended on "
                     "worker ", self_id()));
  for (const auto& [k, t] : transfers_) {
    const ChunkExpectation& e = t->expect;
    if (e.key.job_id == key.job_id && e.key.round == key.round &&
        e.key.phase == key.phase && e.key.step == key.step)
      return absl::FailedPreconditionError(
          absl::StrCat("sender ", h.sender_id(), " is not a peer of worker ",
                       self_id(), " in round ", h.round(), " (",
                       DescribeKey(key), ")"));
    if (e.sender_id == h.sender_id() && e.key.job_id != key.job_id)
      return absl::FailedPreconditionError(absl::StrCat(
          "chunk is for job ", key.job_id, ", worker ", self_id(),
          " expects job ", e.key.job_id, " from sender ", h.sender_id()));
  }
  if (final_check)
    return WithErrorKind(
        absl::FailedPreconditionError(absl::StrCat(
            "worker ", self_id(), " expects no transfer of ", what,
            " (waited ", absl::FormatDuration(options_.early_chunk_wait),
            " for it to be registered)")),
        kReceiverNotReady);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Mailbox::Transfer>> Mailbox::Bind(
    const v1::ChunkHeader& h, absl::Time deadline) {
  const TransferKey key{.job_id = h.job_id(),
                        .round = h.round(),
                        .phase = h.phase(),
                        .step = h.step()};
  const Key k = MakeKey(key, h.sender_id());
  const absl::Time give_up =
      std::min(deadline, clock().Now() + options_.early_chunk_wait);
  absl::MutexLock lock(&mu_);
  bool waited = false;
  while (true) {
    if (shut_down_) return ShuttingDown();
    auto it = transfers_.find(k);
    if (it != transfers_.end()) {
      Transfer& t = *it->second;
      if (t.bound)
        return absl::FailedPreconditionError(absl::StrCat(
            t.Describe(), ": another stream already delivers it"));
      t.bound = true;
      t.receiver_was_late = waited;
      return it->second;
    }
    waited = true;
    const bool final_check = clock().Now() >= give_up;
    absl::Status why = UnexpectedLocked(h, final_check);
    if (!why.ok()) return why;
    clock().WaitWithDeadline(&changed_, &mu_, give_up);
  }
}

absl::Status Mailbox::Deliver(Transfer& t, const v1::ChunkHeader& h,
                              bool last, PayloadPieces payload) {
  uint64_t payload_bytes = 0;
  for (absl::string_view piece : payload) payload_bytes += piece.size();
  ChunkExpectation expect;
  std::span<float> buffer;
  uint64_t next = 0;
  {
    absl::MutexLock lock(&mu_);
    if (t.state == Transfer::State::kFailed) return t.error;
    if (t.state == Transfer::State::kCommitted)
      return absl::InvalidArgumentError(absl::StrCat(
          t.Describe(), ": chunk after the last one (already committed)"));
    t.busy = true;
    if (t.first_chunk == absl::InfinitePast()) t.first_chunk = clock().Now();
    expect = t.expect;
    buffer = t.buffer;
    next = t.next_offset;
  }
  // Validate and decode outside the lock: other transfers proceed.
  absl::Status status = ValidateChunkHeader(h, payload_bytes, expect);
  if (status.ok() && h.offset() != next) {
    status = absl::InvalidArgumentError(
        h.offset() < next
            ? absl::StrCat("chunk [", h.offset(), ", ",
                           h.offset() + h.length(),
                           ") overlaps elements already received (next "
                           "expected element: ",
                           next, ")")
            : absl::StrCat("chunk starts at element ", h.offset(),
                           ", skipping elements [", next, ", ", h.offset(),
                           "); chunks must arrive in order"));
  }
  // The CRC is checked while decoding (one pass over the payload).
  if (status.ok())
    status = DecodeChunkPayload(h, payload,
                                buffer.subspan(h.offset(), h.length()));
  absl::MutexLock lock(&mu_);
  t.busy = false;
  changed_.SignalAll();
  if (t.state == Transfer::State::kFailed) return t.error;  // deadline
  if (!status.ok()) {
    status = absl::Status(status.code(),
                          absl::StrCat(t.Describe(), ": ", status.message()));
    FailLocked(t, status);
    return status;
  }
  t.next_offset = h.offset() + h.length();
  if (t.bytes == 0) t.first_chunk_bytes = payload_bytes;
  t.bytes += payload_bytes;
  if (last) {
    if (t.next_offset != expect.range_end) {
      status = absl::InvalidArgumentError(absl::StrCat(
          t.Describe(), ": last chunk ends at element ", t.next_offset,
          " but the range ends at ", expect.range_end));
      FailLocked(t, status);
      return status;
    }
    t.state = Transfer::State::kCommitted;
    t.ended = clock().Now();
  }
  return absl::OkStatus();
}

void Mailbox::EndStream(Transfer& t, const absl::Status& why) {
  absl::MutexLock lock(&mu_);
  t.bound = false;
  if (t.state != Transfer::State::kOpen) return;
  if (!why.ok()) {
    FailLocked(t, absl::Status(why.code(), absl::StrCat(t.Describe(), ": ",
                                                         why.message())));
    return;
  }
  const uint64_t total = t.expect.range_end - t.expect.range_begin;
  FailLocked(t, absl::UnavailableError(absl::StrCat(
                    t.Describe(), ": stream ended after ",
                    t.next_offset - t.expect.range_begin, " of ", total,
                    " elements without the last chunk")));
}

namespace {

// `send`, again on a new stream for as long as the peer's mailbox answers
// that it has not registered the transfer yet (RECEIVER_NOT_READY: it is
// still in an earlier round) and `deadline` has not passed. A partner
// lagging more than its early_chunk_wait behind is so waited for up to
// the exchange's deadline like any other late partner; before, the send
// failed after early_chunk_wait (10 s) and both ends dropped the edge
// (docs/exchange.md, "A partner still in an earlier round").
TransferOutcome SendUntilReceiverReady(
    const Mailbox& mailbox, const TransferKey& key,
    const OutgoingTransfer& transfer, absl::Time deadline,
    const std::function<TransferOutcome(const OutgoingTransfer&)>& send) {
  const Clock& clock = mailbox.clock();
  const absl::Time start = clock.Now();
  TransferOutcome outcome = send(transfer);
  int attempts = 1;
  while (HasErrorKind(outcome.status, kReceiverNotReady) &&
         clock.Now() < deadline) {
    ++attempts;
    outcome = send(transfer);
  }
  if (attempts > 1) {
    outcome.seconds = absl::ToDoubleSeconds(clock.Now() - start);
    GASLOC_LOG(INFO) << DescribeKey(key) << ": peer " << transfer.peer_id
                     << " was still in an earlier round; sent " << attempts
                     << " times over " << outcome.seconds << " s: "
                     << (outcome.status.ok() ? "OK"
                                             : outcome.status.ToString());
  }
  return outcome;
}

}  // namespace

std::vector<TransferOutcome> RunTransfers(
    Mailbox& mailbox, const TransferKey& key,
    std::span<const OutgoingTransfer> sends,
    std::span<const IncomingTransfer> receives, absl::Time deadline,
    const std::function<TransferOutcome(const OutgoingTransfer&)>& send) {
  std::vector<TransferOutcome> outcomes(sends.size() + receives.size());
  // Register the receives before anything is sent, so a faster peer's
  // chunks find them.
  const absl::Status expected = mailbox.Expect(key, receives, deadline);
  // One thread per send (bounded by the round's peers), owned here:
  // std::jthread joins on every way out of this scope.
  std::vector<std::jthread> senders;
  senders.reserve(sends.size());
  for (size_t i = 0; i < sends.size(); ++i)
    senders.emplace_back([&, i] {
      outcomes[i] =
          SendUntilReceiverReady(mailbox, key, sends[i], deadline, send);
      // FAILED_PRECONDITION from the peer means it will not take part in
      // this transfer (it finished the round, or the schedule it holds does
      // not name us), so it will not send either: stop waiting for it now
      // rather than at the deadline, which would make this worker late for
      // its next partner in turn.
      if (outcomes[i].status.code() == absl::StatusCode::kFailedPrecondition)
        mailbox.Abandon(key, sends[i].peer_id,
                        absl::FailedPreconditionError(absl::StrCat(
                            "peer ", sends[i].peer_id,
                            " refused this worker's transfer, so its own "
                            "will not come: ",
                            outcomes[i].status.message())));
    });
  for (size_t i = 0; i < receives.size(); ++i) {
    TransferOutcome& outcome = outcomes[sends.size() + i];
    if (!expected.ok()) {
      outcome.peer_id = receives[i].peer_id;
      outcome.incoming = true;
      outcome.status = expected;
      continue;
    }
    outcome = mailbox.Await(key, receives[i].peer_id);
  }
  senders.clear();  // joins them
  return outcomes;
}

// --- InboundStream ----------------------------------------------------------

Mailbox::InboundStream::~InboundStream() {
  if (!ended_) End();
}

absl::Status Mailbox::InboundStream::Accept(const v1::ExchangeChunk& chunk,
                                            absl::Time deadline) {
  const absl::string_view payload = chunk.payload();
  return Accept(chunk.header(), chunk.last(), PayloadPieces(&payload, 1),
                deadline);
}

absl::Status Mailbox::InboundStream::Accept(const v1::ChunkHeader& header,
                                            bool last, PayloadPieces payload,
                                            absl::Time deadline) {
  if (ended_ || failed_)
    return absl::FailedPreconditionError("chunk on a stream that has ended");
  if (transfer_ == nullptr) {
    auto bound = mailbox_->Bind(header, deadline);
    if (!bound.ok()) {
      failed_ = true;
      return bound.status();
    }
    transfer_ = *std::move(bound);
    key_ = transfer_->expect.key;
    sender_id_ = transfer_->expect.sender_id;
  }
  absl::Status status = mailbox_->Deliver(*transfer_, header, last, payload);
  if (!status.ok()) {
    failed_ = true;
    return status;
  }
  if (last) committed_ = true;
  return absl::OkStatus();
}

void Mailbox::InboundStream::End(absl::Status why) {
  if (ended_) return;
  ended_ = true;
  if (transfer_ != nullptr) mailbox_->EndStream(*transfer_, why);
}

}  // namespace gasloc
