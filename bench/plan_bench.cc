// gasloc-bench plan: time to plan one outer round (membership epoch check,
// gossip schedule, per-worker budgets, the first worker's assignment) for
// 1,000 and 10,000 workers, through the real Coordinator with a fake clock.
//
//   gasloc-bench plan [--workers=1000,10000] [--rounds=50]
//                     [--topology=one_peer|two_peer|ring|complete]
//                     [--db=FILE]   (also persist every round to SQLite)
//
// Prints one table row per worker count: median and max milliseconds per
// planned round, the pure schedule + budget functions alone, and the ratio
// to the first worker count; ends with one JSON line.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "bench/bench_flags.h"
#include "bench/bench_registry.h"
#include "common/clock.h"
#include "common/job_spec.h"
#include "common/log.h"
#include "coordinator/budget.h"
#include "coordinator/coordinator.h"
#include "coordinator/schedule.h"
#include "coordinator/store.h"

namespace gasloc::bench {
namespace {

using coordinator::Coordinator;

struct PlanResult {
  int workers = 0;
  double median_ms = 0, max_ms = 0;
  double pure_median_ms = 0;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

absl::StatusOr<PlanResult> BenchOne(int n, int rounds, v1::Topology topology,
                                    const std::string& db) {
  FakeClock clock;
  std::unique_ptr<coordinator::Store> store;
  if (!db.empty()) {
    for (const char* suffix : {"", "-wal", "-shm"})
      std::remove((db + suffix).c_str());
    auto opened = coordinator::Store::Open(db);
    if (!opened.ok()) return opened.status();
    store = std::move(*opened);
  }
  coordinator::CoordinatorOptions options;
  options.lease = absl::Hours(1);
  auto created = Coordinator::Create(options, std::move(store), &clock);
  if (!created.ok()) return created.status();
  Coordinator& c = **created;

  std::vector<uint64_t> ids;
  for (int i = 0; i < n; ++i) {
    v1::RegisterWorkerRequest req;
    req.mutable_info()->set_address(absl::StrCat("10.", i / 65536, ".",
                                                 (i / 256) % 256, ".", i % 256,
                                                 ":7000"));
    req.mutable_info()->set_cores(8);
    auto r = c.RegisterWorker(req);
    if (!r.ok()) return r.status();
    ids.push_back(r->worker_id());
  }
  v1::JobSpec spec;
  spec.set_name("plan-bench");
  spec.mutable_data()->set_corpus_path("/dev/null");
  spec.mutable_stop()->set_max_rounds(1000000);
  spec.set_min_workers(static_cast<uint32_t>(n));
  spec.mutable_outer()->set_topology(topology);
  auto job = c.StartJob(spec);
  if (!job.ok()) return job.status();
  const uint64_t job_id = job->job_id();

  // Round 0 for everyone, then heterogeneous measurements so the budget
  // planner has real work: speeds 1x..4x, links 25..100 MB/s.
  const double model_bytes =
      coordinator::ExchangeBytes(job->spec(), static_cast<uint32_t>(n));
  for (int i = 0; i < n; ++i) {
    v1::GetAssignmentRequest ask;
    ask.set_worker_id(ids[i]);
    ask.set_after_round(-1);
    ask.set_wait_ms(1);
    auto a = c.GetAssignment(ask);
    if (!a.ok() || a->kind() != v1::ASSIGNMENT_KIND_ROUND)
      return absl::InternalError(absl::StrCat("worker ", ids[i], " got no round 0"));
    v1::ReportRoundRequest rep;
    rep.set_worker_id(ids[i]);
    rep.set_job_id(job_id);
    rep.set_round(0);
    rep.set_inner_steps(100);
    rep.set_compute_seconds(10.0 * (1 + (i % 4)) / 4);
    rep.set_bytes_sent(static_cast<uint64_t>(model_bytes));
    rep.set_exchange_seconds(model_bytes / (25e6 * (1 + (i % 4))));
    rep.set_wire_seconds(rep.exchange_seconds());
    rep.set_train_loss(2.5f);
    auto s = c.ReportRound(rep);
    if (!s.ok()) return s;
  }

  // Each timed call plans the next round (worker 0 reached the boundary).
  std::vector<double> ms;
  for (int r = 0; r < rounds; ++r) {
    v1::GetAssignmentRequest ask;
    ask.set_worker_id(ids[0]);
    ask.set_job_id(job_id);
    ask.set_after_round(r);
    ask.set_wait_ms(1);
    const absl::Time t0 = absl::Now();
    auto a = c.GetAssignment(ask);
    const absl::Duration took = absl::Now() - t0;
    if (!a.ok()) return a.status();
    if (a->round() != static_cast<uint64_t>(r + 1))
      return absl::InternalError(absl::StrCat("expected round ", r + 1));
    ms.push_back(absl::ToDoubleMilliseconds(took));
  }

  // The pure functions alone.
  std::vector<coordinator::WorkerRates> rates(n);
  for (int i = 0; i < n; ++i)
    rates[i] = {.steps_per_second = 10.0 * (1 + (i % 4)) / 4,
                .bytes_per_second = 25e6 * (1 + (i % 4))};
  coordinator::BudgetOptions bo;
  bo.nominal_steps = 100;
  bo.min_steps = 10;
  bo.exchange_bytes = model_bytes;
  std::vector<double> pure;
  for (int r = 0; r < rounds; ++r) {
    const absl::Time t0 = absl::Now();
    coordinator::ScheduleKey key;
    key.seed = 1;
    key.round = static_cast<uint64_t>(r);
    key.epoch = 1;
    key.topology = topology;
    auto schedule = coordinator::PlanSchedule(key, static_cast<uint32_t>(n));
    auto plan = coordinator::PlanBudgets(rates, bo);
    pure.push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
    if (schedule.n != static_cast<uint32_t>(n) ||
        plan.budgets.size() != static_cast<size_t>(n))
      return absl::InternalError("bad plan size");
  }
  PlanResult result;
  result.workers = n;
  result.median_ms = Median(ms);
  result.max_ms = *std::max_element(ms.begin(), ms.end());
  result.pure_median_ms = Median(pure);
  return result;
}

int RunPlanBench(int argc, char** argv) {
  std::vector<int> counts = {1000, 10000};
  int rounds = 50;
  std::string topology_name = "one_peer";
  std::string db;
  std::string workers;
  constexpr char kUsage[] =
      "Usage: gasloc-bench plan [--workers=1000,10000] [--rounds=50] "
      "[--topology=one_peer|two_peer|ring|complete] [--db=FILE]\n";
  BenchFlags flags;
  flags.strings = {{"workers", &workers}, {"topology", &topology_name},
                   {"db", &db}};
  flags.ints = {{"rounds", &rounds}};
  if (!ParseBenchFlags(argc, argv, "gasloc-bench plan", kUsage, flags)) {
    return 2;
  }
  if (rounds < 1) {
    std::fprintf(stderr, "gasloc-bench plan: --rounds must be >= 1\n");
    return 2;
  }
  if (!workers.empty()) {
    counts.clear();
    for (absl::string_view part : absl::StrSplit(workers, ',')) {
      int n;
      if (!absl::SimpleAtoi(part, &n) || n < 1 || n > 100000) {
        std::fprintf(stderr, "gasloc-bench plan: --workers entries must be in "
                             "[1, 100000], got '%s'\n",
                     std::string(part).c_str());
        return 2;
      }
      counts.push_back(n);
    }
  }
  v1::Topology topology;
  if (topology_name == "one_peer") {
    topology = v1::TOPOLOGY_RANDOM_ONE_PEER;
  } else if (topology_name == "two_peer") {
    topology = v1::TOPOLOGY_RANDOM_TWO_PEER;
  } else if (topology_name == "ring") {
    topology = v1::TOPOLOGY_RING;
  } else if (topology_name == "complete") {
    topology = v1::TOPOLOGY_COMPLETE;
  } else {
    std::fprintf(stderr, "gasloc-bench plan: --topology must be one_peer, "
                         "two_peer, ring or complete, got '%s'\n",
                 topology_name.c_str());
    return 2;
  }
  SetMinLogLevel(LogLevel::kWARNING);

  std::vector<PlanResult> results;
  std::printf("plan one round: topology %s, %d rounds, %s\n",
              topology_name.c_str(), rounds,
              db.empty() ? "no persistence" : ("SQLite " + db).c_str());
  std::printf("%8s  %12s  %10s  %16s  %14s\n", "workers", "median_ms",
              "max_ms", "pure_median_ms", "x_first_count");
  for (int n : counts) {
    auto r = BenchOne(n, rounds, topology, db);
    if (!r.ok()) {
      std::fprintf(stderr, "gasloc-bench plan: %d workers: %s\n", n,
                   std::string(r.status().message()).c_str());
      return 1;
    }
    results.push_back(*r);
    std::printf("%8d  %12.3f  %10.3f  %16.3f  %14.2f\n", r->workers,
                r->median_ms, r->max_ms, r->pure_median_ms,
                r->median_ms / results.front().median_ms);
    std::fflush(stdout);
  }
  std::vector<std::string> json;
  for (const PlanResult& r : results)
    json.push_back(absl::StrCat("{\"workers\":", r.workers, ",\"median_ms\":",
                                r.median_ms, ",\"max_ms\":", r.max_ms,
                                ",\"pure_median_ms\":", r.pure_median_ms, "}"));
  std::printf("{\"bench\":\"plan\",\"topology\":\"%s\",\"rounds\":%d,"
              "\"persist\":%s,\"results\":[%s]}\n",
              topology_name.c_str(), rounds, db.empty() ? "false" : "true",
              absl::StrJoin(json, ",").c_str());
  return 0;
}

}  // namespace
}  // namespace gasloc::bench

GASLOC_BENCH_COMMAND(plan, "plan one round for 1,000 and 10,000 workers",
                     gasloc::bench::RunPlanBench);
