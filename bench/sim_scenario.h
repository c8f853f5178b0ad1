// The scenario files of the namespace harness (bench/scenarios/*.yaml,
// format in docs/heterogeneity.md) as the convergence simulator reads them:
// each worker's CPU share and link, the nominal H and H_min, the tokens of
// a step and the wall-clock limit. The reader takes the subset of YAML
// those files use: `key: scalar`, `key: {k: v, ...}` on one line, and a
// `workers:` list of `- {k: v, ...}` entries, with `#` comments. Keys the
// simulator has no use for (churn times, loss, the corpus, ...) are read
// and ignored; the harness's own loader (scripts/netns_harness/scenario.py)
// stays the one that checks them.
//
// N workers from a scenario of fewer (ExpandWorkers): worker i takes the
// settings of the scenario's worker i mod k, so the scenario's pattern
// repeats, and with it its fraction of slow links or slow CPUs (one slow
// link in 4 becomes 64 in 256).
//
// Thread safety: pure functions; safe from any thread.
#ifndef GASLOC_BENCH_SIM_SCENARIO_H_
#define GASLOC_BENCH_SIM_SCENARIO_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gasloc::bench {

// One worker as the scenario sets it up (0 = the harness's "no cap").
struct ScenarioWorker {
  double rate_mbit = 0;  // link rate each direction; 0 = not shaped
  double delay_ms = 0;   // one-way delay of the link
  double cpu = 0;        // cores; 0 = not capped
};

struct SimScenario {
  std::string name;
  uint32_t local_steps = 0;      // training.local_steps (0: unset)
  uint32_t min_local_steps = 0;  // training.min_local_steps (0: unset)
  uint32_t tokens_per_step = 0;  // model.batch x model.context (0: unset)
  double max_wall_seconds = 0;   // stop.max_wall_seconds (0: unset)
  uint32_t max_rounds = 0;       // stop.max_rounds (0: unset)
  std::vector<ScenarioWorker> workers;  // `count` expanded
};

// INVALID_ARGUMENT naming the line for what the subset cannot read.
absl::StatusOr<SimScenario> ParseSimScenario(absl::string_view text);
absl::StatusOr<SimScenario> LoadSimScenario(const std::string& path);

// `n` workers repeating the scenario's list (header comment).
std::vector<ScenarioWorker> ExpandWorkers(
    const std::vector<ScenarioWorker>& pattern, uint32_t n);

}  // namespace gasloc::bench

#endif  // GASLOC_BENCH_SIM_SCENARIO_H_
