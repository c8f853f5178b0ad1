// The consensus statistics of a set of worker models (issue 15 item 3):
// their average, and the consensus distance, the mean over workers of the
// squared L2 distance of each model to the average,
//   (1/n) sum_i ||theta_i - theta_bar||^2,
// exact (every model at hand), unlike the round reports' peer_distance, a
// neighbourhood estimate over one worker's gossip edges.
//
// Thread safety: pure functions; safe from any thread.
#ifndef GASLOC_BENCH_CONSENSUS_STATS_H_
#define GASLOC_BENCH_CONSENSUS_STATS_H_

#include <cstddef>
#include <span>
#include <vector>

namespace gasloc::bench {

struct ConsensusStats {
  size_t models = 0;
  size_t parameters = 0;
  // (1/n) sum_i ||theta_i - theta_bar||^2, in squared parameter units: the
  // mean square that the docs' tables report as "consensus distance".
  double consensus_distance = 0;
  // sqrt(consensus_distance): the spec's consensus distance, a root mean
  // square in parameter units (docs/algorithms.md section 7).
  double consensus_rms = 0;
  // The largest ||theta_i - theta_bar||^2 over the workers.
  double max_squared_distance = 0;
};

// Averages `models` (all of one size, at least one) into `average`
// (resized) in double precision, rounded once to float, and measures the
// distances to that float average.
ConsensusStats ComputeConsensus(const std::vector<std::span<const float>>& models,
                                std::vector<float>* average);

}  // namespace gasloc::bench

#endif  // GASLOC_BENCH_CONSENSUS_STATS_H_
