// gasloc-bench train: throughput of the trainer's optimizer step (forward,
// backward, clipping, AdamW, data sampling) on a named preset or an explicit
// shape, optionally against PyTorch on the same config and threads
// (--compare-torch runs bench/torch_train_bench.py) and against the oneDNN
// matmul peak of this machine (--matmul-peak), and against the time floor
// of the step's linear matmuls run alone (--linear-floor, on by default,
// linear_floor.h). Every figure carries the precision actually computed
// (fp32, bf16 native, bf16 emulated) and, with the floor, its ratio to it.
// Prints per-step progress and ends with ONE JSON line (docs/benchmarks.md).
#include <omp.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_flags.h"
#include "bench/bench_registry.h"
#include "bench/linear_floor.h"
#include "common/job_spec.h"
#include "common/omp_wait_policy.h"
#include "dnnl.hpp"
#include "worker/model/kernels.h"
#include "worker/model/transformer.h"
#include "worker/train/trainer.h"

namespace gasloc::bench {
namespace {

constexpr char kUsage[] =
    "gasloc-bench train [--preset=S|M|D24] [--layers=N] [--d-model=N] "
    "[--heads=N] [--ctx=N] [--batch=N] [--threads=2] [--dtype=fp32|bf16] "
    "[--steps=10] [--warmup=2] [--data=FILE] [--compare-torch] "
    "[--matmul-peak] [--linear-floor (default; --nolinear-floor skips)] "
    "[--rounds=1] [--profile]\n";

struct BenchOptions {
  std::string preset = "S";
  int layers = 0, d_model = 0, heads = 0, ctx = 0, batch = 0;
  int threads = 2;
  std::string dtype = "fp32";
  int steps = 10;
  int warmup = 2;
  std::string data;
  bool compare_torch = false;
  bool matmul_peak = false;
  // On by default: every figure is printed beside the floor of the
  // precision computed (--nolinear-floor skips it).
  bool linear_floor = true;
  int rounds = 1;  // --compare-torch: alternating runs, median ratio
  // Time per operation class of the model, forward and backward, over the
  // timed steps (TransformerModel's profile; off by default: it reads the
  // clock around every operation).
  bool profile = false;
};

double Seconds(std::chrono::steady_clock::time_point a,
               std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool ParseArgs(int argc, char** argv, BenchOptions* o) {
  BenchFlags flags;
  flags.ints = {{"layers", &o->layers}, {"d-model", &o->d_model},
                {"heads", &o->heads},   {"ctx", &o->ctx},
                {"batch", &o->batch},   {"threads", &o->threads},
                {"steps", &o->steps},   {"warmup", &o->warmup},
                {"rounds", &o->rounds}};
  flags.strings = {{"preset", &o->preset}, {"dtype", &o->dtype},
                   {"data", &o->data}};
  flags.bools = {{"compare-torch", &o->compare_torch},
                 {"matmul-peak", &o->matmul_peak},
                 {"linear-floor", &o->linear_floor},
                 {"profile", &o->profile}};
  return ParseBenchFlags(argc, argv, "gasloc-bench train", kUsage, flags);
}

// What a --dtype computes on this CPU: "fp32", "bf16 native" or "bf16
// emulated" (kernels::Bf16ComputeMode), printed beside every figure.
std::string ComputedPrecision(const std::string& dtype) {
  if (dtype != "bf16") return "fp32";
  return absl::StrCat("bf16 ",
                      kernels::Bf16ComputeName(kernels::Bf16ComputeMode()));
}

// A JSON string literal of `text` (quotes and backslashes escaped).
std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += (c == '\n' ? ' ' : c);
  }
  return out + "\"";
}

// Best GFLOP/s of oneDNN matmuls at the model's shapes (M = batch * ctx rows
// against the QKV, MLP and head weights), weights in oneDNN's preferred
// blocked format (format_tag::any, reordered once), as the model uses them.
double MatmulPeakGflops(bool bf16, int64_t m, int64_t d, int threads) {
  using dnnl::memory;
  omp_set_num_threads(threads);
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const auto dt = bf16 ? memory::data_type::bf16 : memory::data_type::f32;
  double best = 0;
  const int64_t shapes[][2] = {{d, 3 * d}, {d, 4 * d}, {4 * d, d}};
  for (const auto& shape : shapes) {
    const int64_t k = shape[0], n = shape[1];
    memory::desc a_md({m, k}, dt, memory::format_tag::ab);
    memory::desc b_any({k, n}, dt, memory::format_tag::any);
    memory::desc c_md({m, n}, memory::data_type::f32, memory::format_tag::ab);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_any, c_md),
                                    engine);
    memory a(a_md, engine), b(pd.weights_desc(), engine), c(c_md, engine);
    std::fill_n(static_cast<uint8_t*>(a.get_data_handle()),
                a_md.get_size(), uint8_t{0x3c});
    std::fill_n(static_cast<uint8_t*>(b.get_data_handle()),
                pd.weights_desc().get_size(), uint8_t{0x3c});
    dnnl::matmul mm(pd);
    std::vector<double> times;
    for (int rep = 0; rep < 12; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      mm.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b},
                          {DNNL_ARG_DST, c}});
      stream.wait();
      if (rep >= 2) times.push_back(Seconds(t0, std::chrono::steady_clock::now()));
    }
    best = std::max(best, 2.0 * m * k * n / Median(times) / 1e9);
  }
  return best;
}

