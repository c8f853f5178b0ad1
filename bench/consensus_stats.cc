#include "bench/consensus_stats.h"

#include <algorithm>
#include <cmath>

namespace gasloc::bench {

ConsensusStats ComputeConsensus(
    const std::vector<std::span<const float>>& models,
    std::vector<float>* average) {
  ConsensusStats stats;
  stats.models = models.size();
  if (models.empty()) return stats;
  const size_t n = models.front().size();
  stats.parameters = n;
  std::vector<double> sum(n, 0.0);
  for (const std::span<const float>& model : models)
    for (size_t k = 0; k < n; ++k) sum[k] += model[k];
  average->resize(n);
  const double inv = 1.0 / static_cast<double>(models.size());
  for (size_t k = 0; k < n; ++k)
    (*average)[k] = static_cast<float>(sum[k] * inv);
  double total = 0;
  for (const std::span<const float>& model : models) {
    double squared = 0;
    for (size_t k = 0; k < n; ++k) {
      const double d = static_cast<double>(model[k]) - (*average)[k];
      squared += d * d;
    }
    total += squared;
    stats.max_squared_distance = std::max(stats.max_squared_distance, squared);
  }
  stats.consensus_distance = total * inv;
  stats.consensus_rms = std::sqrt(stats.consensus_distance);
  return stats;
}

}  // namespace gasloc::bench
