#include "worker/train/train_loop.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gasloc {
namespace {

// True when `every` > 0 and `step` is one of its multiples.
bool Every(int64_t every, uint64_t step) {
  return every > 0 && step % static_cast<uint64_t>(every) == 0;
}

void AddReason(std::string* reason, absl::string_view what, int64_t every) {
  absl::StrAppend(reason, reason->empty() ? "" : "; ", what, " every ", every);
}

// Sums of the steps since the last log report.
struct LogWindow {
  double loss = 0, seconds = 0;
  int64_t tokens = 0, steps = 0;

  void Add(const StepStats& s) {
    loss += s.loss;
    seconds += s.seconds;
    tokens += s.tokens;
    ++steps;
  }
};

}  // namespace

StepDuties StepDutiesAfter(const TrainLoopOptions& options, uint64_t step) {
  StepDuties duties;
  const bool named = !options.checkpoint_path.empty();
  if (step >= options.steps) {
    duties.log = options.log_every > 0;
    duties.evaluate = true;
    duties.checkpoint = named;
    duties.reason = "end of run";
    return duties;
  }
  if (Every(options.log_every, step)) {
    duties.log = true;
    AddReason(&duties.reason, "log", options.log_every);
  }
  if (Every(options.eval_every, step)) {
    duties.evaluate = true;
    AddReason(&duties.reason, "eval", options.eval_every);
  }
  if (named && Every(options.checkpoint_every, step)) {
    duties.checkpoint = true;
    AddReason(&duties.reason, "checkpoint", options.checkpoint_every);
  }
  return duties;
}

absl::Status RunTrainLoop(const TrainLoopOptions& options, Trainer& trainer,
                          const TrainProgressCallback& on_progress) {
  auto progress = [&](TrainProgress::Kind kind) {
    TrainProgress p;
    p.kind = kind;
    p.step = trainer.step();
    p.steps = options.steps;
    return p;
  };
  auto report = [&](const TrainProgress& p) {
    if (on_progress) on_progress(p);
  };
  // What StepDutiesAfter asked for, in order: log, evaluate, checkpoint.
  auto perform = [&](const StepDuties& duties, LogWindow& window,
                     const StepStats& last) -> absl::Status {
    if (duties.log && window.steps > 0) {
      TrainProgress p = progress(TrainProgress::Kind::kLog);
      p.mean_loss = window.loss / window.steps;
      p.lr = last.lr;
      p.grad_norm = last.grad_norm;
      p.ms_per_step = 1e3 * window.seconds / window.steps;
      p.tokens_per_second = window.tokens / window.seconds;
      report(p);
      window = LogWindow();
    }
    if (duties.evaluate) {
      TrainProgress p = progress(TrainProgress::Kind::kEvaluated);
      ASSIGN_OR_RETURN(p.val_bpb, trainer.EvaluateBpb());
      report(p);
    }
    if (duties.checkpoint) {
      RETURN_IF_ERROR(trainer.SaveCheckpoint(options.checkpoint_path,
                                             options.checkpoint_extras));
      TrainProgress p = progress(TrainProgress::Kind::kCheckpointed);
      p.path = options.checkpoint_path;
      report(p);
    }
    return absl::OkStatus();
  };

  LogWindow window;
  StepStats last;
  if (trainer.step() >= options.steps) {
    // Nothing to train (a resumed run already there): the end's duties.
    return perform(StepDutiesAfter(options, trainer.step()), window, last);
  }
  while (trainer.step() < options.steps) {
    ASSIGN_OR_RETURN(last, trainer.Step());
    window.Add(last);
    RETURN_IF_ERROR(
        perform(StepDutiesAfter(options, trainer.step()), window, last));
  }
  return absl::OkStatus();
}

}  // namespace gasloc
