// D-PSGD (Lian et al. 2017): one inner step a round (H = 1), then gossip
// averaging with the round's peers: GASLoC's exchange and update with
// eta = 1, gamma = 0, alpha = 1/2, which are the JobSpec defaults for
// ALGORITHM_DPSGD (common/job_spec.cc), so the worker's code is
// GossipAlgorithm's.
#include <memory>

#include "worker/round/gossip_algorithm.h"

namespace gasloc {

std::unique_ptr<OuterAlgorithm> MakeDpsgd(const OuterContext& context) {
  return std::make_unique<GossipAlgorithm>(context);
}

}  // namespace gasloc
