// gasloc-bench simulate: the convergence simulator (bench/convergence_sim.h)
// over algorithms x worker counts x seeds on one scenario file, as issue 38
// item 2 asks: the loss against virtual wall-clock, the consensus distance
// as the worker count grows, and GASLoC's peers per round.
//
//   gasloc-bench simulate [--scenario=bench/scenarios/one_slow_link.yaml]
//       [--workers=4,16,64,256] [--algorithms=gasloc,gasloc-2peer,diloco,dpsgd]
//       [--seeds=1,2,3] [--jsonl=FILE] [--plot=DIR] ...   (--help: all flags)
//
// The scenario's workers repeat to the worker count (sim_scenario.h); a
// worker's step rate is its `cpu` times --steps_per_core (an uncapped
// worker: one core), its link `rate_mbit` (unshaped: --unshaped_mbit) and
// `delay_ms`. Writes one JSON line per algorithm x workers x seed x
// evaluation point:
//   {"algorithm", "workers", "seed", "round", "seconds" (virtual), "steps",
//    "tokens", "average_loss", "mean_worker_loss", "consensus_distance"}
// then a table per worker count, means over seeds: the final losses and
// consensus distance, rounds, virtual seconds a round and to the end, mean
// H_i, the share of time not computing, and the virtual seconds until the
// loss at the average and the workers' mean loss (what a real job
// reports) reach the target loss (by default DiLoCo's worst final loss
// over the seeds at that worker count, the rule of the cluster
// comparisons in docs/benchmarks.md). --plot runs
// bench/simulate_plot.py (gnuplot) on the JSON lines.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "bench/bench_flags.h"
#include "bench/bench_registry.h"
#include "bench/convergence_sim.h"
#include "bench/sim_scenario.h"
#include "common/json_string.h"

