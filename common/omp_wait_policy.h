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

// When OMP_WAIT_POLICY is unset: sets it to `policy` and re-executes this
// binary (/proc/self/exe) with the same arguments, so it never returns on
// success. When it is set (the caller's choice, or after the re-exec):
// returns at once. If the re-exec fails, returns with the variable set
// (children still get it) after a warning on stderr.
void EnsureOmpWaitPolicy(const char* policy);

}  // namespace gasloc

#endif  // GASLOC_COMMON_OMP_WAIT_POLICY_H_
