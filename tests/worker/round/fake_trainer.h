// A deterministic stand-in for the real Trainer in round-logic tests: the
// "model" is a small arena pulled toward a worker-specific target by plain
// gradient steps on 0.5 ||theta - target||^2, so the outer algorithms can
// be checked exactly and quickly.
#ifndef GASLOC_TESTS_WORKER_ROUND_FAKE_TRAINER_H_
#define GASLOC_TESTS_WORKER_ROUND_FAKE_TRAINER_H_

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/clock.h"
#include "worker/round/inner_trainer.h"

namespace gasloc::testing {

inline std::shared_ptr<const ArenaLayout> FakeLayout(int rows = 8, int cols = 40) {
  return std::make_shared<ArenaLayout>(std::vector<TensorSpec>{
      {"w", {rows, cols}, true}, {"b", {cols}, false}});
}

class FakeTrainer : public InnerTrainer {
 public:
  FakeTrainer(std::shared_ptr<const ArenaLayout> layout, float target_value,
              float step_size = 0.1f)
      : params_(layout), grads_(layout), target_(layout), step_(step_size) {
    for (size_t i = 0; i < params_.size(); ++i) {
      params_.data()[i] = 0.01f * static_cast<float>(i % 7);
      target_.data()[i] = target_value + 0.001f * static_cast<float>(i % 5);
    }
  }

  FloatArena& params() override { return params_; }
  FloatArena& grads() override { return grads_; }

  absl::StatusOr<InnerStepResult> Step() override {
    auto result = ComputeGradients();
    if (!result.ok()) return result;
    if (absl::Status s = ApplyGradients(); !s.ok()) return s;
    return result;
  }

  absl::StatusOr<InnerStepResult> ComputeGradients() override {
    if (clock_ != nullptr) clock_->Advance(step_time_);
    if (real_step_time_ > absl::ZeroDuration()) absl::SleepFor(real_step_time_);
    if (fail_from_step_ >= 0 && steps_ >= fail_from_step_)
      return absl::InternalError(
          absl::StrCat("injected failure of step ", steps_));
    if (poison_next_step_) {
      params_.data()[0] = std::nanf("");
      poison_next_step_ = false;
    }
    double loss = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      const float d = params_.data()[i] - target_.data()[i];
      grads_.data()[i] = d;
      loss += 0.5 * d * d;
    }
    ++steps_;
    return InnerStepResult{static_cast<float>(loss), 64};
  }

  absl::Status ApplyGradients() override {
    for (size_t i = 0; i < params_.size(); ++i)
      params_.data()[i] -= step_ * grads_.data()[i];
    return absl::OkStatus();
  }

  absl::StatusOr<float> EvaluateBpb() override {
    double loss = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      const float d = params_.data()[i] - target_.data()[i];
      loss += 0.5 * d * d;
    }
    return static_cast<float>(loss);
  }

  // "Checkpoints" live in memory, keyed by path.
  absl::Status SaveCheckpoint(const std::string& path,
                              const CheckpointExtras& outer) override {
    saved_[path] = {std::vector<float>(params_.flat().begin(), params_.flat().end()), outer};
    return absl::OkStatus();
  }
  absl::StatusOr<CheckpointExtras> LoadCheckpoint(
      const std::string& path, const CheckpointCheck& check) override {
    auto it = saved_.find(path);
    if (it == saved_.end()) return absl::NotFoundError(path);
    if (check) {
      absl::Status accepted = check(it->second.second);
      if (!accepted.ok()) return accepted;
    }
    std::copy(it->second.first.begin(), it->second.first.end(), params_.data());
    return it->second.second;
  }

  void PoisonNextStep() { poison_next_step_ = true; }
  // Every step from the `step`-th (0-based, counted over the trainer's
  // life) fails with INTERNAL, changing nothing.
  void FailStepsFrom(int step) { fail_from_step_ = step; }
  bool HasCheckpoint(const std::string& path) const {
    return saved_.count(path) > 0;
  }
  // Every step takes `step_time` on `clock` (a step of known length).
  void TakeTimeOn(FakeClock* clock, absl::Duration step_time) {
    clock_ = clock;
    step_time_ = step_time;
  }
  // Every step also sleeps `step_time` of real time (a worker that is
  // computing while real threads exchange).
  void SleepOnEveryStep(absl::Duration step_time) { real_step_time_ = step_time; }
  int steps() const { return steps_; }
  // Every schedule point the round machine set, in order: the positions,
  // and the horizon fractions (-1 for a point without one).
  void SetSchedulePoint(const SchedulePoint& point) override {
    schedule_steps_.push_back(point.step);
    schedule_progress_.push_back(point.progress.value_or(-1));
  }
  const std::vector<uint64_t>& schedule_steps() const {
    return schedule_steps_;
  }
  const std::vector<double>& schedule_progress() const {
    return schedule_progress_;
  }

 private:
  FloatArena params_, grads_, target_;
  float step_;
  bool poison_next_step_ = false;
  int fail_from_step_ = -1;
  FakeClock* clock_ = nullptr;
  absl::Duration step_time_;
  absl::Duration real_step_time_;
  int steps_ = 0;
  std::vector<uint64_t> schedule_steps_;
  std::vector<double> schedule_progress_;
  std::map<std::string, std::pair<std::vector<float>, CheckpointExtras>> saved_;
};

}  // namespace gasloc::testing

#endif  // GASLOC_TESTS_WORKER_ROUND_FAKE_TRAINER_H_
