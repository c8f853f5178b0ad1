// The worker daemon's Prometheus metrics (every name, type, unit and label
// is listed in docs/metrics.md, and tests/server/metrics_doc_test.cc keeps
// the two in step). Created in main() and injected; a null pointer means
// "no metrics".
//
// Every series carries the labels job_id and worker_id. BeginJob() creates
// the series of a new job and removes the previous job's, so a finished
// job's totals stay readable until the worker takes its next job. Per-step
// values (steps, tokens, step duration, running loss, tokens/s) move after
// every inner step, so a long round shows progress; round values (bytes,
// waiting, durations, distance, failures) move when the round ends.
//
// Thread safety: BeginJob and Record* are called from one thread (the
// daemon's round loop); they touch prometheus-cpp metrics, which are
// thread-safe against scrapes (atomics; a histogram takes its own short
// lock). The scrape-time checkpoint age reads state under ckpt_mu_.
#ifndef GASLOC_WORKER_ROUND_WORKER_METRICS_H_
#define GASLOC_WORKER_ROUND_WORKER_METRICS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/scrape_collectable.h"
#include "gasloc/v1/coordinator.pb.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace gasloc {

// The `reason` label of gasloc_worker_exchange_failures_total for a failed
// transfer's status code: deadline (timed out), unavailable, invalid
// (INVALID_ARGUMENT / DATA_LOSS: bad chunk, checksum, non-finite values),
// rejected (FAILED_PRECONDITION: wrong job, round or sender), poisoned
// (PERMISSION_DENIED: the model was refused by the poisoning guard, too
// far from this worker's), cancelled, other.
std::string ExchangeFailureReason(absl::StatusCode code);

class WorkerMetrics {
 public:
  // `clock` dates checkpoints and scrapes (the checkpoint age gauge);
  // nullptr = the real clock. It must outlive this object.
  explicit WorkerMetrics(prometheus::Registry& registry,
                         const Clock* clock = nullptr);
  WorkerMetrics(const WorkerMetrics&) = delete;
  WorkerMetrics& operator=(const WorkerMetrics&) = delete;

  // Scrape-time gauges (checkpoint age): expose beside the registry.
  std::shared_ptr<prometheus::Collectable> scrape_gauges() const {
    return scrape_gauges_;
  }

  // This worker starts running `job_id` as `worker_id`.
  void BeginJob(uint64_t job_id, uint64_t worker_id);
  // A round starts with budget H_i = `local_steps`.
  void RecordRoundStart(uint32_t local_steps);
  // One inner step: its wall time and tokens, the mean loss of the round's
  // steps so far, and the round's throughput so far.
  void RecordStep(double seconds, uint64_t tokens, double round_mean_loss,
                  double tokens_per_second);
  // A finished round (`report` as sent to the coordinator), its wall time,
  // and the status code of every peer dropped from it.
  void RecordRound(const v1::ReportRoundRequest& report, double round_seconds,
                   const std::vector<absl::StatusCode>& peer_failures);
  // A round that could not run (non-finite state, cancelled, ...).
  void RecordRoundError(absl::StatusCode code);
  // A checkpoint written in `seconds`.
  void RecordCheckpoint(double seconds);
  // What this process computes with (set once at start, no job labels):
  // oneDNN's ISA, the element loops' build, and "native" or "emulated"
  // bf16 (kernels::ComputeSummary says the same in the log).
  void RecordCompute(const std::string& onednn_isa,
                     const std::string& elementwise_isa,
                     const std::string& bf16);

 private:
  // The current job's series (owned by the families).
  struct JobSeries {
    prometheus::Labels labels;
    prometheus::Counter* inner_steps = nullptr;
    prometheus::Counter* tokens = nullptr;
    prometheus::Counter* rounds = nullptr;
    prometheus::Counter* bytes_sent = nullptr;
    prometheus::Counter* bytes_received = nullptr;
    prometheus::Counter* wait_seconds = nullptr;
    prometheus::Counter* wire_seconds = nullptr;
    std::map<std::string, prometheus::Counter*> exchange_failures;
    std::map<std::string, prometheus::Counter*> round_errors;
    prometheus::Gauge* train_loss = nullptr;
    prometheus::Gauge* val_bpb = nullptr;
    prometheus::Gauge* tokens_per_second = nullptr;
    prometheus::Gauge* local_steps = nullptr;
    prometheus::Gauge* peer_distance = nullptr;
    prometheus::Histogram* step_duration = nullptr;
    prometheus::Histogram* inner_phase_duration = nullptr;
    prometheus::Histogram* exchange_duration = nullptr;
    prometheus::Histogram* round_duration = nullptr;
    prometheus::Histogram* checkpoint_duration = nullptr;
  };
  void RemoveSeries(const JobSeries& series);
  std::vector<prometheus::MetricFamily> CollectScrapeGauges() const;

  prometheus::Family<prometheus::Counter>& inner_steps_;
  prometheus::Family<prometheus::Counter>& tokens_;
  prometheus::Family<prometheus::Counter>& rounds_;
  prometheus::Family<prometheus::Counter>& bytes_sent_;
  prometheus::Family<prometheus::Counter>& bytes_received_;
  prometheus::Family<prometheus::Counter>& wait_seconds_;
  prometheus::Family<prometheus::Counter>& wire_seconds_;
  prometheus::Family<prometheus::Counter>& exchange_failures_;
  prometheus::Family<prometheus::Counter>& round_errors_;
  prometheus::Family<prometheus::Gauge>& train_loss_;
  prometheus::Family<prometheus::Gauge>& val_bpb_;
  prometheus::Family<prometheus::Gauge>& tokens_per_second_;
  prometheus::Family<prometheus::Gauge>& local_steps_;
  prometheus::Family<prometheus::Gauge>& peer_distance_;
  prometheus::Family<prometheus::Gauge>& compute_info_;
  prometheus::Family<prometheus::Histogram>& step_duration_;
  prometheus::Family<prometheus::Histogram>& inner_phase_duration_;
  prometheus::Family<prometheus::Histogram>& exchange_duration_;
  prometheus::Family<prometheus::Histogram>& round_duration_;
  prometheus::Family<prometheus::Histogram>& checkpoint_duration_;
  std::shared_ptr<ScrapeCollectable> scrape_gauges_;
  const Clock* const clock_;

  std::unique_ptr<JobSeries> series_;  // null until the first job

  mutable absl::Mutex ckpt_mu_;
  prometheus::Labels ckpt_labels_ ABSL_GUARDED_BY(ckpt_mu_);
  absl::Time last_checkpoint_ ABSL_GUARDED_BY(ckpt_mu_) = absl::InfinitePast();
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_ROUND_WORKER_METRICS_H_
