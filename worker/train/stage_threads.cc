#include "worker/train/stage_threads.h"

namespace gasloc {

StageThreads::StageThreads(int count) {
  threads_.reserve(count);
  for (int k = 0; k < count; ++k) threads_.emplace_back([this, k] { Loop(k); });
}

StageThreads::~StageThreads() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

void StageThreads::Run(const std::function<void(int)>& fn) {
  std::unique_lock<std::mutex> lock(mu_);
  fn_ = &fn;
  pending_ = size();
  ++generation_;
  start_cv_.notify_all();
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  fn_ = nullptr;
}

void StageThreads::Loop(int k) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(int)>* fn;
    {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      fn = fn_;
    }
    (*fn)(k);
    std::lock_guard<std::mutex> lock(mu_);
    if (--pending_ == 0) done_cv_.notify_one();
  }
}

}  // namespace gasloc
