// The inner optimizer (algorithms.md section 1): AdamW with linear warmup
// then cosine decay to lr * min_lr_ratio, decoupled weight decay on the
// tensors whose TensorSpec.weight_decay is set (2-D weights only), and
// global-norm gradient clipping. Parameters, gradients and the moments m, v
// share one ArenaLayout, so a step is one pass over flat buffers (split at
// tensor boundaries only to pick the decay). Matches torch.optim.AdamW
// (bias-corrected, eps added to sqrt(v_hat)) and
// torch.nn.utils.clip_grad_norm_ (scale = clip / (norm + 1e-6)).
//
// Thread safety: AdamW is used by one thread at a time (it runs `threads`
// OpenMP threads inside Step). The free functions are pure.
#ifndef GASLOC_WORKER_TRAIN_ADAMW_H_
#define GASLOC_WORKER_TRAIN_ADAMW_H_

#include <cstdint>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "common/arena.h"
#include "gasloc/v1/job.pb.h"

namespace gasloc {

struct AdamWOptions {
  float lr = 1e-3f;               // peak
  uint64_t warmup_steps = 100;
  // Last step of the cosine (counted from step 0, warmup included); after
  // it the rate stays at lr * min_lr_ratio. 0 = no decay (peak after
  // warmup).
  uint64_t decay_steps = 0;
  float min_lr_ratio = 0.1f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;         // 0 = no clipping
  int threads = 1;                // OpenMP threads of Step (0 = default)
};

// From a JobSpec's AdamWSpec with defaults applied (ApplyJobSpecDefaults).
AdamWOptions AdamWOptionsFromSpec(const v1::AdamWSpec& spec);

// Learning rate of step `step` (0-based: the first step is 0).
//   step < warmup:            lr * (step + 1) / warmup
//   warmup <= step < decay:   min + (lr - min) * (1 + cos(pi * p)) / 2,
//                             p = (step - warmup) / (decay - warmup)
//   otherwise:                min (or lr when decay_steps == 0)
float LearningRate(const AdamWOptions& options, uint64_t step);

// Learning rate of step `step` at `progress` (in [0, 1], clamped) of the
// job's schedule horizon (algorithms.md section 1, "The schedule's
// horizon"): the warmup by the step as above, then the cosine by the
// progress, whatever decay_steps says:
//   step < warmup:  lr * (step + 1) / warmup
//   otherwise:      min + (lr - min) * (1 + cos(pi * progress)) / 2
float LearningRate(const AdamWOptions& options, uint64_t step,
                   double progress);

// L2 norm of the whole gradient arena, accumulated in double.
double GlobalGradNorm(const FloatArena& grads, int threads);

struct AdamWStepStats {
  float lr = 0;
  double grad_norm = 0;   // before clipping
  float clip_scale = 1;   // factor applied to the gradient
};

class AdamW {
 public:
  AdamW(std::shared_ptr<const ArenaLayout> layout, const AdamWOptions& options);

  // One step on `params` with `grads` (not modified; clipping is applied
  // on the fly). INVALID_ARGUMENT (params untouched, step not advanced) if
  // the gradient norm is not finite or a layout differs.
  absl::StatusOr<AdamWStepStats> Step(FloatArena* params,
                                      const FloatArena& grads);

  const AdamWOptions& options() const { return options_; }
  // Steps taken so far (the bias-correction count t is step() after Step).
  uint64_t step() const { return step_; }
  void set_step(uint64_t step) { step_ = step; }
  // The schedule position whose learning rate the next Step() uses, once
  // (then back to step()): a worker whose round budget H_i differs from the
  // job's H follows the job's schedule, not its own step count.
  void set_schedule_step(uint64_t step) { schedule_step_ = step; }
  uint64_t schedule_step() const { return schedule_step_.value_or(step_); }
  // The next Step()'s place on the job's schedule horizon, once: its
  // cosine follows `progress` instead of the step (LearningRate's
  // progress form). Unset: the step form.
  void set_schedule_progress(double progress) { schedule_progress_ = progress; }
  // Learning rate of the next Step().
  float next_lr() const;
  FloatArena& m() { return m_; }
  FloatArena& v() { return v_; }
  const FloatArena& m() const { return m_; }
  const FloatArena& v() const { return v_; }

 private:
  AdamWOptions options_;
  FloatArena m_;
  FloatArena v_;
  uint64_t step_ = 0;
  std::optional<uint64_t> schedule_step_;
  std::optional<double> schedule_progress_;
};

// Plain-loop reference of one AdamW update (per element, no clipping,
// no threads), for tests: `t` is the 1-based bias-correction count.
void AdamWReferenceUpdate(const AdamWOptions& options, float lr, uint64_t t,
                          float grad_scale, FloatArena* params,
                          const FloatArena& grads, FloatArena* m,
                          FloatArena* v);

}  // namespace gasloc

#endif  // GASLOC_WORKER_TRAIN_ADAMW_H_
