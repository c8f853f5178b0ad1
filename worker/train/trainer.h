// The single-process trainer: composes the Model, its parameter and
// gradient arenas, AdamW and the window sampler over one corpus. The worker
// daemon drives it round by round (it owns the outer algorithms and the
// network; none of that is here), gasloc-train drives it on its own, and
// gasloc-bench measures it.
//
//   ASSIGN_OR_RETURN(auto trainer, Trainer::Create(options));
//   for (...) ASSIGN_OR_RETURN(StepStats s, trainer->Step());
//   ASSIGN_OR_RETURN(double bpb, trainer->EvaluateBpb());
//
// training.mode picks the model: global backprop (TransformerModel) or
// local training with readout-gradient consensus (LocalRgcModel, K stages
// on threads); everything else is the same.
//
// Step() = ComputeGradients() (forward + backward on the next batch,
// gradients left in grads()) + ApplyGradients() (clip + AdamW); the
// data-parallel baseline all-reduces grads() between the two.
//
// Thread safety: one thread at a time (the model and AdamW run `threads`
// compute threads inside each call).
#ifndef GASLOC_WORKER_TRAIN_TRAINER_H_
#define GASLOC_WORKER_TRAIN_TRAINER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/arena.h"
#include "common/clock.h"
#include "gasloc/v1/job.pb.h"
#include "worker/model/model.h"
#include "worker/train/adamw.h"
#include "worker/train/checkpoint.h"
#include "worker/train/data.h"
#include "worker/train/generate.h"

namespace gasloc {

struct TrainerOptions {
  // The job (defaults are applied again here; ValidateJobSpec must pass).
  // Used: model (with init_from: the parameters come from that exported
  // directory, export.h, instead of InitParameters(seed)), training (batch,
  // threads, precision, adamw, seed),
  // data (corpus_path, train_fraction, eval_windows), and the schedule
  // horizon (below).
  v1::JobSpec spec;
  // This worker's place in the job's draw sequence (data.h): ranks
  // [0, num_workers) read disjoint windows within an epoch.
  int rank = 0;
  int num_workers = 1;
  // Compute threads; 0 = spec.training.threads (whose 0 = all cores).
  int threads = 0;
  // Cosine horizon in steps when spec.training.adamw.decay_steps is 0;
  // when this is 0 too, stop.max_rounds * outer.local_steps; when that is
  // 0, no decay.
  uint64_t total_steps = 0;
  // Times Step(); nullptr = the real clock.
  const Clock* clock = nullptr;
};

struct StepStats {
  double loss = 0;      // mean cross-entropy, nats per byte
  int64_t tokens = 0;   // predicted bytes in the step (batch * context)
  double seconds = 0;   // wall time of the whole step
  float lr = 0;
  double grad_norm = 0; // before clipping
};

class Trainer {
 public:
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(
      const TrainerOptions& options);
  // As Create, with a model built by the caller (tests use stand-ins); its
  // config must be the spec's.
  static absl::StatusOr<std::unique_ptr<Trainer>> CreateWithModel(
      const TrainerOptions& options, std::unique_ptr<Model> model);

  // One optimizer step on the next batch. Non-finite loss or gradient:
  // error, parameters and optimizer state untouched (the batch is used up).
  absl::StatusOr<StepStats> Step();
  // Forward + backward on the next batch; returns the loss and leaves
  // d loss / d params in grads().
  absl::StatusOr<float> ComputeGradients();
  // Clips grads() and applies one AdamW step to params(); advances step().
  // FAILED_PRECONDITION if no gradient was computed since the last apply.
  absl::StatusOr<AdamWStepStats> ApplyGradients();

  // Validation bits per byte over the fixed windows (data.eval_windows
  // windows of context + 1 bytes, evenly spaced over the validation part).
  absl::StatusOr<double> EvaluateBpb();

  absl::StatusOr<std::string> Generate(absl::string_view prompt,
                                       const GenerateOptions& options);

  // Writes params, AdamW state, step, data cursor and `extras`.
  absl::Status SaveCheckpoint(const std::string& path,
                              const CheckpointExtras& extras = {});
  // Restores what SaveCheckpoint wrote; returns the extras. Refuses a
  // checkpoint of another model config (FAILED_PRECONDITION), a damaged
  // one, or one whose extras `check` refuses; all or nothing: the state is
  // read into scratch and swapped in only when every check passed.
  absl::StatusOr<CheckpointExtras> LoadCheckpoint(
      const std::string& path, const CheckpointCheck& check = nullptr);

  FloatArena& params() { return params_; }
  const FloatArena& params() const { return params_; }
  FloatArena& grads() { return grads_; }
  AdamW& optimizer() { return adamw_; }
  Model& model() { return *model_; }
  const Corpus& corpus() const { return *corpus_; }
  const v1::JobSpec& spec() const { return spec_; }
  const ModelConfig& config() const { return model_->config(); }
  int batch() const { return batch_; }
  int threads() const { return threads_; }
  int64_t tokens_per_step() const {
    return static_cast<int64_t>(batch_) * config().context;
  }
  // Optimizer steps taken.
  uint64_t step() const { return adamw_.step(); }
  void set_step(uint64_t step) { adamw_.set_step(step); }
  // The sampler's next draw (draws = windows, batch per step).
  uint64_t data_cursor() const { return sampler_.cursor(); }
  void set_data_cursor(uint64_t cursor) { sampler_.set_cursor(cursor); }
  // Schedule position of the next step only (AdamW::set_schedule_step).
  void set_schedule_step(uint64_t step) { adamw_.set_schedule_step(step); }
  // Horizon fraction of the next step only (AdamW::set_schedule_progress).
  void set_schedule_progress(double progress) {
    adamw_.set_schedule_progress(progress);
  }
  // Learning rate of the next step.
  float next_lr() const { return adamw_.next_lr(); }

 private:
  Trainer(const v1::JobSpec& spec, int threads, const Clock* clock,
          std::unique_ptr<Model> model, std::unique_ptr<Corpus> corpus,
          WindowSampler sampler, const AdamWOptions& adamw,
          std::vector<size_t> eval_starts);

  v1::JobSpec spec_;
  int batch_;
  int threads_;
  const Clock* clock_;
  std::unique_ptr<Model> model_;
  std::unique_ptr<Corpus> corpus_;
  WindowSampler sampler_;
  FloatArena params_;
  FloatArena grads_;
  AdamW adamw_;
  std::vector<size_t> eval_starts_;
  std::vector<uint8_t> tokens_;  // batch x (context + 1)
  bool grads_ready_ = false;
};

// Resolves the compute thread count: `threads` if > 0, else the spec's, else
// all cores (omp_get_max_threads / hardware concurrency).
int ResolveThreads(int threads, const v1::JobSpec& spec);

struct LocalRgcOptions;
// training.local_rgc as LocalRgcOptions (defaults applied beforehand).
LocalRgcOptions LocalRgcOptionsFromSpec(const v1::TrainingSpec& training);

// The float train_fraction of a JobSpec as the decimal the user wrote
// (0.9f -> 0.9, so the split is floor(0.9 * size) as data/README.md says).
double TrainFractionFromSpec(float fraction);

}  // namespace gasloc

#endif  // GASLOC_WORKER_TRAIN_TRAINER_H_
