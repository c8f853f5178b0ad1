// Bandwidth-optimal ring all-reduce (mean) over a PeerTransport:
// n-1 reduce-scatter steps then n-1 all-gather steps, each moving 1/n of
// the buffer from every worker to its ring successor, so each worker sends
// and receives 2(n-1)/n of the buffer in total and the cost is set by the
// slowest link in the ring (algorithms.md section 3).
//
// Every worker ends with bit-identical values: each segment is summed along
// one chain, divided once by its owner, rounded through the wire encoding
// by its owner too, and then copied verbatim around the ring (re-encoding
// a decoded value gives the same value in every encoding, INT8 included:
// int8_codec.h).
//
// What is rounded where, in a lossy encoding (BF16, INT8): each
// reduce-scatter step rounds the partial sum this worker sends (its own
// contribution at step 0, its sum with the predecessor's after), the
// receiver adds the decoded values in fp32; the owner of a segment rounds
// the finished mean once, and the all-gather forwards it unchanged. With
// error feedback (a `residual` buffer) this worker rounds what it sends
// itself, before the transport does (the same rounding: the transport's
// encoding of a rounded value is exact), and keeps what each rounding
// lost (algorithms.md section 3, "INT8 with error feedback").
//
// Thread safety: one call at a time per buffer; the transport's contract
// applies to concurrent calls with different keys.
#ifndef GASLOC_WORKER_ROUND_RING_ALL_REDUCE_H_
#define GASLOC_WORKER_ROUND_RING_ALL_REDUCE_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/clock.h"
#include "worker/exchange/peer_transport.h"

namespace gasloc {

struct RingMember {
  uint64_t worker_id = 0;
  std::string address;
};

struct RingAllReduceResult {
  absl::Status status;                    // OK iff every step succeeded
  std::vector<uint64_t> failed_peers;     // peers whose transfer failed
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  double seconds = 0;
  // Time spent waiting for the ring to assemble: the first step's wall
  // time beyond the mean of the later steps (those only move data; the
  // first also waits for the predecessor to reach the exchange). 0 with
  // fewer than two steps.
  double wait_seconds = 0;
  // Seconds the received bytes were moving: the measured steps' receive
  // wire times (TransferOutcome::wire_seconds) summed and scaled up to all
  // the bytes received; 0 when no step's receive was measured (single-chunk
  // segments, or this worker late to register every step).
  double wire_seconds = 0;
  // The predecessor, whose link (with ours) every receive crossed.
  uint64_t predecessor_id = 0;
};

// Segment s of [0, size) for an n-way ring: contiguous, aligned to 16
// elements, covering everything.
std::pair<uint64_t, uint64_t> RingSegment(uint64_t size, int n, int s);

// Replaces `data` (the whole arena-shaped buffer) by the mean over the
// ring of everyone's `data`. `ring` lists every member in ring order and
// `rank` is this worker's position. `scratch` is a buffer of data.size()
// floats. `key.phase` and `key.step` are set by the function. On failure
// `data` holds a partial result and must not be used. `clock` times the
// steps (the transport's deadlines are on the same clock).
//
// `residual`, when not empty (data.size() floats), turns on error
// feedback: on success it holds what this worker's roundings lost, in
// units of the sum: at each segment it sent in the reduce-scatter, the
// partial sum minus its rounding; at the segment it owns, the full sum
// minus n times the rounded mean; 0 elsewhere (a ring of one). The
// members' residuals then add up to exactly sum_i data_i - n * mean
// (up to fp32 rounding of those differences). On failure it is partly
// written and must not be used.
RingAllReduceResult RingAllReduceMean(PeerTransport& transport,
                                      const Clock& clock, TransferKey key,
                                      const std::vector<RingMember>& ring,
                                      int rank, std::span<float> data,
                                      std::span<float> scratch,
                                      const ExchangeOptions& options,
                                      std::span<float> residual = {});

// Rounds `values` in place to what `encoding` can represent (identity for
// FP32; bf16 round-to-nearest-even for BF16; INT8 with blocks counted from
// values[0], as a transfer of exactly this range encodes them), so a value
// kept locally equals the value a peer decodes from the wire.
void RoundToWireEncoding(v1::WireEncoding encoding, std::span<float> values);

}  // namespace gasloc

#endif  // GASLOC_WORKER_ROUND_RING_ALL_REDUCE_H_
