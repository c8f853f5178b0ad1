// gasloc-bench noninferiority: global backprop against local training with
// readout-gradient consensus (algorithms.md section 6), n seeds, the same
// seed, data order, token budget and cores for both; each run in its own
// child process so that its peak RSS is its own. Prints per-seed rows
// (tokens/s, peak memory, final validation bpb, d_s), then per stage count
// the mean gap, the one-sided 95% upper confidence bound and PASS / FAIL
// against --margin, and ends with ONE JSON line (docs/benchmarks.md).
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "bench/bench_flags.h"
#include "bench/bench_registry.h"
#include "bench/noninferiority_stats.h"
#include "common/omp_wait_policy.h"
#include "worker/train/local_rgc_model.h"
#include "worker/train/trainer.h"

namespace gasloc::bench {
namespace {

constexpr char kUsage[] =
    "gasloc-bench noninferiority [--corpus=FILE] [--preset=D24|S|TINY] "
    "[--stages=2[,4..]] [--async] [--seeds=5] [--first-seed=1] [--steps=N] "
    "[--batch=N] [--threads=2] [--eval-windows=64] [--lr=1e-3] "
    "[--warmup=N] [--margin=0.01] [--quick]\n"
    "  --quick: a 4-layer d 64 model, 5 seeds, 30 steps on tinyshakespeare "
    "(CI; seconds)\n";

struct Options {
  std::string corpus;
  std::string preset = "D24";
  std::vector<int> stages = {2};
  bool async = false;
  int seeds = 5, first_seed = 1, steps = 60, batch = 0, threads = 2;
  int eval_windows = 64, warmup = -1;
  double lr = 1e-3, margin = 0.01;
  bool quick = false;
  std::string child;  // internal: "global" or "rgc" = run one training
  int child_seed = 1, child_stages = 1;
};

struct Preset {
  const char* name;
  int layers, d_model, heads, ctx, batch;
};
constexpr Preset kPresets[] = {{"D24", 24, 256, 8, 256, 8},
                               {"S", 4, 256, 4, 256, 16},
                               {"TINY", 2, 64, 2, 64, 8},
                               {"QUICK", 4, 64, 2, 64, 4}};

bool Fail(const std::string& message) {
  std::fprintf(stderr, "gasloc-bench noninferiority: %s\n%s", message.c_str(),
               kUsage);
  return false;
}

bool ParseArgs(int argc, char** argv, Options* o) {
  BenchFlags flags;
  flags.ints = {{"seeds", &o->seeds},     {"first-seed", &o->first_seed},
                {"steps", &o->steps},     {"batch", &o->batch},
                {"threads", &o->threads}, {"eval-windows", &o->eval_windows},
                {"warmup", &o->warmup},   {"child-seed", &o->child_seed},
                {"child-stages", &o->child_stages}};
  flags.doubles = {{"lr", &o->lr}, {"margin", &o->margin}};
  std::string stages;
  flags.strings = {{"corpus", &o->corpus}, {"preset", &o->preset},
                   {"stages", &stages},    {"child", &o->child}};
  flags.bools = {{"async", &o->async}, {"quick", &o->quick}};
  if (!ParseBenchFlags(argc, argv, "gasloc-bench noninferiority", kUsage,
                       flags)) {
    return false;
  }
  if (!stages.empty()) {
    o->stages.clear();
    for (absl::string_view part : absl::StrSplit(stages, ',')) {
      int k = 0;
      if (!absl::SimpleAtoi(part, &k) || k < 1)
        return Fail("--stages needs integers >= 1, got '" + stages + "'");
      o->stages.push_back(k);
    }
  }
  if (o->quick) {
    o->preset = "QUICK";
    o->steps = 30;
    o->eval_windows = 16;
    o->seeds = 5;
  }
  if (o->seeds < 2) return Fail("--seeds must be >= 2");
  if (o->steps < 2) return Fail("--steps must be >= 2");
  if (o->threads < 1) return Fail("--threads must be >= 1");
  if (o->margin <= 0) return Fail("--margin must be > 0");
  if (o->corpus.empty())
    o->corpus = GASLOC_SOURCE_DIR "/tests/data/tinyshakespeare.txt";
  if (::access(o->corpus.c_str(), R_OK) != 0)
    return Fail("--corpus: cannot read '" + o->corpus + "'");
  return true;
}

const Preset* FindPreset(const std::string& name) {
  for (const Preset& p : kPresets)
    if (name == p.name) return &p;
  return nullptr;
}

// The number after "key": in a flat JSON line (NaN if absent).
double JsonNumber(const std::string& json, const std::string& key) {
  const std::string needle = "\"" + key + "\": ";
  const size_t at = json.find(needle);
  if (at == std::string::npos) return NAN;
  return std::strtod(json.c_str() + at + needle.size(), nullptr);
}

// ---------------------------------------------------------------- child

int RunChild(const Options& o, const Preset& p) {
  v1::JobSpec spec;
  spec.set_name("noninferiority");
  spec.mutable_model()->set_layers(p.layers);
  spec.mutable_model()->set_d_model(p.d_model);
  spec.mutable_model()->set_heads(p.heads);
  spec.mutable_model()->set_context(p.ctx);
  auto* t = spec.mutable_training();
  t->set_batch(o.batch > 0 ? o.batch : p.batch);
  t->set_threads(o.threads);
  t->set_seed(o.child_seed);
  t->mutable_adamw()->set_lr(static_cast<float>(o.lr));
  t->mutable_adamw()->set_warmup_steps(
      o.warmup >= 0 ? o.warmup : std::max(1, o.steps / 10));
  if (o.child == "rgc") {
    t->set_mode(v1::TRAIN_MODE_LOCAL_RGC);
    t->mutable_local_rgc()->set_stages(o.child_stages);
    t->mutable_local_rgc()->set_asynchronous(o.async);
  } else {
    t->set_mode(v1::TRAIN_MODE_GLOBAL);
  }
  spec.mutable_data()->set_corpus_path(o.corpus);
  spec.mutable_data()->set_eval_windows(o.eval_windows);
  spec.mutable_stop()->set_max_rounds(o.steps);
  spec.mutable_outer()->set_local_steps(1);
  TrainerOptions options;
  options.spec = spec;
  options.total_steps = static_cast<uint64_t>(o.steps);
  auto trainer = Trainer::Create(options);
  if (!trainer.ok()) {
    std::fprintf(stderr, "gasloc-bench noninferiority: %s\n",
                 trainer.status().ToString().c_str());
    return 1;
  }
  Trainer& tr = **trainer;
  // Tokens/s over steps 2..N (the first builds the oneDNN primitives).
  double seconds = 0, last_loss = 0;
  for (int i = 0; i < o.steps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    auto s = tr.Step();
    if (!s.ok()) {
      std::fprintf(stderr, "gasloc-bench noninferiority: step %d: %s\n", i,
                   s.status().ToString().c_str());
      return 1;
    }
    if (i > 0) {
      seconds += std::chrono::duration<double>(
                     std::chrono::steady_clock::now() - t0)
                     .count();
    }
    last_loss = s->loss;
  }
  auto bpb = tr.EvaluateBpb();
  if (!bpb.ok()) {
    std::fprintf(stderr, "gasloc-bench noninferiority: %s\n",
                 bpb.status().ToString().c_str());
    return 1;
  }
  struct rusage usage;
  ::getrusage(RUSAGE_SELF, &usage);
  std::string json = absl::StrFormat(
      "{\"tokens_per_s\": %.2f, \"peak_rss_bytes\": %.0f, \"val_bpb\": %.6f, "
      "\"last_loss\": %.6f, \"arenas_bytes\": %zu",
      tr.tokens_per_step() * (o.steps - 1) / seconds,
      static_cast<double>(usage.ru_maxrss) * 1024.0, *bpb, last_loss,
      4 * sizeof(float) * tr.params().size());
  if (auto* rgc = dynamic_cast<LocalRgcModel*>(&tr.model())) {
    const LocalRgcMemory m = rgc->Memory();
    absl::StrAppendFormat(
        &json,
        ", \"stage_workspaces_bytes\": %zu, \"stage_weights_bytes\": %zu, "
        "\"handoff_bytes\": %zu, \"readout_bytes\": %zu, \"threads_per_stage\": %d",
        m.stage_workspaces, m.stage_weights, m.handoff, m.readout,
        rgc->threads_per_stage());
  } else if (auto* global = dynamic_cast<TransformerModel*>(&tr.model())) {
    absl::StrAppendFormat(&json,
                          ", \"workspace_bytes\": %zu, \"weights_bytes\": %zu",
                          global->workspace_bytes(),
                          global->plan_weight_bytes());
  }
  std::printf("%s}\n", json.c_str());
  return 0;
}

// ---------------------------------------------------------------- parent

// Runs this binary as a child for one training; returns its JSON line.
std::string RunOne(const Options& o, const std::string& method, int seed,
                   int stages) {
  std::string command = absl::StrFormat(
      "/proc/%d/exe noninferiority --child=%s --child-seed=%d "
      "--child-stages=%d --preset=%s --corpus='%s' --steps=%d --threads=%d "
      "--eval-windows=%d --lr=%g --warmup=%d --batch=%d --seeds=%d%s",
      ::getpid(), method, seed, stages, o.preset, o.corpus, o.steps, o.threads,
      o.eval_windows, o.lr, o.warmup, o.batch, o.seeds,
      o.async ? " --async" : "");
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return "";
  std::string last;
  char line[4096];
  while (std::fgets(line, sizeof(line), pipe) != nullptr) {
    if (line[0] == '{') last = line;
  }
  if (::pclose(pipe) != 0) {
    std::fprintf(stderr, "gasloc-bench noninferiority: child failed: %s\n",
                 command.c_str());
    return "";
  }
  while (!last.empty() && last.back() == '\n') last.pop_back();
  return last;
}

struct Run {
  double tps = 0, rss = 0, bpb = 0;
  std::string json;
};

Run Parse(const std::string& json) {
  return {JsonNumber(json, "tokens_per_s"), JsonNumber(json, "peak_rss_bytes"),
          JsonNumber(json, "val_bpb"), json};
}

double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? NAN : s / v.size();
}

int RunNonInferiority(int argc, char** argv) {
  Options o;
  if (!ParseArgs(argc, argv, &o)) return 2;
  // In this process too (re-executes).
  EnsureOmpWaitPolicy(kTrainingOmpWaitPolicy, kTrainingOmpSpinCount);
  const Preset* preset = FindPreset(o.preset);
  if (preset == nullptr) {
    Fail("--preset must be D24, S or TINY, got '" + o.preset + "'");
    return 2;
  }
  for (int k : o.stages) {
    if (k > preset->layers) {
      Fail(absl::StrCat("--stages: ", k, " > the preset's ", preset->layers,
                        " layers"));
      return 2;
    }
  }
  if (!o.child.empty()) return RunChild(o, *preset);

  const int batch = o.batch > 0 ? o.batch : preset->batch;
  const long long budget =
      static_cast<long long>(o.steps) * batch * preset->ctx;
  std::printf("non-inferiority: preset %s (%d layers, d %d), corpus %s, %d "
              "seeds, %d steps x %d x %d = %lld tokens each, %d threads, "
              "%s RGC, K in {%s}, margin %.2f%%\n",
              o.preset.c_str(), preset->layers, preset->d_model,
              o.corpus.c_str(), o.seeds, o.steps, batch, preset->ctx, budget,
              o.threads, o.async ? "asynchronous" : "synchronous",
              absl::StrJoin(o.stages, ",").c_str(), o.margin * 100);
  std::fflush(stdout);
  // Seed by seed, the global run then each K right after it (so slow
  // phases of a shared machine hit both sides alike).
  std::vector<Run> global(o.seeds);
  std::map<int, std::vector<Run>> local;
  for (int s = 0; s < o.seeds; ++s) {
    const int seed = o.first_seed + s;
    global[s] = Parse(RunOne(o, "global", seed, 1));
    if (global[s].json.empty()) return 1;
    std::printf("seed %d global: %s\n", seed, global[s].json.c_str());
    std::fflush(stdout);
    for (int k : o.stages) {
      Run r = Parse(RunOne(o, "rgc", seed, k));
      if (r.json.empty()) return 1;
      std::printf("seed %d rgc K=%d: %s\n", seed, k, r.json.c_str());
      std::fflush(stdout);
      local[k].push_back(r);
    }
  }
  std::string json = absl::StrFormat(
      "{\"preset\": \"%s\", \"corpus\": \"%s\", \"seeds\": %d, "
      "\"tokens_per_run\": %lld, \"threads\": %d, \"asynchronous\": %s, "
      "\"margin\": %g, \"results\": [",
      o.preset, o.corpus, o.seeds, budget, o.threads,
      o.async ? "true" : "false", o.margin);
  bool all_pass = true;
  for (int k : o.stages) {
    std::printf("\nK = %d (%s)\n\n", k, o.async ? "asynchronous" : "synchronous");
    std::printf("| seed | tok/s BP | tok/s RGC | ratio | peak MiB BP | peak MiB "
                "RGC | ratio | val bpb BP | val bpb RGC | d_s |\n"
                "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
                "---: | ---: |\n");
    std::vector<double> gaps, tps_ratio, mem_ratio;
    for (int s = 0; s < o.seeds; ++s) {
      const Run& g = global[s];
      const Run& r = local[k][s];
      gaps.push_back((r.bpb - g.bpb) / g.bpb);
      tps_ratio.push_back(r.tps / g.tps);
      mem_ratio.push_back(r.rss / g.rss);
      std::printf("| %d | %.0f | %.0f | %.3f | %.0f | %.0f | %.3f | %.4f | "
                  "%.4f | %+.3f%% |\n",
                  o.first_seed + s, g.tps, r.tps, tps_ratio.back(),
                  g.rss / 1048576.0, r.rss / 1048576.0, mem_ratio.back(),
                  g.bpb, r.bpb, gaps.back() * 100);
    }
    const NonInferiority ni = TestNonInferiority(gaps, o.margin);
    all_pass = all_pass && ni.pass;
    std::printf("\nthroughput ratio RGC/BP (mean) %.3f; peak memory ratio "
                "RGC/BP (mean) %.3f\nmean gap %+.3f%%, sd %.3f%%, one-sided 95%% "
                "upper bound %+.3f%% (t %.3f, %d dof) vs margin %.2f%%: %s\n",
                Mean(tps_ratio), Mean(mem_ratio), ni.mean_gap * 100,
                ni.sd_gap * 100, ni.upper_bound * 100, StudentT95(ni.n - 1),
                ni.n - 1, o.margin * 100, ni.pass ? "PASS" : "FAIL");
    absl::StrAppendFormat(
        &json,
        "%s{\"stages\": %d, \"throughput_ratio\": %.4f, \"memory_ratio\": %.4f, "
        "\"bpb_global\": %.5f, \"bpb_rgc\": %.5f, \"mean_gap\": %.6f, "
        "\"upper_bound\": %.6f, \"verdict\": \"%s\"}",
        k == o.stages.front() ? "" : ", ", k, Mean(tps_ratio),
        Mean(mem_ratio), Mean([&] {
          std::vector<double> v;
          for (const Run& g : global) v.push_back(g.bpb);
          return v;
        }()),
        Mean([&] {
          std::vector<double> v;
          for (const Run& r : local[k]) v.push_back(r.bpb);
          return v;
        }()),
        ni.mean_gap, ni.upper_bound, ni.pass ? "PASS" : "FAIL");
  }
  std::printf("%s]}\n", json.c_str());
  (void)all_pass;
  return 0;
}

}  // namespace

GASLOC_BENCH_COMMAND(noninferiority,
                     "global backprop vs local RGC: throughput, memory, bpb "
                     "gap over seeds",
                     RunNonInferiority);

}  // namespace gasloc::bench
