// DiLoCo (Douillard et al. 2023): H inner steps, the pseudo-gradients
// averaged by a ring all-reduce, and the Nesterov outer step
// v = mu v + gbar; theta' = theta + lr (gbar + mu v): PseudoGradientRing.
#include <memory>

#include "worker/round/ring_algorithm.h"

namespace gasloc {

std::unique_ptr<OuterAlgorithm> MakeDiloco(const OuterContext& context) {
  return std::make_unique<PseudoGradientRing>(context);
}

}  // namespace gasloc
