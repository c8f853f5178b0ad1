// Checkpoints of one trainer: model config, parameter arena, AdamW state,
// data cursor, plus named float buffers and string key/values that the
// caller owns (the worker keeps its outer-optimizer state there, e.g.
// "outer.y_prev", the round number, the job id). Format in
// docs/training.md ("Checkpoint format"): little-endian, a versioned
// header that carries the file's total length, the layout fingerprint, then
// the sections, then a CRC-32C of every preceding byte.
//
// WriteCheckpoint writes `<path>.tmp.<16 random hex digits>` (created
// exclusively, never through a link), fsyncs it, renames it over `path`
// and fsyncs the directory, so a crash leaves the old file or the new one,
// never a mix; it first removes the temporaries of earlier writes of
// `path` that a crash left behind. ReadCheckpoint refuses (with a message naming the
// path and the problem) a file with a bad magic, another format version,
// a wrong length (truncated or extended), a checksum mismatch, a
// non-finite value (parameters, moments or buffers), or a layout other
// than the expected one. It reads into a new CheckpointState, so a caller
// that copies from it only after it returned OK never loads half a file.
//
// Pure functions over their arguments; thread-safe for distinct paths.
#ifndef GASLOC_WORKER_TRAIN_CHECKPOINT_H_
#define GASLOC_WORKER_TRAIN_CHECKPOINT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/arena.h"
#include "worker/model/model.h"

namespace gasloc {

inline constexpr uint32_t kCheckpointVersion = 1;
// The longest buffer name or value key a checkpoint may hold; a longer
// length field is a malformed file, refused before any allocation.
inline constexpr uint32_t kMaxCheckpointNameBytes = 4096;

// What the caller stores beside the trainer's own state.
struct CheckpointExtras {
  std::map<std::string, std::vector<float>> buffers;
  std::map<std::string, std::string> values;
};

// Views of the state to write (nothing is copied).
struct CheckpointView {
  ModelConfig config;
  const FloatArena* params = nullptr;
  const FloatArena* adam_m = nullptr;
  const FloatArena* adam_v = nullptr;
  uint64_t adam_step = 0;    // AdamW steps taken (bias-correction count)
  uint64_t step = 0;         // trainer steps taken
  uint64_t data_cursor = 0;  // the sampler's next draw
  const CheckpointExtras* extras = nullptr;  // may be null
};

absl::Status WriteCheckpoint(const std::string& path,
                             const CheckpointView& view);

// The state read back. The arenas use `layout` (the caller's model layout).
struct CheckpointState {
  explicit CheckpointState(std::shared_ptr<const ArenaLayout> layout)
      : params(layout), adam_m(layout), adam_v(layout) {}
  ModelConfig config;
  FloatArena params;
  FloatArena adam_m;
  FloatArena adam_v;
  uint64_t adam_step = 0;
  uint64_t step = 0;
  uint64_t data_cursor = 0;
  CheckpointExtras extras;
};

// DATA_LOSS for damaged files (bad magic, wrong length, checksum, a
// non-finite value),
// FAILED_PRECONDITION for another format version or a layout that differs
// from `layout`, NOT_FOUND for a missing file.
absl::StatusOr<std::unique_ptr<CheckpointState>> ReadCheckpoint(
    const std::string& path, std::shared_ptr<const ArenaLayout> layout);

// Accepts (OK) or refuses the caller's part of a checkpoint before
// anything is loaded: a trainer's LoadCheckpoint calls it on the state read
// into scratch and swaps that state in only if it says OK.
using CheckpointCheck = std::function<absl::Status(const CheckpointExtras&)>;

// Only the caller's buffers and values of a checkpoint (checked like
// ReadCheckpoint except the layout), to validate them before anything is
// loaded (RoundRunner::LoadCheckpoint).
absl::StatusOr<CheckpointExtras> ReadCheckpointExtras(const std::string& path);

// Only the model config stored in a checkpoint (checked like
// ReadCheckpoint except the layout), to build the model that reads it.
absl::StatusOr<ModelConfig> ReadCheckpointConfig(const std::string& path);

}  // namespace gasloc

#endif  // GASLOC_WORKER_TRAIN_CHECKPOINT_H_
