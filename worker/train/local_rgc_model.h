// Bounded-horizon local training with readout-gradient consensus
// (algorithms.md section 6; docs/local_rgc.md) behind the Model interface,
// so the Trainer (data, AdamW, evaluation, checkpoints) and everything above
// it (the worker's rounds, the outer algorithms) run it unchanged on the
// same flat parameter arena.
//
// The L blocks are split into K contiguous stages (stage_partition.h). Stage
// k is a TransformerModel that keeps only its own blocks' activations and
// blocked weights, runs on its own thread (StageThreads) with its own share
// of the cores, takes the previous stage's output as a detached copy, puts
// its local loss through the shared decoder (final LayerNorm + head) and
// backpropagates into its own blocks only (stage 1 also into the
// embeddings). Its decoder gradient (readout gradient r_k) goes to a private
// buffer; ForwardBackward writes the mean of the r_k into the decoder's
// slots of `grads`, and the blocks' gradients into theirs, so one AdamW step
// on the whole arena follows, as for global backprop.
//
//   synchronous (default): one ForwardBackward = one batch through all K
//     stages; stage k starts as soon as stage k-1's forward has handed over
//     h_{k-1}; the decoder gradient averages the K readout gradients of that
//     batch. K = 1 is global backprop, bit for bit.
//   asynchronous: one ForwardBackward = one pipeline tick: stage k works on
//     the batch of k ticks ago (its input was produced by stage k-1 in the
//     previous tick, under parameters one update older), all K stages at
//     once with no waiting on each other; the decoder gradient averages the
//     readout gradients of the stages busy in this tick, which come from
//     K consecutive batches (staleness up to K - 1 steps = pipeline depth).
//     The first K - 1 ticks fill the pipeline (later stages idle, their
//     gradients zero).
//
// Forward (evaluation) is the ordinary full forward: all stages in order on
// the caller's thread with all threads, then the decoder.
//
// Thread safety: one caller thread at a time (as Model); the stage threads
// run inside ForwardBackward only.
#ifndef GASLOC_WORKER_TRAIN_LOCAL_RGC_MODEL_H_
#define GASLOC_WORKER_TRAIN_LOCAL_RGC_MODEL_H_

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "worker/model/transformer.h"
#include "worker/train/stage_partition.h"
#include "worker/train/stage_threads.h"

namespace gasloc {

struct LocalRgcOptions {
  int stages = 2;
  bool asynchronous = false;
  // OpenMP threads of each stage; 0 = max(1, all threads / stages).
  int threads_per_stage = 0;
};

// Bytes of every buffer local training holds besides the arenas of the
// trainer (params, grads, AdamW moments), for docs/local_rgc.md and the
// benchmark.
struct LocalRgcMemory {
  size_t stage_workspaces = 0;  // activations + scratch of the K stage models
  size_t stage_weights = 0;     // their blocked weight copies (current plan)
  size_t handoff = 0;           // mailboxes between stages
  size_t readout = 0;           // the K private decoder gradients
  size_t tokens = 0;            // batches in flight (asynchronous)
  size_t total() const {
    return stage_workspaces + stage_weights + handoff + readout + tokens;
  }
};

class LocalRgcModel final : public Model {
 public:
  // options.threads: all compute threads of the worker (evaluation uses
  // them all; 0 = all cores); options.max_batch sizes every stage.
  static absl::StatusOr<std::unique_ptr<LocalRgcModel>> Create(
      const ModelConfig& config, const ModelOptions& options,
      const LocalRgcOptions& rgc);
  ~LocalRgcModel() override;

