// gasloc-bench metrics: what the worker's per-step metrics cost
// (WorkerMetrics::RecordStep: two counter increments, two gauge sets, one
// histogram observation), against the smallest inner step gasloc runs, the
// integration tests' tiny model (1 layer, d_model 32, context 32, batch 8,
// 1 thread), measured in the same invocation so the ratio holds on a noisy
// machine.
//
//   gasloc-bench metrics [--calls=N] [--steps=N] [--data=FILE]
//
// Prints ns per RecordStep alone and while another thread collects the
// registry every millisecond (a scraper far more eager than Prometheus),
// the tiny step's median, and the ratios; ends with one JSON line.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "bench/bench_flags.h"
#include "bench/bench_registry.h"
#include "prometheus/registry.h"
#include "worker/round/worker_metrics.h"
#include "worker/train/trainer.h"

namespace gasloc::bench {
namespace {

using Clock = std::chrono::steady_clock;

double NsPerCall(WorkerMetrics& metrics, int calls) {
  const auto start = Clock::now();
  for (int i = 0; i < calls; ++i)
    metrics.RecordStep(0.01, 256, 3.0 - 1e-7 * i, 25600.0);
  return std::chrono::duration<double, std::nano>(Clock::now() - start).count() /
         calls;
}

int RunMetricsBench(int argc, char** argv) {
  int calls = 1000000, steps = 60;
  std::string data = GASLOC_SOURCE_DIR "/tests/data/tinyshakespeare.txt";
  constexpr char kUsage[] =
      "Usage: gasloc-bench metrics [--calls=N > 0] [--steps=N > 10] "
      "[--data=FILE]\n";
  BenchFlags flags;
  flags.ints = {{"calls", &calls}, {"steps", &steps}};
  flags.strings = {{"data", &data}};
  if (!ParseBenchFlags(argc, argv, "gasloc-bench metrics", kUsage, flags)) {
    return 2;
  }
  if (calls <= 0 || steps <= 10) {
    std::fprintf(stderr, "gasloc-bench metrics: --calls must be > 0 and "
                         "--steps > 10\n%s", kUsage);
    return 2;
  }

  auto registry = std::make_shared<prometheus::Registry>();
  WorkerMetrics metrics(*registry);
  metrics.BeginJob(1, 1);
  NsPerCall(metrics, calls / 10);  // warm up
  const double quiet_ns = NsPerCall(metrics, calls);
  std::atomic<bool> stop{false};
  std::atomic<int> scrapes{0};
  std::thread scraper([&] {
    while (!stop) {
      auto families = registry->Collect();
      auto gauges = metrics.scrape_gauges()->Collect();
      scrapes += families.empty() ? 0 : 1;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  const double scraped_ns = NsPerCall(metrics, calls);
  stop = true;
  scraper.join();

  v1::JobSpec spec;
  spec.set_name("bench");
  spec.mutable_model()->set_layers(1);
  spec.mutable_model()->set_d_model(32);
  spec.mutable_model()->set_heads(2);
  spec.mutable_model()->set_context(32);
  spec.mutable_training()->set_batch(8);
  spec.mutable_training()->set_threads(1);
  spec.mutable_data()->set_corpus_path(data);
  spec.mutable_data()->set_eval_windows(1);
  spec.mutable_stop()->set_max_rounds(1);
  TrainerOptions options;
  options.spec = spec;
  options.threads = 1;
  options.total_steps = static_cast<uint64_t>(steps);
  auto trainer = Trainer::Create(options);
  if (!trainer.ok()) {
    std::fprintf(stderr, "gasloc-bench metrics: %s\n",
                 trainer.status().ToString().c_str());
    return 1;
  }
  std::vector<double> step_ns;
  for (int i = 0; i < steps; ++i) {
    const auto start = Clock::now();
    auto stats = (*trainer)->Step();
    if (!stats.ok()) {
      std::fprintf(stderr, "gasloc-bench metrics: %s\n",
                   stats.status().ToString().c_str());
      return 1;
    }
    if (i >= 10)
      step_ns.push_back(
          std::chrono::duration<double, std::nano>(Clock::now() - start).count());
  }
  std::sort(step_ns.begin(), step_ns.end());
  const double median_step_ns = step_ns[step_ns.size() / 2];

  std::printf("RecordStep, %d calls: %.1f ns/call alone, %.1f ns/call with a "
              "1 ms scraper (%d collections)\n",
              calls, quiet_ns, scraped_ns, scrapes.load());
  std::printf("tiny-model inner step (1 layer, d 32, ctx 32, batch 8, 1 "
              "thread), median of %zu: %.3f ms\n",
              step_ns.size(), median_step_ns / 1e6);
  std::printf("RecordStep / step: %.2e alone, %.2e with the scraper\n",
              quiet_ns / median_step_ns, scraped_ns / median_step_ns);
  std::printf("{\"record_step_ns\": %.1f, \"record_step_scraped_ns\": %.1f, "
              "\"tiny_step_ms\": %.3f, \"ratio\": %.3g, \"ratio_scraped\": "
              "%.3g}\n",
              quiet_ns, scraped_ns, median_step_ns / 1e6,
              quiet_ns / median_step_ns, scraped_ns / median_step_ns);
  return 0;
}

}  // namespace

GASLOC_BENCH_COMMAND(metrics,
                     "cost of the worker's per-step metrics vs a tiny inner step",
                     RunMetricsBench);

}  // namespace gasloc::bench
