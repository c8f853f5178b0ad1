// Time as a dependency. Decisions (leases, budgets, deadlines) take `now`
// from a Clock passed in, never read the system time themselves, so tests
// drive them with FakeClock instead of sleeping.
//
// Thread safety: RealClock is stateless; FakeClock is safe to read and
// advance from any thread.
#ifndef GASLOC_COMMON_CLOCK_H_
#define GASLOC_COMMON_CLOCK_H_

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace gasloc {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

// The system clock.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  // A process-wide instance (it has no state).
  static const RealClock& Get() {
    static const RealClock* const kClock = new RealClock();
    return *kClock;
  }
};

// A clock that moves only when told to.
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

 private:
  mutable absl::Mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gasloc

#endif  // GASLOC_COMMON_CLOCK_H_
