// gasloc-bench model: times Model::ForwardBackward alone (no optimizer, no
// data loading) with a per-operation breakdown, and the oneDNN matmul
// ceiling for the same precision and threads, to say where a training
// step's time goes (docs/model.md). `gasloc-bench train` is the end-to-end
// benchmark against PyTorch.
//
//   gasloc-bench model --preset S --dtype bf16 --threads 2 --steps 10
//
// Flags (--name=value or --name value): --preset S|M|D24, or --layers
// --d-model --heads --ctx --batch; --dtype fp32|bf16; --threads N (default
// 2); --steps N (default 10, after 2 warm-up steps); --seed N.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "bench/bench_flags.h"
#include "bench/bench_registry.h"
#include "worker/model/kernels.h"
#include "worker/model/transformer.h"

namespace gasloc::bench {
namespace {

double Now() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// GFLOP/s of the fc forward matmul (M, d) x (d, 4d) in `cdt`, median of 20.
double MatmulGflops(int M, int d, kernels::dt cdt) {
  kernels::DnnlEnv env;
  kernels::Linear::Options o;
  o.M = M; o.K = d; o.N = 4 * d; o.cdt = cdt; o.y_type = cdt;
  kernels::Linear linear(&env, o);
  const size_t es = kernels::DtSize(cdt);
  std::vector<char> x(size_t{1} * M * d * es), w(size_t{4} * d * d * es),
      y(size_t{4} * M * d * es);
  std::vector<float> b(4 * d, 0.0f);
  std::vector<double> times;
  for (int i = 0; i < 23; ++i) {
    const double t0 = Now();
    linear.Forward(x.data(), w.data(), b.data(), nullptr, y.data());
    if (i >= 3) times.push_back(Now() - t0);
  }
  return 2.0 * M * d * 4.0 * d / Median(times) / 1e9;
}

int Run(int argc, char** argv) {
  std::map<std::string, std::string> flags = {
      {"preset", ""}, {"layers", "4"}, {"d-model", "256"}, {"heads", "4"},
      {"ctx", "256"}, {"batch", "16"}, {"dtype", "fp32"}, {"threads", "2"},
      {"steps", "10"}, {"seed", "1"}};
  constexpr char kUsage[] =
      "gasloc-bench model [--preset S|M|D24] [--layers N] [--d-model N] "
      "[--heads N] [--ctx N] [--batch N] [--dtype fp32|bf16] [--threads N] "
      "[--steps N] [--seed N]\n";
  BenchFlags parsed;
  for (auto& [name, value] : flags) parsed.strings[name] = &value;
  if (!ParseBenchFlags(argc, argv, "gasloc-bench model", kUsage, parsed)) {
    return 2;
  }
  const std::string preset = flags["preset"];
  if (preset == "S") {
    flags["layers"] = "4"; flags["d-model"] = "256"; flags["heads"] = "4";
    flags["ctx"] = "256"; flags["batch"] = "16";
  } else if (preset == "M") {
    flags["layers"] = "6"; flags["d-model"] = "384"; flags["heads"] = "6";
    flags["ctx"] = "256"; flags["batch"] = "16";
  } else if (preset == "D24") {
    flags["layers"] = "24"; flags["d-model"] = "256"; flags["heads"] = "8";
    flags["ctx"] = "256"; flags["batch"] = "8";
  } else if (!preset.empty()) {
    std::fprintf(stderr, "gasloc-bench model: unknown --preset %s (S, M, D24)\n",
                 preset.c_str());
    return 2;
  }
  if (flags["dtype"] != "fp32" && flags["dtype"] != "bf16") {
    std::fprintf(stderr, "gasloc-bench model: --dtype must be fp32 or bf16\n");
    return 2;
  }
  ModelConfig config;
  config.layers = std::atoi(flags["layers"].c_str());
  config.d_model = std::atoi(flags["d-model"].c_str());
  config.heads = std::atoi(flags["heads"].c_str());
  config.context = std::atoi(flags["ctx"].c_str());
  const int batch = std::atoi(flags["batch"].c_str());
  const int steps = std::max(1, std::atoi(flags["steps"].c_str()));
  const bool bf16 = flags["dtype"] == "bf16";
  ModelOptions options;
  options.precision = bf16 ? v1::PRECISION_BF16 : v1::PRECISION_FP32;
  options.threads = std::atoi(flags["threads"].c_str());
  options.max_batch = batch;
  auto model = TransformerModel::Create(config, options);
  if (!model.ok()) {
    std::fprintf(stderr, "gasloc-bench model: %s\n",
                 model.status().ToString().c_str());
    return 1;
  }
  FloatArena params((*model)->layout()), grads((*model)->layout());
  InitParameters(config, std::strtoull(flags["seed"].c_str(), nullptr, 10),
                 &params);
  const int T = config.context;
  std::vector<uint8_t> tokens(static_cast<size_t>(batch) * (T + 1));
  uint64_t state = 12345;
  for (auto& t : tokens) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    t = static_cast<uint8_t>(state >> 56);
  }
  std::vector<double> times;
  for (int step = 0; step < steps + 2; ++step) {
    if (step == 2) {
      (*model)->ResetProfile();
      (*model)->EnableProfile(true);
    }
    const double t0 = Now();
    auto loss = (*model)->ForwardBackward(params, tokens.data(), batch, T, &grads);
    const double dt = Now() - t0;
    if (!loss.ok()) {
      std::fprintf(stderr, "gasloc-bench model: %s\n",
                   loss.status().ToString().c_str());
      return 1;
    }
    std::printf("step %d loss %.4f %.1f ms\n", step, *loss, dt * 1e3);
    if (step >= 2) times.push_back(dt);
  }
  const double step_s = Median(times);
  const double tokens_per_s = batch * T / step_s;
  const double gflops = (*model)->TrainingFlops(batch, T) / step_s / 1e9;
  const double peak = MatmulGflops(batch * T, config.d_model,
                                   bf16 ? kernels::dt::bf16 : kernels::dt::f32);
  const TransformerModel::OpProfile& profile = (*model)->profile();
  const double total = profile.total();
  std::printf("time by operation (%d steps, profiled):\n", steps);
  std::string breakdown;
  for (int op = 0; op < TransformerModel::kOpCount; ++op) {
    const double s = profile.forward[op] + profile.backward[op];
    std::printf("  %-14s %8.2f ms/step %5.1f%%\n", TransformerModel::OpName(op),
                s / steps * 1e3, 100.0 * s / total);
    breakdown += std::string(op ? ", " : "") + "\"" +
                 TransformerModel::OpName(op) + "\": " +
                 std::to_string(s / steps * 1e3);
  }
  std::printf("kernels:\n%s\n", (*model)->KernelReport().c_str());
  std::printf(
      "{\"bench\": \"model\", \"dtype\": \"%s\", \"layers\": %d, \"d_model\": "
      "%d, \"heads\": %d, \"ctx\": %d, \"batch\": %d, \"threads\": %d, "
      "\"params\": %zu, \"ms_per_step\": %.2f, \"tokens_per_s\": %.0f, "
      "\"achieved_gflops\": %.1f, \"matmul_peak_gflops\": %.1f, "
      "\"fraction_of_peak\": %.3f, \"workspace_bytes\": %zu, "
      "\"ms_by_op\": {%s}}\n",
      flags["dtype"].c_str(), config.layers, config.d_model, config.heads,
      config.context, batch, options.threads,
      (*model)->layout()->parameter_count(), step_s * 1e3, tokens_per_s,
      gflops, peak, gflops / peak, (*model)->workspace_bytes(),
      breakdown.c_str());
  return 0;
}

}  // namespace

GASLOC_BENCH_COMMAND(model, "Model::ForwardBackward speed by operation",
                     Run);

}  // namespace gasloc::bench
