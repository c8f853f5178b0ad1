// DiLoCo (Douillard et al. 2023): H inner steps, the pseudo-gradients
// averaged by a ring all-reduce, and the Nesterov outer step
// v = mu v + gbar; theta' = theta + lr (gbar + mu v): PseudoGradientRing.
// With outer.overlap_update EAGER (only under outer.overlap_exchange,
// ValidateJobSpec) the outer step is taken before the all-reduce ends:
// EagerPseudoGradientRing.
#include <memory>

#include "worker/round/eager_ring_algorithm.h"
#include "worker/round/ring_algorithm.h"

namespace gasloc {

std::unique_ptr<OuterAlgorithm> MakeDiloco(const OuterContext& context) {
  if (context.spec->outer().overlap_update() == v1::OVERLAP_UPDATE_EAGER)
    return std::make_unique<EagerPseudoGradientRing>(context);
  return std::make_unique<PseudoGradientRing>(context);
}

}  // namespace gasloc
