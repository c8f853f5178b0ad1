#include "worker/round/worker_metrics.h"

#include "absl/strings/str_cat.h"

namespace gasloc {
namespace {

using CounterFamily = prometheus::Family<prometheus::Counter>;
using GaugeFamily_ = prometheus::Family<prometheus::Gauge>;
using HistogramFamily = prometheus::Family<prometheus::Histogram>;

constexpr const char* kFailureReasons[] = {
    "deadline", "unavailable", "invalid", "rejected",
    "poisoned", "cancelled",   "other"};

CounterFamily& Counter(prometheus::Registry& registry, const char* name,
                       const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry);
}

GaugeFamily_& Gauge(prometheus::Registry& registry, const char* name,
                    const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}

HistogramFamily& Histogram(prometheus::Registry& registry, const char* name,
                           const char* help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(registry);
}

// Phases and rounds: 10 ms to 50 minutes.
prometheus::Histogram::BucketBoundaries PhaseBuckets() {
  return {0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100, 300, 1000, 3000};
}

// One inner step: 1 ms to 30 s.
prometheus::Histogram::BucketBoundaries StepBuckets() {
  return {0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30};
}

prometheus::Labels With(prometheus::Labels labels, const char* name,
                        const std::string& value) {
  labels[name] = value;
  return labels;
}

}  // namespace

std::string ExchangeFailureReason(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kDeadlineExceeded:
      return "deadline";
    case absl::StatusCode::kUnavailable:
      return "unavailable";
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kDataLoss:
      return "invalid";
    case absl::StatusCode::kFailedPrecondition:
      return "rejected";
    case absl::StatusCode::kPermissionDenied:
      return "poisoned";
    case absl::StatusCode::kCancelled:
      return "cancelled";
    default:
      return "other";
  }
}

WorkerMetrics::WorkerMetrics(prometheus::Registry& registry,
                             const Clock* clock)
    : inner_steps_(Counter(registry, "gasloc_worker_inner_steps_total",
                           "Inner optimizer steps run")),
      tokens_(Counter(registry, "gasloc_worker_tokens_total",
                      "Training tokens (bytes) consumed")),
      rounds_(Counter(registry, "gasloc_worker_outer_rounds_total",
                      "Outer rounds completed")),
      bytes_sent_(Counter(registry, "gasloc_worker_peer_sent_bytes_total",
                          "Payload bytes sent to peers")),
      bytes_received_(Counter(registry,
                              "gasloc_worker_peer_received_bytes_total",
                              "Payload bytes received from peers")),
      wait_seconds_(Counter(registry, "gasloc_worker_peer_wait_seconds_total",
                            "Time spent waiting for peers in exchanges")),
      wire_seconds_(Counter(registry, "gasloc_worker_exchange_wire_seconds_total",
                            "Time the exchange's bytes were moving (wire time, "
                            "without the wait for peers)")),
      exchange_failures_(Counter(registry,
                                 "gasloc_worker_exchange_failures_total",
                                 "Peers dropped from a round, by reason")),
      round_errors_(Counter(registry, "gasloc_worker_round_errors_total",
                            "Rounds that could not run, by status code")),
      train_loss_(Gauge(registry, "gasloc_worker_train_loss",
                        "Mean training loss of the current round's steps so "
                        "far, nats per byte")),
      val_bpb_(Gauge(registry, "gasloc_worker_validation_bits_per_byte",
                     "Latest validation bits per byte")),
      tokens_per_second_(Gauge(registry, "gasloc_worker_tokens_per_second",
                               "Training throughput of the current round")),
      local_steps_(Gauge(registry, "gasloc_worker_local_steps",
                         "Local-step budget H_i of the current round")),
      peer_distance_(Gauge(registry, "gasloc_worker_peer_distance",
                           "RMS L2 distance to the round's used gossip peers' "
                           "iterates before averaging (neighbourhood "
                           "estimate of the consensus distance)")),
      compute_info_(Gauge(registry, "gasloc_worker_compute_info",
                          "1, labelled with what this worker computes with: "
                          "oneDNN ISA, element loops, bf16 native or "
                          "emulated")),
      step_duration_(Histogram(registry,
                               "gasloc_worker_inner_step_duration_seconds",
                               "Wall time of one inner step")),
      inner_phase_duration_(Histogram(
          registry, "gasloc_worker_inner_phase_duration_seconds",
          "Wall time of a round's inner steps")),
      exchange_duration_(Histogram(registry,
                                   "gasloc_worker_exchange_duration_seconds",
                                   "Wall time of a round's exchange")),
      round_duration_(Histogram(registry,
                                "gasloc_worker_round_duration_seconds",
                                "Wall time of a whole round")),
      checkpoint_duration_(Histogram(
          registry, "gasloc_worker_checkpoint_duration_seconds",
          "Wall time of a checkpoint write")),
      scrape_gauges_(std::make_shared<ScrapeCollectable>(
          [this] { return CollectScrapeGauges(); })),
      clock_(clock != nullptr ? clock : &RealClock::Get()) {}

