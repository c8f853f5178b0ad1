#include "worker/train/stage_partition.h"

#include <algorithm>
#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"

namespace gasloc {

absl::StatusOr<std::vector<StageRange>> PartitionStages(
    const ModelConfig& config, int stages) {
  const int L = config.layers;
  if (stages < 1 || stages > L) {
    return absl::InvalidArgumentError(absl::StrCat(
        "local_rgc.stages must be in [1, layers = ", L, "], got ", stages));
  }
  std::vector<StageRange> out(stages);
  if (L % stages == 0) {
    for (int k = 0; k < stages; ++k) {
      out[k] = {.first_block = k * (L / stages), .num_blocks = L / stages};
    }
    return out;
  }
  const int64_t d = config.d_model;
  const int64_t block = 12 * d * d + 13 * d;  // matrices, biases, LayerNorms
  const int64_t embed = (int64_t{kVocabSize} + config.context) * d;
  // best[k][l]: smallest achievable maximum over stages 0..k-1 covering
  // blocks [0, l); cut[k][l] the first block of stage k-1 in that split.
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
  std::vector<std::vector<int64_t>> best(
      stages + 1, std::vector<int64_t>(L + 1, kInf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(L + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k) {
    for (int l = k; l <= L; ++l) {
      for (int first = k - 1; first < l; ++first) {
        if (best[k - 1][first] == kInf) continue;
        const int64_t cost = (l - first) * block + (k == 1 ? embed : 0);
        const int64_t worst = std::max(best[k - 1][first], cost);
        if (worst < best[k][l]) {
          best[k][l] = worst;
          cut[k][l] = first;
        }
      }
    }
  }
  int end = L;
  for (int k = stages; k >= 1; --k) {
    const int first = cut[k][end];
    out[k - 1] = {.first_block = first, .num_blocks = end - first};
    end = first;
  }
  return out;
}

}  // namespace gasloc
