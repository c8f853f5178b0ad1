// A fixed set of long-lived threads, one per stage of local training
// (algorithms.md section 6): Run(fn) calls fn(k) on thread k for every k at
// once and returns when all have returned. Each thread is a separate OpenMP
// initial thread, so a stage sets its own OpenMP thread count (the models'
// Prepare does) without touching the others'.
//
// Thread safety: Run() is called by one thread at a time (the owner); fn
// runs concurrently on all stage threads and must synchronise whatever the
// stages share.
#ifndef GASLOC_WORKER_TRAIN_STAGE_THREADS_H_
#define GASLOC_WORKER_TRAIN_STAGE_THREADS_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"

namespace gasloc {

class StageThreads {
 public:
  explicit StageThreads(int count);
  ~StageThreads();
  StageThreads(const StageThreads&) = delete;
  StageThreads& operator=(const StageThreads&) = delete;

  int size() const { return static_cast<int>(threads_.size()); }
  // Runs fn(0) .. fn(size() - 1), each on its own thread; blocks until all
  // have returned.
  void Run(const std::function<void(int)>& fn);

 private:
  void Loop(int k);

  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int)>* fn_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  int pending_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_TRAIN_STAGE_THREADS_H_
