#include "worker/round/background_thread.h"

#include <utility>

namespace gasloc {

BackgroundThread::BackgroundThread() : thread_([this] { Loop(); }) {}

BackgroundThread::~BackgroundThread() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

std::future<void> BackgroundThread::Run(std::function<void()> task) {
  std::packaged_task<void()> packaged(std::move(task));
  std::future<void> done = packaged.get_future();
  absl::MutexLock lock(&mu_);
  tasks_.push_back(std::move(packaged));
  return done;
}

bool BackgroundThread::HasWork() const { return stopping_ || !tasks_.empty(); }

void BackgroundThread::Loop() {
  for (;;) {
    std::packaged_task<void()> task;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &BackgroundThread::HasWork));
      if (stopping_) return;  // tasks not started are dropped (broken promise)
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();  // an exception lands in the task's future
  }
}

}  // namespace gasloc