// Runs the PyTorch side; returns its JSON line, or the reason it failed
// (PyTorch's bf16 needs AVX-512 too: on an AVX2-only CPU the comparison is
// skipped with that reason, not the benchmark).
absl::StatusOr<std::string> RunTorch(const BenchOptions& o,
                                     const ModelConfig& c, int batch,
                                     const std::string& data) {
  const std::string command = absl::StrFormat(
      "OMP_NUM_THREADS=%d OPENBLAS_NUM_THREADS=%d /usr/bin/python3 "
      "%s/bench/torch_train_bench.py --layers %d --d-model %d --heads %d "
      "--ctx %d --batch %d --threads %d --dtype %s --steps %d --warmup %d "
      "--data '%s' 2>&1",
      o.threads, o.threads, GASLOC_SOURCE_DIR, c.layers, c.d_model, c.heads,
      c.context, batch, o.threads, o.dtype, o.steps, o.warmup, data);
  std::FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::InternalError("could not start PyTorch");
  std::string last, last_other;
  char line[4096];
  while (std::fgets(line, sizeof(line), pipe) != nullptr) {
    std::string s(line);
    if (!s.empty() && s[0] == '{') {
      last = s;
      while (!last.empty() && (last.back() == '\n' || last.back() == '\r'))
        last.pop_back();
    } else {
      std::printf("%s", s.c_str());
      std::fflush(stdout);
      if (s.find_first_not_of(" \t\r\n") != std::string::npos) {
        last_other = s.substr(0, s.find_last_not_of(" \t\r\n") + 1);
      }
    }
  }
  const int rc = ::pclose(pipe);
  if (rc != 0 || last.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "PyTorch ", o.dtype, " run failed (status ", rc, "): ", last_other));
  }
  return last;
}

// The number after "key": in a flat JSON line (0 if absent).
double JsonNumber(const std::string& json, const std::string& key) {
  const std::string needle = "\"" + key + "\":";
  const size_t at = json.find(needle);
  if (at == std::string::npos) return 0;
  return std::strtod(json.c_str() + at + needle.size(), nullptr);
}

// One timed run of our trainer: medians over the steps after the warm-up.
struct OursResult {
  uint64_t params = 0;
  double tokens_per_s = 0, ms_per_step = 0, fwd_bwd_ms = 0, optimizer_ms = 0;
  double peak_rss_bytes = 0, gflops = 0, fwd_bwd_gflops = 0;
  // --profile: the model's operation times summed over the timed steps,
  // and the fwd+bwd and optimizer seconds of those same steps, summed.
  std::optional<TransformerModel::OpProfile> profile;
  int profiled_steps = 0;
  double profiled_fwd_bwd_s = 0, profiled_optimizer_s = 0;
};

