#include "worker/round/ring_all_reduce.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/exchange/int8_codec.h"
#include "worker/exchange/wire_codec.h"

namespace gasloc {
namespace {

constexpr uint64_t kAlign = 16;

int Mod(int a, int n) { return ((a % n) + n) % n; }

// The first step's time beyond the mean of the others (see the header).
double RingWaitSeconds(const std::vector<double>& step_seconds) {
  if (step_seconds.size() < 2) return 0;
  double rest = 0;
  for (size_t i = 1; i < step_seconds.size(); ++i) rest += step_seconds[i];
  rest /= static_cast<double>(step_seconds.size() - 1);
  return std::max(0.0, step_seconds[0] - rest);
}

}  // namespace

std::pair<uint64_t, uint64_t> RingSegment(uint64_t size, int n, int s) {
  const uint64_t blocks = (size + kAlign - 1) / kAlign;
  const uint64_t per = blocks / n, extra = blocks % n;
  const uint64_t begin_block = s * per + std::min<uint64_t>(s, extra);
  const uint64_t end_block = begin_block + per + (static_cast<uint64_t>(s) < extra ? 1 : 0);
  return {std::min(size, begin_block * kAlign), std::min(size, end_block * kAlign)};
}

void RoundToWireEncoding(v1::WireEncoding encoding, std::span<float> values) {
  if (encoding == v1::WIRE_ENCODING_INT8) return RoundToInt8(values);
  if (encoding != v1::WIRE_ENCODING_BF16) return;
  for (float& v : values) v = Bf16ToFloat(FloatToBf16(v));
}

namespace {

// Rounds `values` to the wire encoding; `lost` = what the rounding lost
// (the values before minus the values after).
void RoundKeepingTheLoss(v1::WireEncoding encoding, std::span<float> values,
                         std::span<float> lost) {
  std::copy(values.begin(), values.end(), lost.begin());
  RoundToWireEncoding(encoding, values);
  for (size_t i = 0; i < values.size(); ++i) lost[i] -= values[i];
}

}  // namespace

// Longer than 80 lines on purpose: one step of the ring (run_step) and the
// result's timing (finish) are lambdas over the same result, step timings
// and wire-byte tally, and the reduce-scatter / all-gather loops read top
// to bottom as the algorithm does (algorithms.md section 4).
RingAllReduceResult RingAllReduceMean(PeerTransport& transport,
                                      const Clock& clock, TransferKey key,
                                      const std::vector<RingMember>& ring,
                                      int rank, std::span<float> data,
                                      std::span<float> scratch,
                                      const ExchangeOptions& options,
                                      std::span<float> residual) {
  RingAllReduceResult result;
  const bool feedback = !residual.empty();
  if (feedback) std::fill(residual.begin(), residual.end(), 0.0f);
  const absl::Time start = clock.Now();
  const int n = static_cast<int>(ring.size());
  if (n <= 1) {
    result.seconds = 0;
    return result;
  }
  const RingMember& next = ring[Mod(rank + 1, n)];
  const RingMember& prev = ring[Mod(rank - 1, n)];
  const uint64_t size = data.size();
  std::vector<double> step_seconds;
  step_seconds.reserve(2 * (n - 1));
  result.predecessor_id = prev.worker_id;
  // Wire time: the measured steps' receives, scaled up to every step's
  // bytes (a step whose receive was not measured, because this worker
  // registered it after the predecessor began sending, moved its bytes at
  // the same link rate).
  uint64_t measured_bytes = 0;
  auto finish = [&] {
    result.seconds = absl::ToDoubleSeconds(clock.Now() - start);
    result.wait_seconds = RingWaitSeconds(step_seconds);
    const double scaled =
        measured_bytes == 0
            ? 0
            : result.wire_seconds * static_cast<double>(result.bytes_received) /
                  static_cast<double>(measured_bytes);
    // The first-chunk scaling is an estimate: never more than the total.
    result.wire_seconds = std::min(scaled, result.seconds);
  };

  auto run_step = [&](v1::ExchangePhase phase, int step, int send_segment,
                      int receive_segment) -> bool {
    key.phase = phase;
    key.step = static_cast<uint32_t>(step);
    const auto [send_begin, send_end] = RingSegment(size, n, send_segment);
    const auto [recv_begin, recv_end] = RingSegment(size, n, receive_segment);
    if (feedback && phase == v1::EXCHANGE_PHASE_REDUCE_SCATTER)
      RoundKeepingTheLoss(options.encoding,
                          data.subspan(send_begin, send_end - send_begin),
                          residual.subspan(send_begin, send_end - send_begin));
    OutgoingTransfer send{.peer_id = next.worker_id,
                          .address = next.address,
                          .data = data,
                          .range_begin = send_begin,
                          .range_end = send_end};
    IncomingTransfer receive{.peer_id = prev.worker_id,
                             .buffer = scratch,
                             .range_begin = recv_begin,
                             .range_end = recv_end};
    const absl::Time step_start = clock.Now();
    std::vector<TransferOutcome> outcomes =
        transport.Exchange(key, {&send, 1}, {&receive, 1}, options);
    step_seconds.push_back(absl::ToDoubleSeconds(clock.Now() - step_start));
    bool ok = true;
    for (const TransferOutcome& outcome : outcomes) {
      if (outcome.status.ok()) {
        (outcome.incoming ? result.bytes_received : result.bytes_sent) +=
            outcome.bytes;
        if (outcome.incoming) {
          if (outcome.wire_seconds > 0) {
            result.wire_seconds += outcome.wire_seconds;
            measured_bytes += outcome.bytes;
          }
        }
        continue;
      }
      ok = false;
      result.failed_peers.push_back(outcome.peer_id);
      if (result.status.ok())
        result.status = absl::Status(
            outcome.status.code(),
            absl::StrCat(v1::ExchangePhase_Name(phase), " step ", step, " ",
                         outcome.incoming ? "from" : "to", " worker ",
                         outcome.peer_id, ": ", outcome.status.message()));
    }
    if (!ok) return false;
    if (phase == v1::EXCHANGE_PHASE_REDUCE_SCATTER) {
      for (uint64_t i = recv_begin; i < recv_end; ++i) data[i] += scratch[i];
    } else {
      std::memcpy(data.data() + recv_begin, scratch.data() + recv_begin,
                  (recv_end - recv_begin) * sizeof(float));
    }
    return true;
  };

  // Reduce-scatter: after step s, segment (rank - s - 1) holds s + 2 terms;
  // after n - 1 steps this worker owns the full sum of segment rank + 1.
  for (int s = 0; s < n - 1; ++s) {
    if (!run_step(v1::EXCHANGE_PHASE_REDUCE_SCATTER, s, Mod(rank - s, n),
                  Mod(rank - s - 1, n))) {
      finish();
      return result;
    }
  }
  const int owned = Mod(rank + 1, n);
  const auto [own_begin, own_end] = RingSegment(size, n, owned);
  const float inv_n = 1.0f / static_cast<float>(n);
  if (feedback)  // the sum, less n times the rounded mean (below)
    std::copy(data.begin() + own_begin, data.begin() + own_end,
              residual.begin() + own_begin);
  for (uint64_t i = own_begin; i < own_end; ++i) data[i] *= inv_n;
  RoundToWireEncoding(options.encoding,
                      data.subspan(own_begin, own_end - own_begin));
  if (feedback) {
    const float n_f = static_cast<float>(n);
    for (uint64_t i = own_begin; i < own_end; ++i)
      residual[i] -= n_f * data[i];
  }
  // All-gather: pass finished segments around the ring.
  for (int s = 0; s < n - 1; ++s) {
    if (!run_step(v1::EXCHANGE_PHASE_ALL_GATHER, s, Mod(rank + 1 - s, n),
                  Mod(rank - s, n)))
      break;
  }
  finish();
  return result;
}

}  // namespace gasloc
