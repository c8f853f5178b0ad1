#include "worker/round/trainer_adapter.h"

#include "common/log.h"
#include "common/status_macros.h"

namespace gasloc {

absl::StatusOr<std::unique_ptr<InnerTrainer>> TrainerAdapter::Create(
    const v1::JobSpec& spec, int rank, int num_workers, int threads) {
  TrainerOptions options;
  options.spec = spec;
  options.rank = rank;
  options.num_workers = num_workers;
  options.threads = threads;
  ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer, Trainer::Create(options));
  const v1::TrainingSpec& t = trainer->spec().training();
  if (t.mode() == v1::TRAIN_MODE_LOCAL_RGC) {
    GASLOC_LOG(INFO) << "inner training: local RGC, " << t.local_rgc().stages()
                     << " stages, "
                     << (t.local_rgc().asynchronous() ? "asynchronous"
                                                      : "synchronous")
                     << ", " << trainer->threads() << " threads";
  } else {
    GASLOC_LOG(INFO) << "inner training: global backprop, "
                     << trainer->threads() << " threads";
  }
  return std::unique_ptr<InnerTrainer>(new TrainerAdapter(std::move(trainer)));
}

absl::StatusOr<InnerStepResult> TrainerAdapter::Step() {
  ASSIGN_OR_RETURN(StepStats stats, trainer_->Step());
  return InnerStepResult{.loss = static_cast<float>(stats.loss),
                         .tokens = static_cast<uint64_t>(stats.tokens)};
}

absl::StatusOr<InnerStepResult> TrainerAdapter::ComputeGradients() {
  ASSIGN_OR_RETURN(float loss, trainer_->ComputeGradients());
  return InnerStepResult{
      .loss = loss,
      .tokens = static_cast<uint64_t>(trainer_->tokens_per_step())};
}

absl::Status TrainerAdapter::ApplyGradients() {
  return trainer_->ApplyGradients().status();
}

absl::StatusOr<float> TrainerAdapter::EvaluateBpb() {
  ASSIGN_OR_RETURN(double bpb, trainer_->EvaluateBpb());
  return static_cast<float>(bpb);
}

absl::Status TrainerAdapter::SaveCheckpoint(const std::string& path,
                                            const CheckpointExtras& outer) {
  return trainer_->SaveCheckpoint(path, outer);
}

absl::StatusOr<CheckpointExtras> TrainerAdapter::LoadCheckpoint(
    const std::string& path, const CheckpointCheck& check) {
  return trainer_->LoadCheckpoint(path, check);
}

}  // namespace gasloc