void WorkerMetrics::RecordCompute(const std::string& onednn_isa,
                                  const std::string& elementwise_isa,
                                  const std::string& bf16) {
  compute_info_
      .Add({{"onednn_isa", onednn_isa},
            {"elementwise_isa", elementwise_isa},
            {"bf16", bf16}})
      .Set(1);
}

void WorkerMetrics::RemoveSeries(const JobSeries& s) {
  inner_steps_.Remove(s.inner_steps);
  tokens_.Remove(s.tokens);
  rounds_.Remove(s.rounds);
  bytes_sent_.Remove(s.bytes_sent);
  bytes_received_.Remove(s.bytes_received);
  wait_seconds_.Remove(s.wait_seconds);
  wire_seconds_.Remove(s.wire_seconds);
  for (const auto& [reason, counter] : s.exchange_failures)
    exchange_failures_.Remove(counter);
  for (const auto& [reason, counter] : s.round_errors)
    round_errors_.Remove(counter);
  train_loss_.Remove(s.train_loss);
  val_bpb_.Remove(s.val_bpb);
  tokens_per_second_.Remove(s.tokens_per_second);
  local_steps_.Remove(s.local_steps);
  peer_distance_.Remove(s.peer_distance);
  step_duration_.Remove(s.step_duration);
  inner_phase_duration_.Remove(s.inner_phase_duration);
  exchange_duration_.Remove(s.exchange_duration);
  round_duration_.Remove(s.round_duration);
  checkpoint_duration_.Remove(s.checkpoint_duration);
}

void WorkerMetrics::BeginJob(uint64_t job_id, uint64_t worker_id) {
  if (series_ != nullptr) RemoveSeries(*series_);
  auto s = std::make_unique<JobSeries>();
  s->labels = {{"job_id", absl::StrCat(job_id)},
               {"worker_id", absl::StrCat(worker_id)}};
  const prometheus::Labels& l = s->labels;
  s->inner_steps = &inner_steps_.Add(l);
  s->tokens = &tokens_.Add(l);
  s->rounds = &rounds_.Add(l);
  s->bytes_sent = &bytes_sent_.Add(l);
  s->bytes_received = &bytes_received_.Add(l);
  s->wait_seconds = &wait_seconds_.Add(l);
  s->wire_seconds = &wire_seconds_.Add(l);
  // Every reason from the start, so rate() and alerts see 0, not nothing.
  for (const char* reason : kFailureReasons)
    s->exchange_failures[reason] =
        &exchange_failures_.Add(With(l, "reason", reason));
  s->train_loss = &train_loss_.Add(l);
  s->val_bpb = &val_bpb_.Add(l);
  s->tokens_per_second = &tokens_per_second_.Add(l);
  s->local_steps = &local_steps_.Add(l);
  s->peer_distance = &peer_distance_.Add(l);
  s->step_duration = &step_duration_.Add(l, StepBuckets());
  s->inner_phase_duration = &inner_phase_duration_.Add(l, PhaseBuckets());
  s->exchange_duration = &exchange_duration_.Add(l, PhaseBuckets());
  s->round_duration = &round_duration_.Add(l, PhaseBuckets());
  s->checkpoint_duration = &checkpoint_duration_.Add(l, PhaseBuckets());
  {
    absl::MutexLock lock(&ckpt_mu_);
    ckpt_labels_ = l;
    last_checkpoint_ = absl::InfinitePast();
  }
  series_ = std::move(s);
}

