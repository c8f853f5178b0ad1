// A worker's link bandwidth b_i: the one definition that the budget planner
// (coordinator/budget.h, fed by Coordinator::ReportRound), ListWorkers and
// gaslocctl's LINK_MB/S column use, and that a worker should report in its
// progress.
//
// One exchange gives one sample: the larger of the payload bytes sent and
// received over the exchange's wire time (ReportRoundRequest.wire_seconds:
// the time the bytes were moving, not the wait for a partner; links are
// full duplex, so the busier direction is what the link carried). The
// coordinator keeps a moving estimate of a member's samples
// (UpdateLinkEstimate, coordinator/link_model.h) and ListWorkers reports
// it as WorkerProgress.link_bytes_per_second.
//
// Pure functions; thread-safe.
#ifndef GASLOC_COMMON_LINK_BANDWIDTH_H_
#define GASLOC_COMMON_LINK_BANDWIDTH_H_

#include <algorithm>
#include <cstdint>

namespace gasloc {

// Bytes per second of one exchange; 0 = not measured (nothing moved, or no
// time measured).
inline double LinkBytesPerSecond(uint64_t bytes_sent, uint64_t bytes_received,
                                 double exchange_seconds) {
  const uint64_t moved = std::max(bytes_sent, bytes_received);
  if (moved == 0 || !(exchange_seconds > 0)) return 0;
  return static_cast<double>(moved) / exchange_seconds;
}

// The unit gaslocctl shows: megabytes (10^6 bytes) per second.
inline double LinkMegabytesPerSecond(double bytes_per_second) {
  return bytes_per_second / 1e6;
}

}  // namespace gasloc

#endif  // GASLOC_COMMON_LINK_BANDWIDTH_H_
