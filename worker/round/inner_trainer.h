// What the round state machine needs from a trainer: one model replica with
// its inner optimizer and data. The real implementation wraps the
// single-process Trainer (worker/train/); tests use small fakes.
//
// Thread safety: used by one thread (the worker's round loop).
#ifndef GASLOC_WORKER_ROUND_INNER_TRAINER_H_
#define GASLOC_WORKER_ROUND_INNER_TRAINER_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/arena.h"
#include "gasloc/v1/coordinator.pb.h"
#include "worker/train/checkpoint.h"  // CheckpointExtras (plain data)

namespace gasloc {

// The learning-rate schedule position of inner step `inner_step` (0-based)
// of round `round` when the job's round is `nominal_steps` steps (outer
// local_steps H) and this worker's budget is `budget_steps` (H_i):
// round * H + inner_step * H / H_i. Every worker is at the same point of
// the schedule at a round's start whatever its budget, and the cosine ends
// at the job's last round (decay horizon max_rounds * H) for a worker that
// runs 4H steps a round as for one that runs H_min. With H_i = H it is the
// step count of a worker that ran every round from round 0.
inline uint64_t ScheduleStep(uint64_t round, uint32_t nominal_steps,
                             uint32_t budget_steps, uint32_t inner_step) {
  if (budget_steps == 0) return round * nominal_steps;
  return round * nominal_steps +
         static_cast<uint64_t>(inner_step) * nominal_steps / budget_steps;
}

// Where an inner step sits on the learning-rate schedule: its position
// (ScheduleStep: the warmup, and the cosine when progress is unset) and,
// when the coordinator places the round on the job's horizon
// (Assignment.has_schedule), the fraction of that horizon the cosine
// follows instead (algorithms.md section 1, "The schedule's horizon").
struct SchedulePoint {
  uint64_t step = 0;
  std::optional<double> progress;
};

// Planned inner step `inner_step` of `assignment`'s round (H_i =
// local_steps) when the job's H is `nominal_steps`: position ScheduleStep,
// progress begin + (end - begin) * inner_step / H_i.
inline SchedulePoint PlannedSchedulePoint(const v1::Assignment& assignment,
                                          uint32_t nominal_steps,
                                          uint32_t inner_step) {
  const uint32_t budget = assignment.local_steps();
  SchedulePoint point{ScheduleStep(assignment.round(), nominal_steps, budget,
                                   inner_step),
                      std::nullopt};
  if (assignment.has_schedule()) {
    const double begin = assignment.schedule_progress_begin();
    const double end = assignment.schedule_progress_end();
    point.progress =
        budget == 0 ? begin : begin + (end - begin) * inner_step / budget;
  }
  return point;
}

// The horizon fraction at `assignment`'s planned end (steps taken beside
// the exchange, which belong to the next round's start); unset without a
// schedule.
inline std::optional<double> ScheduleProgressAtEnd(
    const v1::Assignment& assignment) {
  if (!assignment.has_schedule()) return std::nullopt;
  return assignment.schedule_progress_end();
}

struct InnerStepResult {
  float loss = 0;        // training loss of the step, nats per byte
  uint64_t tokens = 0;   // bytes of training input consumed
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
  // Checkpoint of the trainer state plus the outer state (the outer
  // optimizer's buffers and the round, as CheckpointExtras: the one struct
  // for it, written as is); Load restores the trainer and returns the
  // outer state saved with it, all or nothing: `check` (may be null) sees
  // the outer state first, and nothing is loaded unless it returns OK.
  virtual absl::Status SaveCheckpoint(const std::string& path,
                                      const CheckpointExtras& outer) = 0;
  virtual absl::StatusOr<CheckpointExtras> LoadCheckpoint(
      const std::string& path, const CheckpointCheck& check) = 0;

  // The inner optimizer's state, shared with a worker that joins a running
  // job (FetchModel) so it does not restart AdamW cold: the two moment
  // arenas (params' layout) and the step count. A trainer with no such
  // state to share returns nullptr moments (the default).
  virtual FloatArena* optimizer_m() { return nullptr; }
  virtual FloatArena* optimizer_v() { return nullptr; }
  virtual uint64_t optimizer_step() const { return 0; }
  virtual void set_optimizer_step(uint64_t step) { (void)step; }
  // The schedule point of the next Step() only; a trainer without a
  // learning-rate schedule ignores it (the default).
  virtual void SetSchedulePoint(const SchedulePoint& point) { (void)point; }
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_ROUND_INNER_TRAINER_H_
