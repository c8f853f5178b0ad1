#include "common/timer_thread.h"

#include <utility>

#include "common/clock.h"

namespace gasloc {

TimerThread::TimerThread() : thread_([this] { Loop(); }) {}

TimerThread::~TimerThread() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void TimerThread::At(absl::Time when, std::function<void()> fn) {
  absl::MutexLock lock(&mu_);
  queue_.emplace(when, std::move(fn));
  ++added_;  // wakes the loop: this one may be due before its deadline
}

void TimerThread::Loop() {
  const Clock& clock = RealClock::Get();
  while (true) {
    std::function<void()> fn;
    {
      absl::MutexLock lock(&mu_);
      while (!stopping_) {
        if (!queue_.empty() && queue_.begin()->first <= clock.Now()) break;
        const absl::Time wake =
            queue_.empty() ? absl::InfiniteFuture() : queue_.begin()->first;
        const uint64_t seen = added_;
        auto woken = [this, seen]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
          return stopping_ || added_ != seen;
        };
        mu_.AwaitWithDeadline(absl::Condition(&woken), wake);
      }
      if (stopping_) return;
      fn = std::move(queue_.begin()->second);
      queue_.erase(queue_.begin());
    }
    fn();
  }
}

}  // namespace gasloc
