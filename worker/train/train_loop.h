// The single-process training loop (gasloc-train): steps a Trainer up to a
// step count and, after every step, decides whether to report a log line,
// evaluate and checkpoint (StepDutiesAfter, a pure function of the options
// and the step). It prints nothing: what happened reaches the caller as a
// TrainProgress through a callback, and gasloc-train prints it.
//
//   TrainLoopOptions options;
//   options.steps = 1000;
//   options.eval_every = 100;
//   RETURN_IF_ERROR(RunTrainLoop(options, *trainer, print_progress));
//
// The worker daemon does not run this loop: its rounds run in worker/round
// (RoundRunner), which decides evaluation and checkpoints per round
// (RoundDutiesAfter).
//
// Thread safety: RunTrainLoop runs on the caller's thread and uses the
// trainer alone until it returns; StepDutiesAfter is pure.
#ifndef GASLOC_WORKER_TRAIN_TRAIN_LOOP_H_
#define GASLOC_WORKER_TRAIN_TRAIN_LOOP_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "worker/train/checkpoint.h"
#include "worker/train/trainer.h"

namespace gasloc {

struct TrainLoopOptions {
  // Train until trainer.step() reaches this many optimizer steps.
  uint64_t steps = 0;
  // A log report every N steps and after the last step (0 = none).
  int64_t log_every = 10;
  // Evaluate every N steps (0 = never in between); always at the end.
  int64_t eval_every = 0;
  // Checkpoint every N steps (0 = never in between); always at the end.
  // Only when checkpoint_path names a file.
  int64_t checkpoint_every = 0;
  std::string checkpoint_path;  // empty = no checkpoints
  CheckpointExtras checkpoint_extras;  // written with every checkpoint
};

// What is due after optimizer step `step` (steps taken so far), and why.
struct StepDuties {
  bool log = false;
  bool evaluate = false;
  bool checkpoint = false;
  std::string reason;  // e.g. "log every 10; eval every 100", "end of run"
};

// The one decision of gasloc-train's cadence. At step >= options.steps
// (the end of the run, also a resumed run already past it): evaluate,
// checkpoint when a path is named, log when log_every > 0. Before that:
// log every log_every, evaluate every eval_every and checkpoint every
// checkpoint_every steps (each only when > 0; checkpoints only with a path).
StepDuties StepDutiesAfter(const TrainLoopOptions& options, uint64_t step);

// One thing the loop did, for the caller to show.
struct TrainProgress {
  enum class Kind { kLog, kEvaluated, kCheckpointed };
  Kind kind = Kind::kLog;
  uint64_t step = 0;   // trainer steps taken
  uint64_t steps = 0;  // TrainLoopOptions::steps
  // kLog: means over the steps since the previous log report, and the
  // last step's learning rate and gradient norm (before clipping).
  double mean_loss = 0;  // nats per byte
  float lr = 0;
  double grad_norm = 0;
  double ms_per_step = 0;
  double tokens_per_second = 0;
  // kEvaluated: validation bits per byte.
  double val_bpb = 0;
  // kCheckpointed: the file written.
  std::string path;
};

using TrainProgressCallback = std::function<void(const TrainProgress&)>;

// Steps `trainer` until trainer.step() == options.steps, doing after each
// step what StepDutiesAfter says (log, then evaluate, then checkpoint) and
// reporting each through `on_progress` (may be empty). A trainer already at
// or past options.steps takes no step and is evaluated (and checkpointed).
// The first error of a step, an evaluation or a checkpoint is returned.
absl::Status RunTrainLoop(const TrainLoopOptions& options, Trainer& trainer,
                          const TrainProgressCallback& on_progress);

}  // namespace gasloc

#endif  // GASLOC_WORKER_TRAIN_TRAIN_LOOP_H_
