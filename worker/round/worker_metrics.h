// The worker daemon's Prometheus metrics (names in docs/metrics.md):
// counters and gauges updated once per round from the round's report, and
// per-step progress. Created in main() and injected; a null pointer means
// "no metrics".
//
// Thread safety: prometheus-cpp metrics are thread-safe; Record* may be
// called from any thread.
#ifndef GASLOC_WORKER_ROUND_WORKER_METRICS_H_
#define GASLOC_WORKER_ROUND_WORKER_METRICS_H_

#include <memory>
#include <string>

#include "gasloc/v1/coordinator.pb.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace gasloc {

class WorkerMetrics {
 public:
  explicit WorkerMetrics(prometheus::Registry& registry);

  // One finished round: steps, tokens, loss, bpb, bytes, durations,
  // failed peers (by reason), budget.
  void RecordRound(const v1::ReportRoundRequest& report, uint32_t local_steps);
  // A round that could not run (non-finite state, cancelled, ...).
  void RecordRoundError(const std::string& reason);
  void SetTokensPerSecond(double value);
  void RecordCheckpoint(double seconds);

 private:
  prometheus::Counter& inner_steps_;
  prometheus::Counter& tokens_;
  prometheus::Counter& rounds_;
  prometheus::Counter& bytes_sent_;
  prometheus::Counter& bytes_received_;
  prometheus::Counter& wait_seconds_;
  prometheus::Family<prometheus::Counter>& exchange_failures_;
  prometheus::Family<prometheus::Counter>& round_errors_;
  prometheus::Gauge& train_loss_;
  prometheus::Gauge& val_bpb_;
  prometheus::Gauge& tokens_per_second_;
  prometheus::Gauge& local_steps_;
  prometheus::Gauge& peer_distance_;
  prometheus::Gauge& checkpoint_seconds_;
  prometheus::Gauge& checkpoint_time_;
  prometheus::Histogram& exchange_duration_;
  prometheus::Histogram& compute_duration_;
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_ROUND_WORKER_METRICS_H_