// Prints the --profile table (ms per step by operation class, forward and
// backward; what the step spends outside the model) and returns its JSON
// object. `floor_ms` > 0: the linear layers' share is shown beside it.
std::string ReportProfile(const OursResult& r, double floor_ms) {
  const TransformerModel::OpProfile& p = *r.profile;
  const double n = std::max(1, r.profiled_steps);
  const double step_ms =
      (r.profiled_fwd_bwd_s + r.profiled_optimizer_s) / n * 1e3;
  std::printf("time by operation class, ms per step (mean of %d steps; "
              "step %.1f ms) [%s]:\n",
              r.profiled_steps, step_ms, kernels::ComputeSummary().c_str());
  std::printf("  %-22s %9s %9s %9s %6s\n", "operation", "forward",
              "backward", "total", "share");
  std::string json = "{";
  double linear_ms = 0;
  const auto row = [&](const std::string& name, double fwd_ms,
                       double bwd_ms) {
    std::printf("  %-22s %9.2f %9.2f %9.2f %5.1f%%\n", name.c_str(), fwd_ms,
                bwd_ms, fwd_ms + bwd_ms, 100.0 * (fwd_ms + bwd_ms) / step_ms);
    absl::StrAppend(&json, json.size() > 1 ? ", " : "", "\"", name,
                    "\": [", absl::StrFormat("%.3f, %.3f", fwd_ms, bwd_ms),
                    "]");
  };
  for (int op = 0; op < TransformerModel::kOpCount; ++op) {
    const double fwd_ms = p.forward[op] / n * 1e3;
    const double bwd_ms = p.backward[op] / n * 1e3;
    if (TransformerModel::IsLinearOp(op)) linear_ms += fwd_ms + bwd_ms;
    row(TransformerModel::OpName(op), fwd_ms, bwd_ms);
  }
  // The step outside the model's operations: batch sampling and the
  // gradient's norm in ComputeGradients, clipping and AdamW after it.
  row("data_and_grad_norm", 0, r.profiled_fwd_bwd_s / n * 1e3 - p.total() / n * 1e3);
  row("optimizer", 0, r.profiled_optimizer_s / n * 1e3);
  std::printf("  linear layers (qkv, proj, fc, fc2, head) %.1f ms = %.1f%% of "
              "the step",
              linear_ms, 100.0 * linear_ms / step_ms);
  if (floor_ms > 0) {
    std::printf("; alone (the floor) %.1f ms; everything else %.1f ms",
                floor_ms, step_ms - linear_ms);
  }
  std::printf("\n");
  return json + "}";
}