  // One synchronous step or one asynchronous tick (see the header comment).
  // Returns the local loss of the deepest stage that worked (in the
  // synchronous mode: stage K, the full model's loss on this batch).
  absl::StatusOr<float> ForwardBackward(const FloatArena& params,
                                        const uint8_t* tokens, int batch,
                                        int length, FloatArena* grads) override;
  absl::StatusOr<float> Forward(const FloatArena& params,
                                const uint8_t* tokens, int batch,
                                int length) override;
  // UNIMPLEMENTED: generate from a checkpoint with a global model (same
  // arena layout), e.g. gasloc-train generate.
  absl::Status NextByteLogits(const FloatArena& params, const uint8_t* prefix,
                              int length, float* logits) override;
  double TrainingFlops(int batch, int length) const override;

  int stages() const { return static_cast<int>(ranges_.size()); }
  const std::vector<StageRange>& ranges() const { return ranges_; }
  bool asynchronous() const { return rgc_.asynchronous; }
  int threads_per_stage() const { return threads_per_stage_; }
  // Local losses of the last ForwardBackward, per stage (NaN: idle).
  const std::vector<double>& stage_losses() const { return stage_losses_; }
  // The readout gradient r_k of stage k in the last ForwardBackward, as
  // (ln_f weight, ln_f bias, head weight) concatenated; empty if idle.
  std::vector<float> ReadoutGradient(int k) const;
  LocalRgcMemory Memory() const;
  // Test seam: stage k reads its targets from `windows` ((batch, length +
  // 1) bytes as ForwardBackward's tokens; targets = windows[:, 1:]) instead
  // of the batch's; empty = the batch's. Used to show that no gradient
  // crosses a stage boundary.
  void OverrideStageTargets(int k, std::vector<uint8_t> windows);

 private:
  struct Stage;
  LocalRgcModel(const ModelConfig& config,
                std::shared_ptr<const ArenaLayout> layout,
                const ModelOptions& options, const LocalRgcOptions& rgc,
                std::vector<StageRange> ranges, int threads_per_stage);
  // One stage's share of a synchronous step / an asynchronous tick.
  absl::Status RunStageSync(int k, const uint8_t* tokens, int stride,
                            float* grads);
  absl::Status RunStageTick(int k, int stride, float* grads);
  // Forward + local loss + backward of stage k on its input x(first).
  void StageLocalPass(int k, const uint8_t* tokens, int stride, float* grads,
                      float* handoff);
  void ZeroStageGrads(int k, float* grads) const;
  // Writes the mean of the working stages' readout gradients into grads.
  void AverageReadouts(FloatArena* grads) const;
  void SignalHandoff(int boundary, bool ok);
  bool WaitHandoff(int boundary);
  // The matmul compute type of options_.precision (for error messages).
  kernels::dt Cdt() const {
    return options_.precision == v1::PRECISION_BF16 ? kernels::dt::bf16
                                                    : kernels::dt::f32;
  }

  ModelOptions options_;
  LocalRgcOptions rgc_;
  std::vector<StageRange> ranges_;
  int threads_per_stage_;
  ModelTensorIndex index_;
  std::vector<std::unique_ptr<Stage>> stages_;
  std::unique_ptr<StageThreads> threads_;
  const FloatArena* params_ = nullptr;
  int batch_ = 0, length_ = 0;
  std::vector<double> stage_losses_;
  std::vector<std::vector<uint8_t>> target_override_;
  // Asynchronous pipeline: ticks run, tokens of the last K batches.
  uint64_t tick_ = 0;
  std::vector<std::vector<uint8_t>> token_ring_;
  // Synchronous hand-off: step_ id; handoff_step_[b] = the step whose
  // h_b is in mailbox b (or failed_ when the producer failed).
  std::mutex handoff_mu_;
  std::condition_variable handoff_cv_;
  uint64_t step_ ABSL_GUARDED_BY(handoff_mu_) = 0;
  std::vector<uint64_t> handoff_step_ ABSL_GUARDED_BY(handoff_mu_);
  bool handoff_failed_ ABSL_GUARDED_BY(handoff_mu_) = false;
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_TRAIN_LOCAL_RGC_MODEL_H_