void WorkerMetrics::RecordRoundStart(uint32_t local_steps) {
  if (series_ == nullptr) return;
  series_->local_steps->Set(local_steps);
}

void WorkerMetrics::RecordStep(double seconds, uint64_t tokens,
                               double round_mean_loss,
                               double tokens_per_second) {
  if (series_ == nullptr) return;
  series_->inner_steps->Increment();
  series_->tokens->Increment(static_cast<double>(tokens));
  series_->step_duration->Observe(seconds);
  series_->train_loss->Set(round_mean_loss);
  if (tokens_per_second > 0) series_->tokens_per_second->Set(tokens_per_second);
}

void WorkerMetrics::RecordRound(const v1::ReportRoundRequest& report,
                                double round_seconds,
                                const std::vector<absl::StatusCode>& failures) {
  if (series_ == nullptr) return;
  JobSeries& s = *series_;
  s.rounds->Increment();
  s.bytes_sent->Increment(static_cast<double>(report.bytes_sent()));
  s.bytes_received->Increment(static_cast<double>(report.bytes_received()));
  s.wait_seconds->Increment(report.wait_seconds());
  s.wire_seconds->Increment(report.wire_seconds());
  s.train_loss->Set(report.train_loss());
  if (report.val_bpb() > 0) s.val_bpb->Set(report.val_bpb());
  if (report.peer_distance() > 0) s.peer_distance->Set(report.peer_distance());
  s.inner_phase_duration->Observe(report.compute_seconds());
  s.exchange_duration->Observe(report.exchange_seconds());
  s.round_duration->Observe(round_seconds);
  for (absl::StatusCode code : failures)
    s.exchange_failures.at(ExchangeFailureReason(code))->Increment();
}

void WorkerMetrics::RecordRoundError(absl::StatusCode code) {
  if (series_ == nullptr) return;
  const std::string reason = absl::StatusCodeToString(code);
  auto it = series_->round_errors.find(reason);
  if (it == series_->round_errors.end())
    it = series_->round_errors
             .emplace(reason, &round_errors_.Add(
                                  With(series_->labels, "reason", reason)))
             .first;
  it->second->Increment();
}

void WorkerMetrics::RecordCheckpoint(double seconds) {
  if (series_ == nullptr) return;
  series_->checkpoint_duration->Observe(seconds);
  absl::MutexLock lock(&ckpt_mu_);
  last_checkpoint_ = clock_->Now();
}

std::vector<prometheus::MetricFamily> WorkerMetrics::CollectScrapeGauges()
    const {
  std::vector<GaugeSample> age;
  {
    absl::MutexLock lock(&ckpt_mu_);
    if (last_checkpoint_ != absl::InfinitePast()) {
      GaugeSample sample;
      sample.labels.assign(ckpt_labels_.begin(), ckpt_labels_.end());
      sample.value = absl::ToDoubleSeconds(clock_->Now() - last_checkpoint_);
      age.push_back(std::move(sample));
    }
  }
  std::vector<prometheus::MetricFamily> families;
  if (!age.empty())
    families.push_back(GaugeFamily("gasloc_worker_checkpoint_age_seconds",
                                   "Time since the job's last checkpoint",
                                   age));
  return families;
}

}  // namespace gasloc
