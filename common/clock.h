// Time as a dependency: the one time seam of the code. Decisions (leases,
// budgets, deadlines) take `now` from a Clock passed in, and waits that end
// at a deadline (an exchange's receive, an early chunk's wait for its
// registration, a daemon's back-off) wait through the same Clock, so tests
// drive them with FakeClock instead of sleeping.
//
//   FakeClock clock;
//   std::thread t([&] { mailbox.Await(key, peer); });  // waits on `clock`
//   clock.AwaitWaiters(1);                  // t is waiting now
//   clock.Advance(absl::Milliseconds(400));  // its deadline passes; t ends
//
// Thread safety: RealClock is stateless; FakeClock is safe to read, wait on
// and advance from any thread.
#ifndef GASLOC_COMMON_CLOCK_H_
#define GASLOC_COMMON_CLOCK_H_

#include <algorithm>
#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gasloc {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
  // Waits on `cv` (with `mu` held, as CondVar::Wait) until it is signalled
  // or this clock reaches `deadline`; may also return early (spuriously),
  // so callers wait in a loop that re-checks their state and Now().
  virtual void WaitWithDeadline(absl::CondVar* cv, absl::Mutex* mu,
                                absl::Time deadline) const = 0;
  // Returns when this clock reaches `deadline`.
  virtual void SleepUntil(absl::Time deadline) const = 0;
};

// The system clock.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  void WaitWithDeadline(absl::CondVar* cv, absl::Mutex* mu,
                        absl::Time deadline) const override {
    cv->WaitWithDeadline(mu, deadline);
  }
  void SleepUntil(absl::Time deadline) const override {
    absl::SleepFor(deadline - absl::Now());
  }
  // A process-wide instance (it has no state).
  static const RealClock& Get() {
    static const RealClock* const kClock = new RealClock();
    return *kClock;
  }
};

// A clock that moves only when told to. A wait on it ends when it is
// signalled or when Advance / Set moves the clock to its deadline (waiters
// re-check the clock every millisecond of real time, so an Advance is seen
// at once). With auto-advance on, a wait instead moves the clock straight
// to its deadline and returns: single-threaded tests then see exactly how
// long the code under test would have waited.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1700000000))
      : now_(start) {}
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  void Set(absl::Time t) {
    absl::MutexLock lock(&mu_);
    now_ = t;
  }
  void SetAutoAdvance(bool on) {
    absl::MutexLock lock(&mu_);
    auto_advance_ = on;
  }

  void WaitWithDeadline(absl::CondVar* cv, absl::Mutex* mu,
                        absl::Time deadline) const override {
    if (Enter(deadline)) {
      cv->WaitWithTimeout(mu, kPoll);
      Leave();
    }
  }
  void SleepUntil(absl::Time deadline) const override {
    while (Enter(deadline)) {
      absl::SleepFor(kPoll);
      Leave();
    }
  }

  // Threads waiting on this clock right now.
  int waiters() const {
    absl::MutexLock lock(&mu_);
    return waiters_;
  }
  // Waits on this clock that have ended so far (each re-checks the clock
  // as it ends): a test that moved the clock waits for this to grow by the
  // number of waiters to know they saw the move.
  uint64_t waits() const {
    absl::MutexLock lock(&mu_);
    return waits_;
  }
  // Blocks until at least `n` threads wait on this clock (then an Advance
  // reaches them).
  void AwaitWaiters(int n) const {
    Want want{this, n};
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&Enough, &want));
  }

 private:
  static constexpr absl::Duration kPoll = absl::Milliseconds(1);

  struct Want {
    const FakeClock* clock;
    int n;
  };
  static bool Enough(Want* want) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return want->clock->waiters_ >= want->n;  // called with mu_ held
  }

  // True (and counted as a waiter) if `deadline` is still ahead; with
  // auto-advance the clock jumps to it instead.
  bool Enter(absl::Time deadline) const {
    absl::MutexLock lock(&mu_);
    if (now_ >= deadline) return false;
    if (auto_advance_) {
      now_ = std::max(now_, deadline);
      return false;
    }
    ++waiters_;
    return true;
  }
  void Leave() const {
    absl::MutexLock lock(&mu_);
    --waiters_;
    ++waits_;
  }

  mutable absl::Mutex mu_;
  mutable absl::Time now_ ABSL_GUARDED_BY(mu_);
  mutable int waiters_ ABSL_GUARDED_BY(mu_) = 0;
  mutable uint64_t waits_ ABSL_GUARDED_BY(mu_) = 0;
  bool auto_advance_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace gasloc

#endif  // GASLOC_COMMON_CLOCK_H_
