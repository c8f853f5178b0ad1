#include "worker/round/outer_algorithm_registry.h"

#include "absl/strings/str_cat.h"
#include "worker/round/overlapped_exchange.h"

namespace gasloc {

// The factories, one per file of worker/round/algorithms/.
#define GASLOC_OUTER_ALGORITHM(value, factory) \
  std::unique_ptr<OuterAlgorithm> factory(const OuterContext& context);
#include "worker/round/algorithms/algorithms.def"
#undef GASLOC_OUTER_ALGORITHM

const OuterAlgorithmRegistry& OuterAlgorithmRegistry::Default() {
  static const OuterAlgorithmRegistry* const registry = [] {
    auto* r = new OuterAlgorithmRegistry;
#define GASLOC_OUTER_ALGORITHM(value, factory) r->Register(v1::value, &factory);
#include "worker/round/algorithms/algorithms.def"
#undef GASLOC_OUTER_ALGORITHM
    return r;
  }();
  return *registry;
}

absl::StatusOr<std::unique_ptr<OuterAlgorithm>> OuterAlgorithmRegistry::Create(
    const OuterContext& context) const {
  v1::Algorithm algorithm = context.spec->outer().algorithm();
  if (algorithm == v1::ALGORITHM_UNSPECIFIED) algorithm = v1::ALGORITHM_GASLOC;
  auto it = factories_.find(algorithm);
  if (it == factories_.end())
    return absl::InvalidArgumentError(absl::StrCat(
        "no outer algorithm is registered for ",
        v1::Algorithm_Name(algorithm).empty()
            ? absl::StrCat("algorithm ", static_cast<int>(algorithm))
            : v1::Algorithm_Name(algorithm)));
  std::unique_ptr<OuterAlgorithm> outer = it->second(context);
  if (!context.spec->outer().overlap_exchange()) return outer;
  if (!outer->RunsBesideInnerSteps())
    return absl::InvalidArgumentError(absl::StrCat(
        "outer.overlap_exchange: ", v1::Algorithm_Name(algorithm),
        "'s exchange cannot run beside inner steps"));
  return std::make_unique<OverlappedExchange>(context, std::move(outer));
}

}  // namespace gasloc
