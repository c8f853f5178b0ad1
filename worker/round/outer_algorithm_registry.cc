#include "worker/round/outer_algorithm_registry.h"

#include "absl/strings/str_cat.h"
#include "worker/round/overlapped_exchange.h"

namespace gasloc {

// The factories, one per algorithm file.
std::unique_ptr<OuterAlgorithm> MakeGaslocGossip(const OuterContext& context);
std::unique_ptr<OuterAlgorithm> MakeDpsgd(const OuterContext& context);
std::unique_ptr<OuterAlgorithm> MakeDiloco(const OuterContext& context);
std::unique_ptr<OuterAlgorithm> MakeLocalSgd(const OuterContext& context);
std::unique_ptr<OuterAlgorithm> MakeDataParallel(const OuterContext& context);

const OuterAlgorithmRegistry& OuterAlgorithmRegistry::Default() {
  static const OuterAlgorithmRegistry* const registry = [] {
    auto* r = new OuterAlgorithmRegistry;
    r->Register(v1::ALGORITHM_GASLOC, &MakeGaslocGossip);
    r->Register(v1::ALGORITHM_DPSGD, &MakeDpsgd);
    r->Register(v1::ALGORITHM_DILOCO, &MakeDiloco);
    r->Register(v1::ALGORITHM_LOCAL_SGD, &MakeLocalSgd);
    r->Register(v1::ALGORITHM_DATA_PARALLEL, &MakeDataParallel);
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
