// The receive side of the exchange, shared by every transport: the local
// worker registers the transfers it expects (Expect), streams feed chunks
// in (InboundStream::Accept), and the worker waits for each transfer to
// commit, fail, or run out of time (Await).
//
// Commit rule: a transfer commits only when every element of its range
// arrived exactly once, in ascending contiguous chunks, each with a valid
// header and checksum and finite values, and the chunk ending the range
// carries `last`. Anything else (a gap, an overlap or duplicate, a bad
// chunk, a stream that ends early, the deadline) fails the transfer for
// good; a failed transfer never becomes committed. Chunks are decoded
// straight into the registered scratch buffer, inside the transfer's range
// only; nothing else is ever written.
//
// A chunk for a transfer not (yet) registered waits for the registration
// up to MailboxOptions::early_chunk_wait (the peer may simply be faster),
// then is rejected with FAILED_PRECONDITION. Chunks for a finished round
// (one below the newest round registered for that job, or FinishRound),
// for a transfer that already ended, from a sender the round did not name,
// or for a different job than the one the sender is expected in, are
// rejected at once with FAILED_PRECONDITION.
//
// Time: every deadline is on MailboxOptions::clock (the worker's one
// Clock), and every wait for a deadline waits through it, so tests move a
// FakeClock instead of sleeping.
//
// Thread safety: all methods are thread-safe. An InboundStream is used by
// one thread (the one reading that stream) and must not outlive its
// Mailbox. Await returns only after any decode into the buffer has
// finished, so once it returns the caller owns the buffer again.
#ifndef GASLOC_WORKER_EXCHANGE_MAILBOX_H_
#define GASLOC_WORKER_EXCHANGE_MAILBOX_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <span>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "gasloc/v1/peer.pb.h"
#include "worker/exchange/peer_transport.h"
#include "worker/exchange/wire_codec.h"

namespace gasloc {

struct MailboxOptions {
  // The local worker's id (for messages and the sender check).
  uint64_t self_id = 0;
  // How long a chunk that arrives before its transfer is registered waits
  // for the registration (never past the stream's own deadline).
  absl::Duration early_chunk_wait = absl::Seconds(10);
  // How many ended transfers are remembered so that late chunks for them
  // are refused at once instead of waiting.
  size_t remembered_transfers = 1024;
  // The clock of every deadline and wait (not owned; outlives the mailbox).
  const Clock* clock = &RealClock::Get();
};

class Mailbox {
 public:
  explicit Mailbox(MailboxOptions options);
  ~Mailbox();
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  const Clock& clock() const { return *options_.clock; }
  uint64_t self_id() const {
    const uint64_t assigned = assigned_self_id_.load();
    return assigned != 0 ? assigned : options_.self_id;
  }
  // Sets this worker's id after construction (a daemon learns it from the
  // coordinator after its Peer service is already listening, and again
  // after a re-registration).
  void set_self_id(uint64_t worker_id) { assigned_self_id_ = worker_id; }

  // Registers the receives of `key`, all at once, each accepting chunks
  // only from its peer_id, until `deadline`. Rounds below key.round of
  // key.job_id count as finished from now on. Errors: INVALID_ARGUMENT (a
  // range outside its buffer, two receives from one peer), ALREADY_EXISTS
  // (a receive of this key and peer is registered), FAILED_PRECONDITION
  // (the round is already finished). On error nothing is registered.
  absl::Status Expect(const TransferKey& key,
                      std::span<const IncomingTransfer> receives,
                      absl::Time deadline);

  // Waits until the receive of (key, peer_id) has committed or failed, or
  // its deadline passed (then it fails with DEADLINE_EXCEEDED), and
  // unregisters it. Never returns while a chunk is being decoded into the
  // buffer.
  TransferOutcome Await(const TransferKey& key, uint64_t peer_id);

  // Marks every round <= `round` of `job_id` finished.
  void FinishRound(uint64_t job_id, uint64_t round);

  // Fails the open receive of (key, peer_id), if any, with `why`: the peer
  // has told us it will not send (it refused our own transfer), so waiting
  // for the deadline would only delay this worker. No-op otherwise.
  void Abandon(const TransferKey& key, uint64_t peer_id, absl::Status why);

