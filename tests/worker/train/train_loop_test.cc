// gasloc-train's step loop: the cadence decision (StepDutiesAfter) as a
// table, and RunTrainLoop on a tiny model against a twin trainer stepped by
// hand (the log window's means, the evaluations, the checkpoint's content),
// with a clock that moves 10 ms per reading so the timing figures are exact.
#include "worker/train/train_loop.h"

#include <cstdio>
#include <string>
#include <vector>

#include "common/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/train/tiny_trainer.h"

namespace gasloc {
namespace {

using Kind = TrainProgress::Kind;

// Moves 10 ms each time it is read, so a step timed by two readings takes
// exactly 10 ms.
class TickingClock final : public Clock {
 public:
  absl::Time Now() const override {
    absl::MutexLock lock(&mu_);
    now_ += absl::Milliseconds(10);
    return now_;
  }
  void WaitWithDeadline(absl::CondVar*, absl::Mutex*,
                        absl::Time) const override {}
  void SleepUntil(absl::Time) const override {}

 private:
  mutable absl::Mutex mu_;
  mutable absl::Time now_ ABSL_GUARDED_BY(mu_) = absl::UnixEpoch();
};

using gasloc::testing::TempPath;

std::unique_ptr<Trainer> MakeTrainer(const Clock* clock) {
  TrainerOptions options;
  options.clock = clock;
  return gasloc::testing::MakeTrainerOf(gasloc::testing::TinySpec(), options);
}

// (kind, step) of every report, e.g. "log 2".
std::string Name(const TrainProgress& p) {
  const char* kind = p.kind == Kind::kLog         ? "log"
                     : p.kind == Kind::kEvaluated ? "eval"
                                                  : "checkpoint";
  return std::string(kind) + " " + std::to_string(p.step);
}

TEST(StepDutiesTest, IntervalsAndTheEndOfTheRun) {
  TrainLoopOptions o;
  o.steps = 250;
  o.log_every = 10;
  o.eval_every = 100;
  o.checkpoint_every = 50;
  o.checkpoint_path = "/tmp/x.ckpt";
  struct Row {
    uint64_t step;
    bool log, evaluate, checkpoint;
  };
  for (const Row& row : std::vector<Row>{{1, false, false, false},
                                         {7, false, false, false},
                                         {10, true, false, false},
                                         {50, true, false, true},
                                         {100, true, true, true},
                                         {245, false, false, false},
                                         {250, true, true, true},
                                         {300, true, true, true}}) {
    SCOPED_TRACE(row.step);
    const StepDuties d = StepDutiesAfter(o, row.step);
    EXPECT_EQ(d.log, row.log);
    EXPECT_EQ(d.evaluate, row.evaluate);
    EXPECT_EQ(d.checkpoint, row.checkpoint);
  }
  EXPECT_EQ(StepDutiesAfter(o, 100).reason,
            "log every 10; eval every 100; checkpoint every 50");
  EXPECT_EQ(StepDutiesAfter(o, 250).reason, "end of run");
  EXPECT_EQ(StepDutiesAfter(o, 7).reason, "");
}

TEST(StepDutiesTest, ZeroIntervalsLeaveOnlyTheEnd) {
  TrainLoopOptions o;
  o.steps = 25;
  o.log_every = 10;  // the last step logs although 25 is no multiple of 10
  EXPECT_TRUE(StepDutiesAfter(o, 25).log);
  EXPECT_TRUE(StepDutiesAfter(o, 25).evaluate) << "always at the end";
  EXPECT_FALSE(StepDutiesAfter(o, 25).checkpoint) << "no path, no checkpoint";
  EXPECT_FALSE(StepDutiesAfter(o, 20).evaluate) << "eval_every 0";
  o.checkpoint_every = 5;
  EXPECT_FALSE(StepDutiesAfter(o, 20).checkpoint) << "still no path";
  o.checkpoint_path = "/tmp/x.ckpt";
  o.checkpoint_every = 0;
  EXPECT_FALSE(StepDutiesAfter(o, 20).checkpoint) << "checkpoint_every 0";
  EXPECT_TRUE(StepDutiesAfter(o, 25).checkpoint) << "always at the end";
  o.log_every = 0;
  EXPECT_FALSE(StepDutiesAfter(o, 20).log);
  EXPECT_FALSE(StepDutiesAfter(o, 25).log) << "log_every 0: not even the end";
  o.log_every = -3;
  o.eval_every = -3;
  EXPECT_FALSE(StepDutiesAfter(o, 3).log);
  EXPECT_FALSE(StepDutiesAfter(o, 3).evaluate);
}

TEST(RunTrainLoopTest, ReportsEachDutyInOrderWithTheWindowsMeans) {
  TickingClock clock, twin_clock;
  auto trainer = MakeTrainer(&clock);
  auto twin = MakeTrainer(&twin_clock);
  ASSERT_TRUE(trainer && twin);
  // The twin, stepped by hand: losses, lr and grad norms, bpb after 3 and 5.
  std::vector<StepStats> stats;
  double bpb3 = 0, bpb5 = 0;
  for (int i = 1; i <= 5; ++i) {
    auto s = twin->Step();
    ASSERT_TRUE(s.ok()) << s.status();
    stats.push_back(*s);
    if (i == 3) bpb3 = *twin->EvaluateBpb();
  }
  bpb5 = *twin->EvaluateBpb();

  TrainLoopOptions o;
  o.steps = 5;
  o.log_every = 2;
  o.eval_every = 3;
  o.checkpoint_every = 4;
  o.checkpoint_path = TempPath("train_loop_test.ckpt");
  o.checkpoint_extras.values["gasloc-train.data"] = "corpus";
  std::vector<TrainProgress> got;
  ASSERT_TRUE(RunTrainLoop(o, *trainer, [&](const TrainProgress& p) {
                got.push_back(p);
              }).ok());
  std::vector<std::string> names;
  for (const TrainProgress& p : got) names.push_back(Name(p));
  EXPECT_THAT(names, ::testing::ElementsAre("log 2", "eval 3", "log 4",
                                            "checkpoint 4", "log 5", "eval 5",
                                            "checkpoint 5"));
  ASSERT_EQ(got.size(), 7u);
  for (const TrainProgress& p : got) EXPECT_EQ(p.steps, 5u);
  // Each log line averages the steps since the previous one.
  EXPECT_DOUBLE_EQ(got[0].mean_loss, (stats[0].loss + stats[1].loss) / 2);
  EXPECT_DOUBLE_EQ(got[2].mean_loss, (stats[2].loss + stats[3].loss) / 2);
  EXPECT_DOUBLE_EQ(got[4].mean_loss, stats[4].loss);
  EXPECT_EQ(got[2].lr, stats[3].lr);
  EXPECT_EQ(got[2].grad_norm, stats[3].grad_norm);
  EXPECT_EQ(got[4].lr, stats[4].lr);
  for (int i : {0, 2, 4}) {
    EXPECT_DOUBLE_EQ(got[i].ms_per_step, 10.0) << i;
    EXPECT_DOUBLE_EQ(got[i].tokens_per_second, 4 * 32 / 0.01) << i;
  }
  EXPECT_EQ(got[1].val_bpb, bpb3);
  EXPECT_EQ(got[5].val_bpb, bpb5);
  EXPECT_EQ(got[6].path, o.checkpoint_path);
  // The last checkpoint is the end's, with the extras.
  auto reread = MakeTrainer(&clock);
  ASSERT_NE(reread, nullptr);
  auto extras = reread->LoadCheckpoint(o.checkpoint_path);
  ASSERT_TRUE(extras.ok()) << extras.status();
  EXPECT_EQ(reread->step(), 5u);
  EXPECT_EQ(extras->values["gasloc-train.data"], "corpus");
  std::remove(o.checkpoint_path.c_str());
}

TEST(RunTrainLoopTest, ATrainerAlreadyThereIsOnlyEvaluatedAndCheckpointed) {
  TickingClock clock;
  auto trainer = MakeTrainer(&clock);
  ASSERT_NE(trainer, nullptr);
  trainer->set_step(6);  // as if resumed past --steps
  TrainLoopOptions o;
  o.steps = 5;
  o.log_every = 1;
  o.checkpoint_path = TempPath("train_loop_test_resumed.ckpt");
  std::vector<std::string> names;
  ASSERT_TRUE(RunTrainLoop(o, *trainer, [&](const TrainProgress& p) {
                names.push_back(Name(p));
              }).ok());
  EXPECT_THAT(names, ::testing::ElementsAre("eval 6", "checkpoint 6"));
  EXPECT_EQ(trainer->step(), 6u) << "no step taken";
  std::remove(o.checkpoint_path.c_str());
}

TEST(RunTrainLoopTest, AFailedCheckpointEndsTheLoopWithItsError) {
  TickingClock clock;
  auto trainer = MakeTrainer(&clock);
  ASSERT_NE(trainer, nullptr);
  TrainLoopOptions o;
  o.steps = 4;
  o.log_every = 0;
  o.checkpoint_every = 2;
  o.checkpoint_path = TempPath("no-such-folder") + "/x.ckpt";
  std::vector<std::string> names;
  const absl::Status status = RunTrainLoop(
      o, *trainer, [&](const TrainProgress& p) { names.push_back(Name(p)); });
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(names.empty());
  EXPECT_EQ(trainer->step(), 2u) << "stopped at the first checkpoint";
}

}  // namespace
}  // namespace gasloc
