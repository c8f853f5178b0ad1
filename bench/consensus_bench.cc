// gasloc-bench consensus: the exact consensus distance of a job's workers
// and the validation bpb of their average model, from the checkpoints the
// workers wrote (issue 15 item 3; bench/measure_outer.sh calls it after
// each run). The checkpoints are grouped by the round they hold
// (outer.next_round); for each round with at least two of them it prints
// one JSON line:
//   {"round": R, "models": n, "parameters": P,
//    "consensus_distance": (1/n) sum_i ||theta_i - theta_bar||^2 (the mean
//    square), "consensus_rms": its square root (the spec's definition),
//    "max_squared_distance": ..., "avg_val_bpb": bpb of theta_bar}
// The average model is evaluated exactly as the workers evaluate theirs
// (the job spec's corpus, train fraction and validation windows).
//
//   gasloc-bench consensus --spec=JOB.json [--threads=N] CKPT...
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/bench_flags.h"
#include "bench/bench_registry.h"
#include "bench/consensus_stats.h"
#include "common/job_spec.h"
#include "worker/train/checkpoint.h"
#include "worker/train/trainer.h"

namespace gasloc::bench {
namespace {

constexpr char kUsage[] =
    "Usage: gasloc-bench consensus --spec=JOB.json [--threads=N] "
    "--checkpoints=A.ckpt,B.ckpt,...\n"
    "  Checkpoints of one job's workers; one JSON line per round held by at\n"
    "  least two of them.\n";

int Fail(const std::string& what) {
  std::fprintf(stderr, "gasloc-bench consensus: %s\n", what.c_str());
  return 1;
}

int RunConsensusBench(int argc, char** argv) {
  std::string spec_path, checkpoints;
  int threads = 0;
  BenchFlags flags;
  flags.strings = {{"spec", &spec_path}, {"checkpoints", &checkpoints}};
  flags.ints = {{"threads", &threads}};
  if (!ParseBenchFlags(argc, argv, "gasloc-bench consensus", kUsage, flags))
    return 2;
  if (spec_path.empty() || checkpoints.empty()) {
    std::fprintf(stderr,
                 "gasloc-bench consensus: --spec and --checkpoints are "
                 "required\n%s",
                 kUsage);
    return 2;
  }
  std::ifstream in(spec_path);
  if (!in) return Fail("cannot read the job spec " + spec_path);
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpec(text.str());
  if (!spec.ok())
    return Fail(spec_path + ": " + std::string(spec.status().message()));
  TrainerOptions options;
  options.spec = ApplyJobSpecDefaults(*spec);
  options.threads = threads;
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::Create(options);
  if (!trainer.ok())
    return Fail("cannot build the job's trainer: " +
                trainer.status().ToString());

  // Round -> the parameters of each worker's checkpoint at that round. A
  // worker's files are <name>.ckpt and its kept predecessors
  // <name>.ckpt.1, .2, ...; one per worker and round counts (a worker
  // also checkpoints when it drops the job, after its last round).
  std::map<uint64_t, std::vector<std::vector<float>>> rounds;
  std::set<std::pair<std::string, uint64_t>> seen;
  for (absl::string_view path :
       absl::StrSplit(checkpoints, ',', absl::SkipEmpty())) {
    absl::StatusOr<CheckpointExtras> loaded =
        (*trainer)->LoadCheckpoint(std::string(path));
    if (!loaded.ok())
      return Fail(std::string(path) + ": " + loaded.status().ToString());
    uint64_t round = 0;
    auto it = loaded->values.find("outer.next_round");
    if (it == loaded->values.end() || !absl::SimpleAtoi(it->second, &round))
      return Fail(std::string(path) +
                  " holds no outer.next_round (not a worker's checkpoint)");
    std::string worker(path);
    if (const size_t dot = worker.rfind('.');
        dot != std::string::npos && dot + 1 < worker.size() &&
        worker.find_first_not_of("0123456789", dot + 1) == std::string::npos)
      worker.resize(dot);
    if (!seen.insert({worker, round}).second) continue;
    const auto params = (*trainer)->params().flat();
    rounds[round].emplace_back(params.begin(), params.end());
  }
  for (const auto& [round, models] : rounds) {
    if (models.size() < 2) continue;
    std::vector<std::span<const float>> views(models.begin(), models.end());
    std::vector<float> average;
    const ConsensusStats stats = ComputeConsensus(views, &average);
    std::copy(average.begin(), average.end(), (*trainer)->params().data());
    absl::StatusOr<double> bpb = (*trainer)->EvaluateBpb();
    if (!bpb.ok())
      return Fail("evaluating the average model of round " +
                  std::to_string(round) + ": " + bpb.status().ToString());
    // next_round R = the model after round R - 1.
    std::printf(
        "{\"round\": %llu, \"models\": %zu, \"parameters\": %zu, "
        "\"consensus_distance\": %.9g, \"consensus_rms\": %.9g, "
        "\"max_squared_distance\": %.9g, \"avg_val_bpb\": %.6f}\n",
        static_cast<unsigned long long>(round == 0 ? 0 : round - 1),
        stats.models, stats.parameters, stats.consensus_distance,
        stats.consensus_rms, stats.max_squared_distance, *bpb);
  }
  return 0;
}

}  // namespace

GASLOC_BENCH_COMMAND(consensus,
                     "exact consensus distance and the average model's bpb "
                     "from a job's worker checkpoints",
                     RunConsensusBench);

}  // namespace gasloc::bench
