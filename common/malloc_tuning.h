// Keeps glibc malloc from handing large buffers back to the kernel, so a
// process that streams megabytes through freshly allocated buffers (gRPC's
// slices and messages on the exchange path) reuses warm pages instead of
// taking a page fault on every 4 KiB it touches.
//
// Why: glibc serves allocations above its mmap threshold (dynamic, up to
// 32 MiB) with a fresh mmap and returns them with munmap, and trims freed
// heap tops with madvise; either way the next buffer's first touch faults.
// On this project's machines (virtualized, page faults ~10 us) that was
// most of the exchange's time: `perf` showed ~25% of cycles in page faults
// under the kernel's copy to user space, 64,000 faults per 400 MB streamed,
// and gRPC at 0.1 GB/s on loopback (docs/exchange.md, docs/benchmarks.md).
//
//   int main(int argc, char** argv) {
//     ... parse flags ...
//     gasloc::TuneMallocForStreaming(compute_threads);  // before threads
//
// Thread safety: call once, early in main, before other threads allocate.
#ifndef GASLOC_COMMON_MALLOC_TUNING_H_
#define GASLOC_COMMON_MALLOC_TUNING_H_

#include <string>

namespace gasloc {

// Fixes the mmap threshold at 32 MiB (so chunk-sized buffers come from the
// heap), the trim threshold at 1 GiB (freed memory stays mapped and warm),
// and the number of malloc arenas at max(2, compute_threads): gRPC's many
// threads then share the compute threads' arenas instead of each getting
// one of glibc's default 8 per core, whose emptied heaps glibc unmaps
// whatever the trim threshold (measured: 0.4-0.7 GB/s with the default
// arena count, 1.5 with 2). Fewer arenas than compute threads would make
// training threads contend: a step makes ~70,000 small allocations (oneDNN
// memory handles), and one arena for two threads cost 10-14% of an S bf16
// step. Returns "" on success, else what glibc refused (the process works
// either way, only slower).
std::string TuneMallocForStreaming(int compute_threads);

}  // namespace gasloc

#endif  // GASLOC_COMMON_MALLOC_TUNING_H_
