// Which OuterAlgorithm runs a job: one line per algorithm in
// worker/round/algorithms/algorithms.def (its proto enum value and the
// factory its file in that folder defines), and the overlap of
// outer.overlap_exchange composed onto it. Adding a baseline is a new file
// in worker/round/algorithms/ plus its line in algorithms.def
// (docs/architecture.md, "Adding an outer algorithm").
//
// Thread safety: Default() is immutable and safe to share; a registry a
// test builds is not to be changed while Create runs.
#ifndef GASLOC_WORKER_ROUND_OUTER_ALGORITHM_REGISTRY_H_
#define GASLOC_WORKER_ROUND_OUTER_ALGORITHM_REGISTRY_H_

#include <map>
#include <memory>

#include "absl/status/statusor.h"
#include "gasloc/v1/job.pb.h"
#include "worker/round/outer_algorithm.h"

namespace gasloc {

using OuterAlgorithmFactory =
    std::unique_ptr<OuterAlgorithm> (*)(const OuterContext& context);

class OuterAlgorithmRegistry {
 public:
  // Every algorithm of this tree.
  static const OuterAlgorithmRegistry& Default();

  // Registers (or replaces) the factory of `algorithm`.
  void Register(v1::Algorithm algorithm, OuterAlgorithmFactory factory) {
    factories_[algorithm] = factory;
  }

  // The job's algorithm (context.spec's; UNSPECIFIED means GASLoC), inside
  // an OverlappedExchange when outer.overlap_exchange is set.
  // INVALID_ARGUMENT when no factory is registered for it, or when it
  // cannot run beside inner steps and the overlap is asked for.
  absl::StatusOr<std::unique_ptr<OuterAlgorithm>> Create(
      const OuterContext& context) const;

 private:
  std::map<v1::Algorithm, OuterAlgorithmFactory> factories_;
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_ROUND_OUTER_ALGORITHM_REGISTRY_H_
