// Runs callbacks at given (real) times, one after another on its own
// thread: the load generator's heartbeats, simulated compute and churn
// (server/simulated_fleet.cc) schedule thousands of them without a thread
// each.
//
//   TimerThread timers;
//   timers.At(absl::Now() + absl::Seconds(1), [] { ... });
//
// Callbacks due at the same time run in the order they were added. The
// destructor stops the thread; callbacks not yet due are dropped.
//
// Thread safety: At may be called from any thread, callbacks included.
#ifndef GASLOC_COMMON_TIMER_THREAD_H_
#define GASLOC_COMMON_TIMER_THREAD_H_

#include <cstdint>
#include <functional>
#include <map>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace gasloc {

class TimerThread {
 public:
  TimerThread();
  ~TimerThread();
  TimerThread(const TimerThread&) = delete;
  TimerThread& operator=(const TimerThread&) = delete;

  // Runs `fn` on the timer thread once `when` has come.
  void At(absl::Time when, std::function<void()> fn);

 private:
  void Loop();

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t added_ ABSL_GUARDED_BY(mu_) = 0;
  std::multimap<absl::Time, std::function<void()>> queue_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: started once the members exist
};

}  // namespace gasloc

#endif  // GASLOC_COMMON_TIMER_THREAD_H_
