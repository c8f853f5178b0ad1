// What the round state machine needs from a trainer: one model replica with
// its inner optimizer and data. The real implementation wraps the
// single-process Trainer (worker/train/); tests use small fakes.
//
// Thread safety: used by one thread (the worker's round loop).
#ifndef GASLOC_WORKER_ROUND_INNER_TRAINER_H_
#define GASLOC_WORKER_ROUND_INNER_TRAINER_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "common/arena.h"

namespace gasloc {

struct InnerStepResult {
  float loss = 0;        // training loss of the step, nats per byte
  uint64_t tokens = 0;   // bytes of training input consumed
};

// Extra state stored in a checkpoint next to the trainer's own.
struct CheckpointExtras {
  std::map<std::string, const FloatArena*> buffers;   // when saving
  std::map<std::string, std::string> values;
};

class InnerTrainer {
 public:
  virtual ~InnerTrainer() = default;
  // The live parameters (theta); the round machine reads and overwrites
  // them between inner phases.
  virtual FloatArena& params() = 0;
  // One full inner step: gradients, clipping, AdamW.
  virtual absl::StatusOr<InnerStepResult> Step() = 0;
  // Data-parallel split of Step(): gradients only (left in grads()), then
  // the optimizer update with whatever grads() holds.
  virtual absl::StatusOr<InnerStepResult> ComputeGradients() = 0;
  virtual FloatArena& grads() = 0;
  virtual absl::Status ApplyGradients() = 0;
  // Validation bits per byte of params().
  virtual absl::StatusOr<float> EvaluateBpb() = 0;
  // Checkpoint of the trainer state plus `extras`; Load returns the extras
  // (buffers are copied into the arenas named in `restore_into`).
  virtual absl::Status SaveCheckpoint(const std::string& path,
                                      const CheckpointExtras& extras) = 0;
  virtual absl::StatusOr<std::map<std::string, std::string>> LoadCheckpoint(
      const std::string& path,
      const std::map<std::string, FloatArena*>& restore_into) = 0;
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_ROUND_INNER_TRAINER_H_
