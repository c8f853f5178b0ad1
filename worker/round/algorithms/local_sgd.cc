// Local SGD (periodic model averaging): DiLoCo's round with lr = 1 and
// mu = 0, the JobSpec defaults for ALGORITHM_LOCAL_SGD, so the outer step
// is the plain average of the workers' models: PseudoGradientRing.
#include <memory>

#include "worker/round/ring_algorithm.h"

namespace gasloc {

std::unique_ptr<OuterAlgorithm> MakeLocalSgd(const OuterContext& context) {
  return std::make_unique<PseudoGradientRing>(context);
}

}  // namespace gasloc
