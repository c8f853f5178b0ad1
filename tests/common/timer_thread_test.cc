#include "common/timer_thread.h"

#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace gasloc {
namespace {

TEST(TimerThread, RunsCallbacksInTimeOrderNotInTheOrderAdded) {
  absl::Mutex mu;
  std::vector<int> ran;
  absl::Notification done;
  TimerThread timers;
  const absl::Time now = absl::Now();
  auto record = [&](int i) {
    absl::MutexLock lock(&mu);
    ran.push_back(i);
  };
  timers.At(now + absl::Milliseconds(60), [&] {
    record(3);
    done.Notify();
  });
  timers.At(now + absl::Milliseconds(20), [&] { record(1); });
  timers.At(now + absl::Milliseconds(40), [&] { record(2); });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
  absl::MutexLock lock(&mu);
  EXPECT_EQ(ran, (std::vector<int>{1, 2, 3}));
  EXPECT_GE(absl::Now() - now, absl::Milliseconds(60));
}

TEST(TimerThread, ACallbackMaySchedule) {
  absl::Notification second;
  TimerThread timers;
  timers.At(absl::Now(), [&] {
    timers.At(absl::Now() + absl::Milliseconds(10), [&] { second.Notify(); });
  });
  EXPECT_TRUE(second.WaitForNotificationWithTimeout(absl::Seconds(5)));
}

TEST(TimerThread, DestroyingDropsWhatIsNotDue) {
  bool ran = false;
  {
    TimerThread timers;
    timers.At(absl::Now() + absl::Hours(1), [&] { ran = true; });
  }
  EXPECT_FALSE(ran);
}

}  // namespace
}  // namespace gasloc
