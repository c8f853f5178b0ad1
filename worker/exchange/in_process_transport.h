// A PeerTransport with no sockets, for tests of the round logic: workers
// join one InProcessNetwork and exchange through the same codec and
// Mailbox path the gRPC transport uses (chunks are encoded, checksummed,
// validated and decoded exactly as on the wire, and a committed transfer
// is acknowledged with the codec's MakeAck / CheckAck), each send running
// on its own thread, so both directions of a pair move at the same time.
//
// Faults can be injected per (sender, receiver, round):
//   kDropPeer        the peer is gone: nothing it sends arrives (its sends
//                    fail UNAVAILABLE) and sends to it fail UNAVAILABLE;
//                    whoever waits on it times out (DEADLINE_EXCEEDED)
//   kCutAfterChunks  the stream stops after `chunk_index` chunks without
//                    the last one (receiver: UNAVAILABLE)
//   kCorruptChunk    chunk number `chunk_index` has one payload byte
//                    flipped (receiver and sender: INVALID_ARGUMENT)
//   kDelay           the sender waits `delay` before its first chunk (never
//                    past the deadline)
//   kSilent          the sender sends nothing and waits for the deadline
//                    (a hung peer: both sides DEADLINE_EXCEEDED)
//   kDropAck         the receiver commits the transfer but its
//                    acknowledgement is lost (receiver OK, sender
//                    UNAVAILABLE)
//
//   InProcessNetwork net;
//   auto a = net.Join(1), b = net.Join(2);
//   net.AddFault(InProcessFault::CutAfterChunks(/*from=*/1, /*to=*/2, 3));
//   a->Exchange(key, sends, receives, options);   // on two threads
//
// Time: the network's MailboxOptions::clock is every member's clock (its
// deadlines, the delays of injected faults, the outcomes' seconds), so a
// test on a FakeClock reaches a deadline by advancing it, not by sleeping.
//
// Thread safety: InProcessNetwork and every transport are thread-safe;
// Exchange may run concurrently on different transports and keys. A
// transport must be destroyed before its network.
#ifndef GASLOC_WORKER_EXCHANGE_IN_PROCESS_TRANSPORT_H_
#define GASLOC_WORKER_EXCHANGE_IN_PROCESS_TRANSPORT_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "worker/exchange/mailbox.h"
#include "worker/exchange/peer_transport.h"

namespace gasloc {

struct InProcessFault {
  enum Kind {
    kDropPeer,
    kCutAfterChunks,
    kCorruptChunk,
    kDelay,
    kSilent,
    kDropAck
  };
  Kind kind = kDropPeer;
  // kDropPeer: the peer that is gone (`to` is ignored). Otherwise the
  // sender of the affected streams.
  uint64_t from = 0;
  // The receiver of the affected streams; 0 = every receiver.
  uint64_t to = 0;
  // Only this round; unset = every round.
  std::optional<uint64_t> round;
  // kCutAfterChunks: chunks delivered before the cut; kCorruptChunk: the
  // (0-based) chunk that is corrupted.
  uint32_t chunk_index = 0;
  absl::Duration delay = absl::ZeroDuration();  // kDelay

  static InProcessFault DropPeer(uint64_t peer);
  static InProcessFault CutAfterChunks(uint64_t from, uint64_t to,
                                       uint32_t chunks);
  static InProcessFault CorruptChunk(uint64_t from, uint64_t to,
                                     uint32_t chunk_index);
  static InProcessFault Delay(uint64_t from, uint64_t to,
                              absl::Duration delay);
  static InProcessFault Silent(uint64_t from, uint64_t to);
  static InProcessFault DropAck(uint64_t from, uint64_t to);
  // This fault, limited to `round`.
  InProcessFault InRound(uint64_t r) const;
};

class InProcessTransport;

class InProcessNetwork {
 public:
  // `mailbox` is the template for every joined worker's mailbox (self_id
  // is set per worker).
  explicit InProcessNetwork(MailboxOptions mailbox = {});
  ~InProcessNetwork();

  // Adds worker `worker_id` to the network; its address is
  // Address(worker_id). Fails if the id is already joined (returns null).
  std::unique_ptr<InProcessTransport> Join(uint64_t worker_id);
  static std::string Address(uint64_t worker_id);

  void AddFault(const InProcessFault& fault);
  void ClearFaults();

 private:
  friend class InProcessTransport;
  void Leave(uint64_t worker_id);
  // The mailbox of `worker_id`, or null if it is not joined.
  std::shared_ptr<Mailbox> Find(uint64_t worker_id);
  std::vector<InProcessFault> FaultsFor(uint64_t from, uint64_t to,
                                        uint64_t round);

  const MailboxOptions mailbox_options_;
  absl::Mutex mu_;
  std::map<uint64_t, std::shared_ptr<Mailbox>> members_ ABSL_GUARDED_BY(mu_);
  std::vector<InProcessFault> faults_ ABSL_GUARDED_BY(mu_);
};

class InProcessTransport final : public PeerTransport {
 public:
  ~InProcessTransport() override;

  uint64_t self_id() const override { return mailbox_->self_id(); }
  std::vector<TransferOutcome> Exchange(
      const TransferKey& key, std::span<const OutgoingTransfer> sends,
      std::span<const IncomingTransfer> receives,
      const ExchangeOptions& options) override;

  Mailbox& mailbox() { return *mailbox_; }

 private:
  friend class InProcessNetwork;
  InProcessTransport(InProcessNetwork* network,
                     std::shared_ptr<Mailbox> mailbox)
      : network_(network), mailbox_(std::move(mailbox)) {}
  TransferOutcome Send(const TransferKey& key, const OutgoingTransfer& send,
                       const ExchangeOptions& options);

  InProcessNetwork* network_;
  std::shared_ptr<Mailbox> mailbox_;
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_EXCHANGE_IN_PROCESS_TRANSPORT_H_
