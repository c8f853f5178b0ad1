// GASLoC (algorithms.md sections 2-3): H_i inner steps on a budget the
// coordinator plans per worker, then gossip with the round's peers and
// theta' = y - alpha sum_j lambda_ij (y - y_j) + gamma (y - y_prev) (or the
// MIXED / PSEUDO_GRADIENT placements). The exchange is GossipAlgorithm's;
// outer.overlap_exchange composes OverlappedExchange onto it in the
// registry.
#include <memory>

#include "worker/round/gossip_algorithm.h"

namespace gasloc {

std::unique_ptr<OuterAlgorithm> MakeGaslocGossip(const OuterContext& context) {
  return std::make_unique<GossipAlgorithm>(context);
}

}  // namespace gasloc
