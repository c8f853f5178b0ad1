// One thread, owned by the object that holds it, that runs tasks one at a
// time in order: the overlapped exchange's (overlapped_exchange.h), so a
// job has one such thread for its life instead of one per round. Started
// on construction; the destructor lets the task in flight finish, drops
// those not started and joins.
//
// Thread safety: Run may be called from any thread. A task that throws
// does not end the thread: its exception is in the task's future.
#ifndef GASLOC_WORKER_ROUND_BACKGROUND_THREAD_H_
#define GASLOC_WORKER_ROUND_BACKGROUND_THREAD_H_

#include <deque>
#include <functional>
#include <future>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace gasloc {

class BackgroundThread {
 public:
  BackgroundThread();
  ~BackgroundThread();
  BackgroundThread(const BackgroundThread&) = delete;
  BackgroundThread& operator=(const BackgroundThread&) = delete;

  // Queues `task`; the future is ready once it has run (holding its
  // exception if it threw).
  std::future<void> Run(std::function<void()> task);

 private:
  void Loop();
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  mutable absl::Mutex mu_;
  std::deque<std::packaged_task<void()>> tasks_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::jthread thread_;  // last: started after the members it uses
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_ROUND_BACKGROUND_THREAD_H_
