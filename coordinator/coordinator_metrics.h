// The coordinator's Prometheus metrics (names, types, units and labels in
// docs/metrics.md; tests/server/metrics_doc_test.cc keeps them in step).
//
// Two kinds, both created in main() and injected:
// - CoordinatorMetrics: counters and a histogram moved where the event
//   happens (joins, leaves, rounds planned, planning time, budget changes,
//   RPCs). Coordinator calls them under its own lock once the call's
//   transaction has committed (a rolled-back change counts nothing); the
//   gRPC service calls RecordRpc.
// - CoordinatorGauges(): a scrape-time collectable that reads the state
//   (live workers, jobs by state, epochs, heartbeat ages) from
//   Coordinator::GaugeState() when /metrics is scraped, so nothing has to
//   be kept in step with every state change and a dead worker's series
//   simply disappears.
// coordinator/ depends on prometheus-cpp core (no HTTP, no gRPC); the
// endpoint lives in server/.
//
// Thread safety: every method is thread-safe (prometheus-cpp metrics are;
// the per-method RPC counters are created in the constructor and only read
// afterwards).
#ifndef GASLOC_COORDINATOR_COORDINATOR_METRICS_H_
#define GASLOC_COORDINATOR_COORDINATOR_METRICS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "coordinator/budget.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace gasloc::coordinator {

class Coordinator;

// The `reason` label of a budget change: no_measurement, uniform,
// adaptive, min_clamp (adaptive, clamped up to H_min), nominal_clamp
// (adaptive, clamped down to the nominal H).
const char* BudgetChangeReason(const Budget& budget);

class CoordinatorMetrics {
 public:
  // The methods of the Coordinator service (the `method` label).
  static constexpr const char* kRpcMethods[] = {
      "RegisterWorker", "Heartbeat", "LeaveWorker",   "ListWorkers",
      "StartJob",       "GetJob",    "ListJobs",      "StopJob",
      "WatchJob",       "GetAssignment", "ReportRound", "ResumeJob"};

  explicit CoordinatorMetrics(prometheus::Registry& registry);
  CoordinatorMetrics(const CoordinatorMetrics&) = delete;
  CoordinatorMetrics& operator=(const CoordinatorMetrics&) = delete;

  // reason: "registered" or "restored" (alive in the database at start).
  void RecordWorkerJoin(const char* reason);
  // reason: "left" (LeaveWorker) or "lease_expired".
  void RecordWorkerLeave(const char* reason);
  // kind: "setup" (a worker could not set up its job) or "round" (a round
  // failed after the set-up), as reported in ReportRound.outcome.
  void RecordWorkerFailure(const char* kind);
  // Replicas of an all-reduce round found apart from the majority, by
  // reason: "checksum" (another replica checksum) or "behind" (its round
  // did not complete and it could not re-synchronise).
  void RecordReplicaDivergence(const char* reason, uint64_t replicas);
  // A running job ended FAILED, by reason: "setup" (every member failed
  // its set-up), "round_failures" (members dropped for failing their
  // rounds left it below min_workers, or it stopped with no round
  // completed), "non_finite_loss", "no_live_worker".
  void RecordJobFailed(const char* reason);
  // A member dropped from its job for failing
  // max_consecutive_round_failures rounds in a row.
  void RecordMemberDropped();
  // A member held at the round boundary by its job's round lead bound
  // (outer.max_round_lead), once per member and round.
  void RecordRoundLeadHold();
  // A job became RUNNING: its series start (at 0); EndJob removes them.
  void BeginJob(uint64_t job_id);
  void EndJob(uint64_t job_id);
  void RecordRoundPlanned(uint64_t job_id, double planning_seconds);
  void RecordBudgetChange(uint64_t job_id, const Budget& budget);
  // One finished RPC of `method` (one of kRpcMethods) with `code`.
  void RecordRpc(absl::string_view method, absl::StatusCode code);

 private:
  prometheus::Family<prometheus::Counter>& joins_;
  prometheus::Family<prometheus::Counter>& leaves_;
  prometheus::Family<prometheus::Counter>& failures_;
  prometheus::Family<prometheus::Counter>& divergences_;
  prometheus::Family<prometheus::Counter>& jobs_failed_;
  prometheus::Counter& members_dropped_;
  prometheus::Counter& round_lead_holds_;
  prometheus::Family<prometheus::Counter>& rounds_planned_;
  prometheus::Family<prometheus::Counter>& budget_changes_;
  prometheus::Family<prometheus::Counter>& rpcs_;
  prometheus::Family<prometheus::Counter>& rpc_errors_;
  prometheus::Histogram& planning_duration_;
  std::map<std::string, prometheus::Counter*, std::less<>> rpc_counters_;
};

// Scrape-time gauges of `coordinator` (which must outlive the exposer's
// use of the returned collectable).
std::shared_ptr<prometheus::Collectable> CoordinatorGauges(
    Coordinator* coordinator);

}  // namespace gasloc::coordinator

#endif  // GASLOC_COORDINATOR_COORDINATOR_METRICS_H_
