// Makes OMP_WAIT_POLICY take effect in the current process. libgomp reads
// the variable once, when it is loaded (before main), so a setenv() inside
// main only reaches child processes: the process itself keeps spinning at
// barriers, which stalls badly on shared cores (docs/benchmarks.md).
//
//   int main(int argc, char** argv) {
//     gasloc::EnsureOmpWaitPolicy("PASSIVE");  // first thing in main
//
// Thread safety: call once, first thing in main, before any other thread.
#ifndef GASLOC_COMMON_OMP_WAIT_POLICY_H_
#define GASLOC_COMMON_OMP_WAIT_POLICY_H_

namespace gasloc {

// When OMP_WAIT_POLICY is unset: sets it to `policy` (and GOMP_SPINCOUNT to
// `spin_count` when that is >= 0 and GOMP_SPINCOUNT is unset) and
// re-executes this binary (/proc/self/exe) with the same arguments, so it
// never returns on success. When OMP_WAIT_POLICY is set (the caller's
// choice, or after the re-exec): returns at once and changes nothing. If the
// re-exec fails, returns with the variables set (children still get them)
// after a warning on stderr.
void EnsureOmpWaitPolicy(const char* policy, long spin_count = -1);

// What training processes use: passive waiting after a short spin. With
// PASSIVE alone every parallel region of a step costs a futex sleep and
// wake per thread (4,445 context switches in 18 preset-S steps; 464 with
// this spin, and 2% faster); a core taken by another process costs at most
// the spin (~0.1 ms), not the stalls of libgomp's default 300,000.
inline constexpr char kTrainingOmpWaitPolicy[] = "PASSIVE";
inline constexpr long kTrainingOmpSpinCount = 10000;

}  // namespace gasloc

#endif  // GASLOC_COMMON_OMP_WAIT_POLICY_H_
