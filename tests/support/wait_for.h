// WaitFor: a test waits for an event of another thread (a predicate over
// what it can observe) up to a deadline, instead of sleeping a fixed time
// and hoping the event happened. Polls every millisecond on the real
// clock; a test on a FakeClock advances it instead (FakeClock's
// AwaitWaiters).
//
// Thread safety: the predicate runs on the calling thread; what it reads
// must be safe to read there (atomics, a mutex).
#ifndef GASLOC_TESTS_SUPPORT_WAIT_FOR_H_
#define GASLOC_TESTS_SUPPORT_WAIT_FOR_H_

#include "absl/functional/function_ref.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gasloc::testing {

// True once `predicate` holds; false if `deadline` passed first.
inline bool WaitFor(absl::FunctionRef<bool()> predicate, absl::Time deadline) {
  for (;;) {
    if (predicate()) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
}

// As above, with a deadline `timeout` from now.
inline bool WaitFor(absl::FunctionRef<bool()> predicate,
                    absl::Duration timeout) {
  return WaitFor(predicate, absl::Now() + timeout);
}

}  // namespace gasloc::testing

#endif  // GASLOC_TESTS_SUPPORT_WAIT_FOR_H_