// `floor_ms` > 0: each step line also shows its ratio to the floor.
absl::StatusOr<OursResult> RunOurs(const BenchOptions& o,
                                   const v1::JobSpec& spec, double floor_ms) {
  TrainerOptions options;
  options.spec = spec;
  options.threads = o.threads;
  options.total_steps = static_cast<uint64_t>(o.steps);
  auto trainer = Trainer::Create(options);
  if (!trainer.ok()) return trainer.status();
  Trainer& t = **trainer;
  // Only the transformer has a profile (a bounded-horizon job's model has
  // none; the bench trains the default, global backprop).
  auto* transformer = dynamic_cast<TransformerModel*>(&t.model());
  if (o.profile && transformer == nullptr) {
    return absl::FailedPreconditionError(
        "--profile: this job's model is not a TransformerModel");
  }
  OursResult r;
  std::vector<double> step_s, fwd_bwd_s, optimizer_s;
  const std::string computed = ComputedPrecision(o.dtype);
  for (int i = 0; i < o.steps; ++i) {
    const bool timed = i >= o.warmup || o.steps <= o.warmup;
    if (o.profile && timed && step_s.empty()) {
      transformer->ResetProfile();
      transformer->EnableProfile(true);
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto loss = t.ComputeGradients();
    const auto t1 = std::chrono::steady_clock::now();
    if (!loss.ok()) return loss.status();
    auto applied = t.ApplyGradients();
    const auto t2 = std::chrono::steady_clock::now();
    if (!applied.ok()) return applied.status();
    const double s = Seconds(t0, t2);
    const std::string floor_note =
        floor_ms > 0 ? absl::StrFormat(", %.2fx its linear floor %.1f ms",
                                       s * 1e3 / floor_ms, floor_ms)
                     : "";
    std::printf("step %d/%d loss %.4f ms %.1f (fwd+bwd %.1f, optimizer %.1f) "
                "tok/s %.0f [%s%s]\n",
                i + 1, o.steps, *loss, s * 1e3, Seconds(t0, t1) * 1e3,
                Seconds(t1, t2) * 1e3, t.tokens_per_step() / s,
                computed.c_str(), floor_note.c_str());
    std::fflush(stdout);
    if (timed) {
      step_s.push_back(s);
      fwd_bwd_s.push_back(Seconds(t0, t1));
      optimizer_s.push_back(Seconds(t1, t2));
    }
  }
  const double median = Median(step_s);
  const double flops = t.model().TrainingFlops(t.batch(), t.config().context);
  struct rusage usage;
  ::getrusage(RUSAGE_SELF, &usage);
  if (o.profile) {
    transformer->EnableProfile(false);
    r.profile = transformer->profile();
    r.profiled_steps = static_cast<int>(step_s.size());
    for (double s : fwd_bwd_s) r.profiled_fwd_bwd_s += s;
    for (double s : optimizer_s) r.profiled_optimizer_s += s;
  }
  r.params = t.params().layout().parameter_count();
  r.tokens_per_s = t.tokens_per_step() / median;
  r.ms_per_step = median * 1e3;
  r.fwd_bwd_ms = Median(fwd_bwd_s) * 1e3;
  r.optimizer_ms = Median(optimizer_s) * 1e3;
  r.peak_rss_bytes = static_cast<double>(usage.ru_maxrss) * 1024.0;
  r.gflops = flops / median / 1e9;
  r.fwd_bwd_gflops = flops / Median(fwd_bwd_s) / 1e9;
  return r;
}

int RunTrainBenchUnguarded(int argc, char** argv) {
  BenchOptions o;
  if (!ParseArgs(argc, argv, &o)) return 2;
  // As gasloc-train: passive OpenMP waiting after a short spin unless the
  // caller chose, in this process (a setenv alone reached only the PyTorch
  // child: libgomp reads the variable at load time) and in the PyTorch run.
  EnsureOmpWaitPolicy(kTrainingOmpWaitPolicy, kTrainingOmpSpinCount);
  struct Preset {
    const char* name;
    int layers, d_model, heads, ctx, batch;
  };
  static constexpr Preset kPresets[] = {{"S", 4, 256, 4, 256, 16},
                                        {"M", 6, 384, 6, 256, 16},
                                        {"D24", 24, 256, 8, 256, 8}};
  const Preset* preset = nullptr;
  for (const Preset& p : kPresets)
    if (o.preset == p.name) preset = &p;
  if (preset == nullptr) {
    std::fprintf(stderr, "gasloc-bench train: --preset must be S, M or D24, got '%s'\n",
                 o.preset.c_str());
    return 2;
  }
  if (o.dtype != "fp32" && o.dtype != "bf16") {
    std::fprintf(stderr, "gasloc-bench train: --dtype must be fp32 or bf16, got '%s'\n",
                 o.dtype.c_str());
    return 2;
  }
  if (o.steps < 0 || o.warmup < 0 || o.threads < 1 || o.rounds < 1) {
    std::fprintf(stderr, "gasloc-bench train: --steps and --warmup must be >= 0 "
                         "and --threads, --rounds >= 1\n");
    return 2;
  }
  if (o.data.empty()) {
    o.data = GASLOC_SOURCE_DIR "/tests/data/tinyshakespeare.txt";
    if (::access(o.data.c_str(), R_OK) != 0) o.data = "/usr/share/common-licenses";
  }
  v1::JobSpec spec;
  spec.set_name("bench");
  spec.mutable_model()->set_layers(o.layers > 0 ? o.layers : preset->layers);
  spec.mutable_model()->set_d_model(o.d_model > 0 ? o.d_model : preset->d_model);
  spec.mutable_model()->set_heads(o.heads > 0 ? o.heads : preset->heads);
  spec.mutable_model()->set_context(o.ctx > 0 ? o.ctx : preset->ctx);
  spec.mutable_training()->set_batch(o.batch > 0 ? o.batch : preset->batch);
  spec.mutable_training()->set_threads(o.threads);
  spec.mutable_training()->set_precision(
      o.dtype == "bf16" ? v1::PRECISION_BF16 : v1::PRECISION_FP32);
  spec.mutable_data()->set_corpus_path(o.data);
  spec.mutable_data()->set_eval_windows(1);
  spec.mutable_stop()->set_max_rounds(1);

  std::string json = "{";
  const auto add = [&json](const std::string& key, const std::string& value) {
    absl::StrAppend(&json, json.size() > 1 ? ", " : "", "\"", key, "\": ", value);
  };
  add("preset", absl::StrCat("\"", o.preset, "\""));
  add("dtype", absl::StrCat("\"", o.dtype, "\""));
  add("threads", absl::StrCat(o.threads));
  add("layers", absl::StrCat(spec.model().layers()));
  add("d_model", absl::StrCat(spec.model().d_model()));
  add("heads", absl::StrCat(spec.model().heads()));
  add("ctx", absl::StrCat(spec.model().context()));
  add("batch", absl::StrCat(spec.training().batch()));
  const std::string computed = ComputedPrecision(o.dtype);
  add("computed_precision", JsonString(computed));

  double peak = 0;
  if (o.matmul_peak) {
    // oneDNN's own kernels: a CPU without bf16 matmuls reports its bf16
    // peak as skipped, with the reason.
    const int64_t m = int64_t{spec.training().batch()} * spec.model().context();
    for (const bool bf16 : {false, true}) {
      const char* name = bf16 ? "bf16" : "fp32";
      try {
        const double gflops =
            MatmulPeakGflops(bf16, m, spec.model().d_model(), o.threads);
        std::printf("oneDNN matmul peak (M %lld, d %u, %d threads): %s %.0f "
                    "GFLOP/s\n",
                    static_cast<long long>(m), spec.model().d_model(),
                    o.threads, name, gflops);
        add(absl::StrCat("matmul_peak_", name, "_gflops"),
            absl::StrFormat("%.1f", gflops));
        if ((o.dtype == "bf16") == bf16) peak = gflops;
      } catch (const dnnl::error& e) {
        const std::string why =
            kernels::OneDnnStatus(absl::StrCat(name, " matmul peak"),
                                  bf16 ? kernels::dt::bf16 : kernels::dt::f32,
                                  e)
                .ToString();
        std::printf("oneDNN matmul peak %s: skipped: %s\n", name, why.c_str());
        add(absl::StrCat("matmul_peak_", name, "_skipped"), JsonString(why));
      }
    }
  }

  double floor_ms = 0;
  if (o.linear_floor) {
    const ModelConfig c{
        .layers = static_cast<int>(spec.model().layers()),
        .d_model = static_cast<int>(spec.model().d_model()),
        .heads = static_cast<int>(spec.model().heads()),
        .context = static_cast<int>(spec.model().context())};
    try {
      const LinearFloor floor = MeasureLinearFloor(
          c, static_cast<int>(spec.training().batch()), o.dtype == "bf16",
          o.threads);
      std::printf("linear matmuls alone (one call each, median) [%s]:\n",
                  computed.c_str());
      for (const LinearFloor::Part& part : floor.parts) {
        std::printf("  %-18s %7.3f ms %6.0f GFLOP/s\n", part.name.c_str(),
                    part.ms, part.gflops);
      }
      std::printf("linear floor of one step [%s]: %.1f ms\n", computed.c_str(),
                  floor.step_ms);
      floor_ms = floor.step_ms;
      add("linear_floor_ms", absl::StrFormat("%.2f", floor_ms));
    } catch (const dnnl::error& e) {
      const std::string why =
          kernels::OneDnnStatus("linear floor", kernels::dt::f32, e).ToString();
      std::printf("linear floor: skipped: %s\n", why.c_str());
      add("linear_floor_skipped", JsonString(why));
    }
  }

  if (o.steps <= 0) {
    json += "}";
    std::printf("%s\n", json.c_str());
    return 0;
  }
  // Rounds alternate our run and PyTorch's, so a slow minute of this shared
  // machine hits both; the reported ratio is the median over rounds.
  const ModelConfig config{
      .layers = static_cast<int>(spec.model().layers()),
      .d_model = static_cast<int>(spec.model().d_model()),
      .heads = static_cast<int>(spec.model().heads()),
      .context = static_cast<int>(spec.model().context())};
  OursResult ours;
  std::string torch, torch_skipped;
  std::vector<double> ratios;
  for (int round = 1; round <= o.rounds; ++round) {
    if (o.rounds > 1) std::printf("round %d/%d\n", round, o.rounds);
    absl::StatusOr<OursResult> run = RunOurs(o, spec, floor_ms);
    if (!run.ok()) {
      // Reported, not aborted: the reason goes in the JSON line.
      const std::string why = run.status().ToString();
      std::fprintf(stderr, "gasloc-bench train: %s\n", why.c_str());
      add("skipped", JsonString(why));
      json += "}";
      std::printf("%s\n", json.c_str());
      return 1;
    }
    ours = *run;
    if (!o.compare_torch) continue;
    absl::StatusOr<std::string> torch_run = RunTorch(
        o, config, static_cast<int>(spec.training().batch()), o.data);
    if (!torch_run.ok()) {
      torch_skipped = std::string(torch_run.status().message());
      std::printf("PyTorch comparison skipped: %s\n", torch_skipped.c_str());
      break;
    }
    torch = *torch_run;
    ratios.push_back(ours.tokens_per_s / JsonNumber(torch, "tokens_per_s"));
    std::printf("round %d: ours %.1f ms/step, PyTorch %.1f ms/step, ratio "
                "%.3f\n",
                round, ours.ms_per_step, JsonNumber(torch, "ms_per_step"),
                ratios.back());
  }
  // Our figures (and PyTorch's JSON) are from the last round.
  add("params", absl::StrCat(ours.params));
  add("tokens_per_s", absl::StrFormat("%.1f", ours.tokens_per_s));
  add("ms_per_step", absl::StrFormat("%.2f", ours.ms_per_step));
  add("fwd_bwd_ms", absl::StrFormat("%.2f", ours.fwd_bwd_ms));
  add("optimizer_ms", absl::StrFormat("%.2f", ours.optimizer_ms));
  add("peak_rss_bytes", absl::StrFormat("%.0f", ours.peak_rss_bytes));
  add("achieved_gflops", absl::StrFormat("%.1f", ours.gflops));
  add("fwd_bwd_gflops", absl::StrFormat("%.1f", ours.fwd_bwd_gflops));
  if (ours.profile.has_value()) {
    add("profile_ms_fwd_bwd", ReportProfile(ours, floor_ms));
  }
  if (floor_ms > 0) {
    add("step_over_linear_floor",
        absl::StrFormat("%.3f", ours.ms_per_step / floor_ms));
  }
  if (peak > 0) {
    add("fraction_of_matmul_peak",
        absl::StrFormat("%.3f", ours.gflops / peak));
  }
  if (!torch_skipped.empty()) add("torch_skipped", JsonString(torch_skipped));
  if (o.compare_torch && torch_skipped.empty()) {
    add("torch", torch);
    add("rounds", absl::StrCat(o.rounds));
    std::string per_round;
    for (double r : ratios) {
      absl::StrAppend(&per_round, per_round.empty() ? "" : ", ",
                      absl::StrFormat("%.3f", r));
    }
    add("speedup_vs_torch_by_round", absl::StrCat("[", per_round, "]"));
    add("speedup_vs_torch", absl::StrFormat("%.3f", Median(ratios)));
    if (floor_ms > 0) {
      // The best speedup any step built on these matmuls could reach.
      add("speedup_bound_from_linear_floor",
          absl::StrFormat("%.3f", JsonNumber(torch, "ms_per_step") / floor_ms));
    }
    add("rss_ratio_vs_torch",
        absl::StrFormat("%.3f",
                        ours.peak_rss_bytes / JsonNumber(torch, "peak_rss_bytes")));
  }
  json += "}";
  std::printf("%s\n", json.c_str());
  return 0;
}

// No oneDNN error aborts the benchmark: one that escapes every narrower
// handler ends the run with its reason in the JSON line.
int RunTrainBench(int argc, char** argv) {
  try {
    return RunTrainBenchUnguarded(argc, argv);
  } catch (const dnnl::error& e) {
    const std::string why =
        kernels::OneDnnStatus("gasloc-bench train", kernels::dt::f32, e)
            .ToString();
    std::fprintf(stderr, "gasloc-bench train: %s\n", why.c_str());
    std::printf("{\"error\": %s}\n", JsonString(why).c_str());
    return 1;
  }
}

}  // namespace

GASLOC_BENCH_COMMAND(train, "trainer step throughput (vs PyTorch, vs matmul peak)",
                     RunTrainBench);

}  // namespace gasloc::bench