namespace gasloc::bench {
namespace {

constexpr char kUsage[] =
    "Usage: gasloc-bench simulate [flags]\n"
    "  --scenario=FILE      harness scenario (default one_slow_link.yaml)\n"
    "  --workers=4,16,64,256  --algorithms=gasloc,gasloc-2peer,diloco,dpsgd\n"
    "  --seeds=1,2,3        --seconds=S (virtual; default the scenario's\n"
    "                       stop.max_wall_seconds, else 240)\n"
    "  --eval_seconds=5     --model_bytes=550000 (one copy on the wire)\n"
    "  --steps_per_core=210 --unshaped_mbit=1000 --local_steps=H\n"
    "  --rounds=R (stop.max_rounds; 0 = none; D-PSGD R x H) (default the\n"
    "                       scenario's, as --local_steps)\n"
    "  --dimension=256 --heterogeneity=0.1 --noise=0.5 --curvature_min=0.1\n"
    "  --inner=sgd|adamw --inner_lr=0.05 --constant_lr (no cosine)\n"
    "  --outer_lr=ETA --outer_momentum=GAMMA (GASLoC eta/gamma, DiLoCo\n"
    "                       lr/mu; default the job spec's; not D-PSGD)\n"
    "  --uniform_budgets    every worker the nominal H (equal tokens)\n"
    "  --target_loss=L (0: DiLoCo's\n"
    "                       worst final loss at each worker count)\n"
    "  --jsonl=FILE (default stdout)  --plot=DIR (PNGs via gnuplot)\n";

int Fail(const std::string& what) {
  std::fprintf(stderr, "gasloc-bench simulate: %s\n", what.c_str());
  return 1;
}

absl::StatusOr<std::vector<int>> IntList(const std::string& text) {
  std::vector<int> out;
  for (absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int v = 0;
    if (!absl::SimpleAtoi(item, &v) || v < 1)
      return absl::InvalidArgumentError(absl::StrCat("not a count: ", item));
    out.push_back(v);
  }
  return out;
}

std::string JsonLine(const char* algorithm, int workers, int seed,
                     const SimPoint& p) {
  std::string out = "{\"algorithm\": ";
  AppendJsonString(algorithm, &out);
  absl::StrAppendFormat(
      &out,
      ", \"workers\": %d, \"seed\": %d, \"round\": %d, \"seconds\": %.3f, "
      "\"steps\": %d, \"tokens\": %d, \"average_loss\": %.6g, "
      "\"mean_worker_loss\": %.6g, \"consensus_distance\": %.6g}\n",
      workers, seed, p.round, p.seconds, p.steps, p.tokens, p.average_loss,
      p.mean_worker_loss, p.consensus_distance);
  return out;
}

// Means over the seeds of one (algorithm, workers).
struct Row {
  std::vector<SimResult> runs;
  double Mean(double (*field)(const SimResult&)) const {
    double sum = 0;
    for (const SimResult& r : runs) sum += field(r);
    return runs.empty() ? 0 : sum / runs.size();
  }
};

void PrintTable(int workers, const std::vector<std::string>& names,
                const std::map<std::string, Row>& rows, double target) {
  std::printf(
      "\n%d workers; target loss %.4g\n"
      "| algorithm | final loss at average | mean worker loss | consensus "
      "distance | rounds | s/round | end s | mean H_i | not computing | s to "
      "target: average (per seed) | s to target: worker mean |\n| --- | ---: | "
      "---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |\n",
      workers, target);
  for (const std::string& name : names) {
    const Row& row = rows.at(name);
    std::string reached[2];
    for (const SimResult& r : row.runs) {
      for (int k = 0; k < 2; ++k) {
        const double s = SecondsToLoss(
            r.points, target,
            k == 0 ? &SimPoint::average_loss : &SimPoint::mean_worker_loss);
        absl::StrAppend(&reached[k], reached[k].empty() ? "" : ", ",
                        s < 0 ? "never" : absl::StrFormat("%.0f", s));
      }
    }
    std::printf(
        "| %s | %.4g | %.4g | %.4g | %.0f | %.2f | %.0f | %.1f | %.0f%% | %s | "
        "%s |\n",
        name.c_str(), row.Mean([](const SimResult& r) {
          return r.points.back().average_loss;
        }),
        row.Mean([](const SimResult& r) {
          return r.points.back().mean_worker_loss;
        }),
        row.Mean([](const SimResult& r) {
          return r.points.back().consensus_distance;
        }),
        row.Mean(
            [](const SimResult& r) { return static_cast<double>(r.rounds); }),
        row.Mean([](const SimResult& r) { return r.mean_round_seconds; }),
        row.Mean([](const SimResult& r) { return r.points.back().seconds; }),
        row.Mean([](const SimResult& r) { return r.mean_local_steps; }),
        100 * row.Mean([](const SimResult& r) { return r.idle_fraction; }),
        reached[0].c_str(), reached[1].c_str());
  }
}

int RunSimulateBench(int argc, char** argv) {
  std::string scenario_path =
      GASLOC_SOURCE_DIR "/bench/scenarios/one_slow_link.yaml";
  std::string workers_list = "4,16,64,256", seeds_list = "1,2,3";
  std::string algorithms = "gasloc,gasloc-2peer,diloco,dpsgd";
  std::string inner = "sgd", jsonl, plot;
  SimOptions base;
  int local_steps = 0, rounds = -1,
      dimension = static_cast<int>(base.dimension);
  double steps_per_core = 210, unshaped_mbit = 1000, seconds = 0, target = 0;
  BenchFlags flags;
  flags.strings = {{"scenario", &scenario_path},
                   {"workers", &workers_list},
                   {"seeds", &seeds_list},
                   {"algorithms", &algorithms},
                   {"inner", &inner},
                   {"jsonl", &jsonl},
                   {"plot", &plot}};
  flags.ints = {{"local-steps", &local_steps},
                {"rounds", &rounds},
                {"dimension", &dimension}};
  flags.doubles = {{"seconds", &seconds},
                   {"eval-seconds", &base.eval_seconds},
                   {"model-bytes", &base.model_bytes},
                   {"steps-per-core", &steps_per_core},
                   {"unshaped-mbit", &unshaped_mbit},
                   {"heterogeneity", &base.heterogeneity},
                   {"noise", &base.noise},
                   {"curvature-min", &base.curvature_min},
                   {"inner-lr", &base.inner_lr},
                   {"outer-lr", &base.outer_lr},
                   {"outer-momentum", &base.outer_momentum},
                   {"target-loss", &target}};
  bool no_anneal = false;
  flags.bools = {{"constant-lr", &no_anneal},
                 {"uniform-budgets", &base.uniform_budgets}};
  if (!ParseBenchFlags(argc, argv, "gasloc-bench simulate", kUsage, flags))
    return 2;
  auto scenario = LoadSimScenario(scenario_path);
  if (!scenario.ok()) return Fail(scenario.status().ToString());
  auto counts = IntList(workers_list);
  auto seeds = IntList(seeds_list);
  if (!counts.ok() || !seeds.ok() || dimension < 1 ||
      (inner != "sgd" && inner != "adamw"))
    return Fail("bad --workers, --seeds, --dimension or --inner");
  std::vector<std::string> names =
      absl::StrSplit(algorithms, ',', absl::SkipEmpty());
  std::vector<SimAlgorithm> algos;
  for (const std::string& name : names) {
    auto a = ParseSimAlgorithm(name);
    if (!a.ok()) return Fail(a.status().ToString());
    algos.push_back(*a);
  }
  base.dimension = static_cast<uint32_t>(dimension);
  base.adamw = inner == "adamw";
  base.anneal = !no_anneal;
  base.local_steps = local_steps > 0 ? local_steps : scenario->local_steps;
  base.min_local_steps = scenario->min_local_steps;
  base.seconds = seconds > 0                      ? seconds
                 : scenario->max_wall_seconds > 0 ? scenario->max_wall_seconds
                                                  : 240;
  // D-PSGD (one step a round) gets max_rounds x H rounds, as the
  // harness's sweeps gave it (--rounds 2400 for 30 rounds of H = 80).
  const uint64_t max_rounds =
      rounds >= 0 ? static_cast<uint64_t>(rounds) : scenario->max_rounds;
  if (scenario->tokens_per_step > 0)
    base.tokens_per_step = scenario->tokens_per_step;

  std::FILE* out = stdout;
  if (!jsonl.empty() && (out = std::fopen(jsonl.c_str(), "w")) == nullptr)
    return Fail(absl::StrCat("cannot write ", jsonl));
  std::fprintf(stderr, "gasloc-bench simulate: scenario %s, %.0f virtual s\n",
               scenario->name.c_str(), base.seconds);
  std::map<int, std::map<std::string, Row>> table;
  for (int n : *counts) {
    SimOptions o = base;
    o.workers.clear();
    for (const ScenarioWorker& w : ExpandWorkers(scenario->workers, n))
      o.workers.push_back(
          {.steps_per_second = (w.cpu > 0 ? w.cpu : 1.0) * steps_per_core,
           .bytes_per_second =
               (w.rate_mbit > 0 ? w.rate_mbit : unshaped_mbit) * 1e6 / 8,
           .latency_seconds = w.delay_ms / 1000});
    for (size_t a = 0; a < algos.size(); ++a) {
      for (int seed : *seeds) {
        o.algorithm = algos[a];
        o.max_rounds =
            algos[a] == SimAlgorithm::kDpsgd ||
                    algos[a] == SimAlgorithm::kDpsgdTwoPeer
                ? max_rounds * (base.local_steps > 0 ? base.local_steps : 100)
                : max_rounds;
        o.seed = static_cast<uint64_t>(seed);
        auto result = RunConvergenceSim(o);
        if (!result.ok()) return Fail(result.status().ToString());
        for (const SimPoint& p : result->points) {
          const std::string line = JsonLine(names[a].c_str(), n, seed, p);
          std::fputs(line.c_str(), out);
        }
        table[n][names[a]].runs.push_back(*std::move(result));
      }
    }
  }
  if (out != stdout) std::fclose(out);
  for (auto& [n, rows] : table) {
    double t = target;
    for (const auto& [name, row] : rows)
      if (t <= 0 && name == "diloco")
        for (const SimResult& r : row.runs)
          t = std::max(t, r.points.back().average_loss);
    PrintTable(n, names, rows, t > 0 ? t : 1e-3);
  }
  if (plot.empty()) return 0;
  if (jsonl.empty()) return Fail("--plot needs --jsonl");
  const std::string command =
      absl::StrCat("python3 " GASLOC_SOURCE_DIR "/bench/simulate_plot.py '",
                   jsonl, "' '", plot, "'");
  return std::system(command.c_str()) == 0 ? 0 : Fail("plotting failed");
}

}  // namespace

GASLOC_BENCH_COMMAND(simulate, "convergence simulator on a virtual clock",
                     RunSimulateBench);

}  // namespace gasloc::bench
