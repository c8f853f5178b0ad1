// GetAssignment's long polls on a real clock: an idle worker's poll is not
// woken by changes that do not concern it (another worker registering),
// and is woken at once, not at its periodic recheck, when a job binds the
// worker. With N idle workers every registration used to wake all N polls,
// each re-running its check in a transaction: O(N^2) for a fleet starting
// (RegisterWorker p99 413 ms at 1,000 simulated workers, docs/benchmarks.md).
#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/coordinator/recording_coordinator.h"

namespace gasloc::coordinator {
namespace {

using LongPollTest = RecordingCoordinatorTest;

TEST_F(LongPollTest, IdlePollsWakeForTheirJobNotForOtherWorkersWrites) {
  constexpr int kIdle = 8;
  std::vector<uint64_t> ids;
  for (int i = 0; i < kIdle; ++i) {
    auto registered = Register();
    ASSERT_TRUE(registered.ok()) << registered.status();
    ids.push_back(registered->worker_id());
  }
  std::atomic<int> rounds{0};
  std::vector<std::thread> polls;
  for (uint64_t id : ids)
    polls.emplace_back([&, id] {
      v1::GetAssignmentRequest ask;
      ask.set_worker_id(id);
      ask.set_after_round(-1);
      ask.set_wait_ms(5000);
      auto a = coord_->GetAssignment(ask, nullptr);
      EXPECT_TRUE(a.ok()) << a.status();
      if (a.ok() && a->kind() == v1::ASSIGNMENT_KIND_ROUND) ++rounds;
    });
  absl::SleepFor(absl::Milliseconds(100));  // every poll is waiting

  // Registrations write; the idle polls stay asleep: only the
  // registrations' own transactions run (one each).
  TakeOps();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(Register().ok());
  absl::SleepFor(absl::Milliseconds(50));
  const std::vector<std::string> ops = TakeOps();
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "Begin"), 3)
      << "idle polls re-checked after other workers' registrations";

  // A job that binds them wakes them well before the 500 ms recheck.
  v1::JobSpec spec;
  spec.set_name("long-poll-job");
  spec.mutable_data()->set_corpus_path("/data/corpus.txt");
  spec.mutable_stop()->set_max_rounds(5);
  spec.set_min_workers(kIdle + 3);
  spec.mutable_model()->set_layers(2);
  spec.mutable_model()->set_d_model(16);
  spec.mutable_model()->set_heads(1);
  spec.mutable_model()->set_context(16);
  spec.mutable_outer()->set_local_steps(10);
  const absl::Time started = absl::Now();
  ASSERT_TRUE(coord_->StartJob(spec).ok());
  for (std::thread& t : polls) t.join();
  EXPECT_EQ(rounds.load(), kIdle);
  EXPECT_LT(absl::Now() - started, kLongPollRecheck * 0.6);
}

}  // namespace
}  // namespace gasloc::coordinator
