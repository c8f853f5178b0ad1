// Adapts the single-process Trainer (worker/train/trainer.h) to the
// InnerTrainer seam of the round state machine, so the worker daemon runs
// the real model while round-logic tests run fakes.
//
// Thread safety: as Trainer (one thread at a time).
#ifndef GASLOC_WORKER_ROUND_TRAINER_ADAPTER_H_
#define GASLOC_WORKER_ROUND_TRAINER_ADAPTER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "gasloc/v1/job.pb.h"
#include "worker/round/inner_trainer.h"
#include "worker/train/trainer.h"

namespace gasloc {

class TrainerAdapter final : public InnerTrainer {
 public:
  // Builds the job's Trainer: data rank `rank` of `num_workers` (as the
  // daemon's DataShardOf decided them), `threads` compute threads (0 = the
  // spec's, whose 0 = all cores).
  static absl::StatusOr<std::unique_ptr<InnerTrainer>> Create(
      const v1::JobSpec& spec, int rank, int num_workers, int threads);

  explicit TrainerAdapter(std::unique_ptr<Trainer> trainer)
      : trainer_(std::move(trainer)) {}

  FloatArena& params() override { return trainer_->params(); }
  FloatArena& grads() override { return trainer_->grads(); }
  absl::StatusOr<InnerStepResult> Step() override;
  absl::StatusOr<InnerStepResult> ComputeGradients() override;
  absl::Status ApplyGradients() override;
  absl::StatusOr<float> EvaluateBpb() override;
  absl::Status SaveCheckpoint(const std::string& path,
                              const CheckpointExtras& outer) override;
  absl::StatusOr<CheckpointExtras> LoadCheckpoint(
      const std::string& path, const CheckpointCheck& check) override;

  FloatArena* optimizer_m() override { return &trainer_->optimizer().m(); }
  FloatArena* optimizer_v() override { return &trainer_->optimizer().v(); }
  uint64_t optimizer_step() const override { return trainer_->step(); }
  void set_optimizer_step(uint64_t step) override { trainer_->set_step(step); }
  void SetSchedulePoint(const SchedulePoint& point) override {
    trainer_->set_schedule_step(point.step);
    if (point.progress) trainer_->set_schedule_progress(*point.progress);
  }
  Trainer& trainer() { return *trainer_; }

 private:
  std::unique_ptr<Trainer> trainer_;
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_ROUND_TRAINER_ADAPTER_H_
