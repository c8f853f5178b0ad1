// Waiting for an event in a test instead of sleeping a fixed time:
//
//   ASSERT_TRUE(WaitFor([&] { return clock.waiters() >= 1; },
//                       absl::Now() + absl::Seconds(10)));
//
// The predicate is checked at once and then every millisecond of real time
// (or every `poll`) until it holds or `deadline` passes, so a test takes as long as the event
// does, and a missing event fails the test (returns false) instead of
// hanging it. For waits on a FakeClock, prefer its AwaitWaiters / waits().
//
// Thread safety: the predicate runs on the calling thread.
#ifndef GASLOC_TESTS_SUPPORT_WAIT_FOR_H_
#define GASLOC_TESTS_SUPPORT_WAIT_FOR_H_

#include "absl/functional/function_ref.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gasloc {

// True once `predicate` holds; false if it still does not at `deadline`.
// `poll` is the pause between checks: longer for a predicate that costs
// something (an RPC, an HTTP query, reading a log file).
inline bool WaitFor(absl::FunctionRef<bool()> predicate, absl::Time deadline,
                    absl::Duration poll = absl::Milliseconds(1)) {
  while (!predicate()) {
    if (absl::Now() >= deadline) return predicate();
    absl::SleepFor(poll);
  }
  return true;
}

// WaitFor with a deadline `timeout` from now.
inline bool WaitFor(absl::FunctionRef<bool()> predicate,
                    absl::Duration timeout,
                    absl::Duration poll = absl::Milliseconds(1)) {
  return WaitFor(predicate, absl::Now() + timeout, poll);
}

}  // namespace gasloc

#endif  // GASLOC_TESTS_SUPPORT_WAIT_FOR_H_
