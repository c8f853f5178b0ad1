// How local training (algorithms.md section 6) splits the L blocks into K
// contiguous stages: L / K blocks each when K divides L; otherwise the
// contiguous split that minimises the largest stage's parameter count,
// counting the embeddings in stage 1 (which owns them). The shared decoder
// belongs to no stage.
//
// Thread safety: pure functions.
#ifndef GASLOC_WORKER_TRAIN_STAGE_PARTITION_H_
#define GASLOC_WORKER_TRAIN_STAGE_PARTITION_H_

#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/model.h"

namespace gasloc {

struct StageRange {
  int first_block = 0;
  int num_blocks = 0;
  int end_block() const { return first_block + num_blocks; }
};

// INVALID_ARGUMENT naming `stages` unless 1 <= stages <= config.layers.
absl::StatusOr<std::vector<StageRange>> PartitionStages(
    const ModelConfig& config, int stages);

}  // namespace gasloc

#endif  // GASLOC_WORKER_TRAIN_STAGE_PARTITION_H_
