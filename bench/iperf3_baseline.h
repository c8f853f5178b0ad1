// The iperf3 loopback baseline of `gasloc-bench exchange`: one iperf3 TCP
// stream of a given size over 127.0.0.1, run as two child processes (a
// one-off server and a client), so the exchange is compared with the tool
// operators know as well as with the bench's own raw-socket test.
//
// Thread safety: call from one thread at a time (it uses fixed child
// processes and a free port picked per call).
#ifndef GASLOC_BENCH_IPERF3_BASELINE_H_
#define GASLOC_BENCH_IPERF3_BASELINE_H_

#include <cstdint>

namespace gasloc::bench {

// True when an `iperf3` binary is on PATH.
bool HaveIperf3();
// Seconds iperf3 reports for moving `bytes` one way (receiver side), or -1
// when iperf3 is missing or failed.
double Iperf3Seconds(uint64_t bytes);

}  // namespace gasloc::bench

#endif  // GASLOC_BENCH_IPERF3_BASELINE_H_
