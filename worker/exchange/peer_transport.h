// The seam between a worker's round logic and the network. One call moves
// every transfer of one exchange step (all sends and receives at once, in
// both directions) and returns when each has finished, failed, or the
// deadline passed. The round state machine (worker/round/) is written
// against this interface only; server/ provides the gRPC implementation
// and worker/exchange/ an in-process one for tests.
//
// Data layout: `data` / `buffer` spans cover the WHOLE arena (element i is
// arena element i); a transfer moves only [range_begin, range_end) of it.
// A receive writes nothing outside its range, and commits only when every
// element of the range arrived intact: on any failure the buffer's range
// may be partially overwritten, so callers receive into scratch buffers,
// never into the live model.
//
// Thread safety: implementations must allow concurrent Exchange calls for
// different keys from different threads.
#ifndef GASLOC_WORKER_EXCHANGE_PEER_TRANSPORT_H_
#define GASLOC_WORKER_EXCHANGE_PEER_TRANSPORT_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gasloc/v1/job.pb.h"
#include "gasloc/v1/peer.pb.h"

namespace gasloc {

// Identifies one exchange step; both ends must use the same key.
struct TransferKey {
  uint64_t job_id = 0;
  uint64_t round = 0;
  v1::ExchangePhase phase = v1::EXCHANGE_PHASE_GOSSIP;
  uint32_t step = 0;  // ring step for REDUCE_SCATTER / ALL_GATHER
};

struct OutgoingTransfer {
  uint64_t peer_id = 0;
  std::string address;            // "host:port" of the peer's Peer service
  std::span<const float> data;    // whole arena
  uint64_t range_begin = 0;
  uint64_t range_end = 0;
};

struct IncomingTransfer {
  uint64_t peer_id = 0;           // the only sender accepted for this key
  std::span<float> buffer;        // whole-arena-shaped scratch buffer
  uint64_t range_begin = 0;
  uint64_t range_end = 0;
};

struct TransferOutcome {
  uint64_t peer_id = 0;
  bool incoming = false;  // false: a send; true: a receive
  // OK, or why it failed: DEADLINE_EXCEEDED (peer absent / too slow),
  // UNAVAILABLE (peer unreachable), INVALID_ARGUMENT / FAILED_PRECONDITION
  // (the peer sent something wrong; the message says what).
  absl::Status status;
  uint64_t bytes = 0;       // payload bytes moved
  double seconds = 0;       // wall time of this transfer
  // Seconds the bytes were moving (receives: from the first chunk taken in
  // to the commit, scaled up by the first chunk's share of the bytes; the
  // wait for the peer to arrive or to send is not in it). 0 = not measured
  // (a send, a failed receive, a single-chunk transfer, or a receive whose
  // first chunk came before it was registered: those bytes sat in buffers
  // and were taken in faster than the link carries them).
  double wire_seconds = 0;
};

struct ExchangeOptions {
  v1::WireEncoding encoding = v1::WIRE_ENCODING_FP32;
  uint32_t chunk_bytes = 1u << 20;
  absl::Time deadline = absl::InfiniteFuture();
};

class PeerTransport {
 public:
  virtual ~PeerTransport() = default;
  // The local worker's id (the sender id written into every chunk).
  virtual uint64_t self_id() const = 0;
  // Runs all `sends` and `receives` of `key` concurrently. Never blocks
  // past options.deadline (plus a small grace to cancel). Returns one
  // outcome per transfer, sends first, in the order given.
  virtual std::vector<TransferOutcome> Exchange(
      const TransferKey& key, std::span<const OutgoingTransfer> sends,
      std::span<const IncomingTransfer> receives,
      const ExchangeOptions& options) = 0;
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_EXCHANGE_PEER_TRANSPORT_H_
