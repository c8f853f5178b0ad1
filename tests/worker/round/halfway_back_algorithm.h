// A toy outer algorithm, the worked example of adding one: after the
// round's H_i steps the model goes halfway back to the round's start,
// theta' = (theta_start + theta) / 2, with no exchange. Everything it
// needs is in this file; a registry line makes a job run it
// (OuterAlgorithmRegistryTest.AToyAlgorithmIsItsFileAndARegistryLine).
#ifndef GASLOC_TESTS_WORKER_ROUND_HALFWAY_BACK_ALGORITHM_H_
#define GASLOC_TESTS_WORKER_ROUND_HALFWAY_BACK_ALGORITHM_H_

#include <memory>

#include "worker/round/outer_algorithm.h"

namespace gasloc::testing {

class HalfwayBack : public OuterAlgorithm {
 public:
  explicit HalfwayBack(const OuterContext& context) : context_(context) {}

  absl::StatusOr<ExchangeResult> Exchange(OuterRound& round,
                                          FloatArena& model) override {
    const float* start = context_.buffers->theta_start.data();
    float* theta = model.data();
    for (size_t i = 0; i < model.size(); ++i)
      theta[i] = 0.5f * (start[i] + theta[i]);
    round.report->set_exchange_seconds(0);
    return ExchangeResult{};
  }

 private:
  OuterContext context_;
};

inline std::unique_ptr<OuterAlgorithm> MakeHalfwayBack(
    const OuterContext& context) {
  return std::make_unique<HalfwayBack>(context);
}

}  // namespace gasloc::testing

#endif  // GASLOC_TESTS_WORKER_ROUND_HALFWAY_BACK_ALGORITHM_H_