  // The worker is shutting down: every open transfer fails with
  // UNAVAILABLE, chunks waiting for a registration are refused, and every
  // later Expect or chunk is refused with UNAVAILABLE. Idempotent.
  void Shutdown();

  // Number of registered transfers (for tests and status).
  size_t pending() const;

  class InboundStream;
  // A reader for one incoming stream (one transfer).
  std::unique_ptr<InboundStream> OpenStream();

 private:
  struct Transfer;
  using Key = std::tuple<uint64_t, uint64_t, int, uint32_t, uint64_t>;
  static Key MakeKey(const TransferKey& key, uint64_t sender);

  absl::StatusOr<std::shared_ptr<Transfer>> Bind(const v1::ChunkHeader& h,
                                                 absl::Time deadline);
  absl::Status Deliver(Transfer& transfer, const v1::ChunkHeader& header,
                       bool last, PayloadPieces payload);
  void EndStream(Transfer& transfer, const absl::Status& why);
  absl::Status UnexpectedLocked(const v1::ChunkHeader& h, bool final_check)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FailLocked(Transfer& transfer, absl::Status status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const MailboxOptions options_;
  std::atomic<uint64_t> assigned_self_id_{0};
  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // any transfer's state, registrations
  std::map<Key, std::shared_ptr<Transfer>> transfers_ ABSL_GUARDED_BY(mu_);
  // Per job: every round below this value is finished.
  std::map<uint64_t, uint64_t> finished_below_ ABSL_GUARDED_BY(mu_);
  std::set<Key> ended_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Key> ended_order_ ABSL_GUARDED_BY(mu_);
};

// The common body of PeerTransport::Exchange: registers `receives` in
// `mailbox`, runs `send` for every send on its own thread (a std::jthread
// joined before it returns), awaits every receive, and returns the
// outcomes (sends first, in order). A send the peer refuses as not yet
// registered (kind RECEIVER_NOT_READY: the peer is still in an earlier
// round) is sent again on a new stream until `deadline`.
std::vector<TransferOutcome> RunTransfers(
    Mailbox& mailbox, const TransferKey& key,
    std::span<const OutgoingTransfer> sends,
    std::span<const IncomingTransfer> receives, absl::Time deadline,
    const std::function<TransferOutcome(const OutgoingTransfer&)>& send);

// Feeds the chunks of one stream to the mailbox. The first chunk binds the
// stream to its transfer; later chunks must belong to the same transfer.
class Mailbox::InboundStream {
 public:
  ~InboundStream();  // calls End() if the stream was not ended
  InboundStream(const InboundStream&) = delete;
  InboundStream& operator=(const InboundStream&) = delete;

  // Accepts the next chunk: validates it and decodes it into the buffer.
  // `deadline` bounds the wait for a registration that is not there yet.
  // A non-OK result is final for this stream (the transport ends the
  // stream with it); it also fails the bound transfer unless the chunk
  // could not be bound to one (unexpected sender, job, round).
  absl::Status Accept(const v1::ExchangeChunk& chunk, absl::Time deadline);
  // The same for a chunk whose payload a transport holds apart from its
  // header, in pieces (gRPC's receive slices): decoded straight from them.
  absl::Status Accept(const v1::ChunkHeader& header, bool last,
                      PayloadPieces payload, absl::Time deadline);
  // True once the transfer committed (after the last chunk).
  bool committed() const { return committed_; }
  // The stream is over. A bound transfer that has not committed fails
  // with `why` (default: UNAVAILABLE, the stream was cut).
  void End(absl::Status why = absl::OkStatus());
  // The key and sender of the bound transfer (valid after the first
  // accepted chunk).
  const TransferKey& key() const { return key_; }
  uint64_t sender_id() const { return sender_id_; }

 private:
  friend class Mailbox;
  explicit InboundStream(Mailbox* mailbox) : mailbox_(mailbox) {}
  Mailbox* mailbox_;
  std::shared_ptr<Transfer> transfer_;
  TransferKey key_;
  uint64_t sender_id_ = 0;
  bool committed_ = false;
  bool failed_ = false;
  bool ended_ = false;
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_EXCHANGE_MAILBOX_H_
