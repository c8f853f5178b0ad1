#include "worker/round/worker_metrics.h"

#include "absl/strings/match.h"
#include "absl/time/clock.h"

namespace gasloc {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

prometheus::Histogram::BucketBoundaries SecondsBuckets() {
  return {0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30, 100, 300};
}

std::string FailureReason(const std::string& text) {
  if (absl::StrContains(text, "DEADLINE_EXCEEDED")) return "deadline";
  if (absl::StrContains(text, "UNAVAILABLE")) return "unavailable";
  if (absl::StrContains(text, "INVALID_ARGUMENT")) return "invalid";
  if (absl::StrContains(text, "FAILED_PRECONDITION")) return "rejected";
  return "other";
}

}  // namespace

WorkerMetrics::WorkerMetrics(prometheus::Registry& registry)
    : inner_steps_(BuildCounter()
                       .Name("gasloc_worker_inner_steps_total")
                       .Help("Inner optimizer steps run")
                       .Register(registry)
                       .Add({})),
      tokens_(BuildCounter()
                  .Name("gasloc_worker_tokens_total")
                  .Help("Training tokens (bytes) consumed")
                  .Register(registry)
                  .Add({})),
      rounds_(BuildCounter()
                  .Name("gasloc_worker_outer_rounds_total")
                  .Help("Outer rounds completed")
                  .Register(registry)
                  .Add({})),
      bytes_sent_(BuildCounter()
                      .Name("gasloc_worker_peer_sent_bytes_total")
                      .Help("Payload bytes sent to peers")
                      .Register(registry)
                      .Add({})),
      bytes_received_(BuildCounter()
                          .Name("gasloc_worker_peer_received_bytes_total")
                          .Help("Payload bytes received from peers")
                          .Register(registry)
                          .Add({})),
      wait_seconds_(BuildCounter()
                        .Name("gasloc_worker_peer_wait_seconds_total")
                        .Help("Time spent waiting for peers in exchanges")
                        .Register(registry)
                        .Add({})),
      exchange_failures_(BuildCounter()
                             .Name("gasloc_worker_exchange_failures_total")
                             .Help("Peers dropped from a round, by reason")
                             .Register(registry)),
      round_errors_(BuildCounter()
                        .Name("gasloc_worker_round_errors_total")
                        .Help("Rounds that could not run, by reason")
                        .Register(registry)),
      train_loss_(BuildGauge()
                      .Name("gasloc_worker_train_loss")
                      .Help("Mean training loss of the last round, nats/byte")
                      .Register(registry)
                      .Add({})),
      val_bpb_(BuildGauge()
                   .Name("gasloc_worker_validation_bits_per_byte")
                   .Help("Latest validation bits per byte")
                   .Register(registry)
                   .Add({})),
      tokens_per_second_(BuildGauge()
                             .Name("gasloc_worker_tokens_per_second")
                             .Help("Training throughput, tokens per second")
                             .Register(registry)
                             .Add({})),
      local_steps_(BuildGauge()
                       .Name("gasloc_worker_local_steps")
                       .Help("Local-step budget H_i of the last round")
                       .Register(registry)
                       .Add({})),
      peer_distance_(BuildGauge()
                         .Name("gasloc_worker_peer_distance")
                         .Help("L2 distance to the last peer's parameters "
                               "before averaging")
                         .Register(registry)
                         .Add({})),
      checkpoint_seconds_(BuildGauge()
                              .Name("gasloc_worker_checkpoint_duration_seconds")
                              .Help("Duration of the last checkpoint write")
                              .Register(registry)
                              .Add({})),
      checkpoint_time_(BuildGauge()
                           .Name("gasloc_worker_last_checkpoint_timestamp_seconds")
                           .Help("Unix time of the last checkpoint")
                           .Register(registry)
                           .Add({})),
      exchange_duration_(BuildHistogram()
                             .Name("gasloc_worker_exchange_duration_seconds")
                             .Help("Duration of a round's exchange")
                             .Register(registry)
                             .Add({}, SecondsBuckets())),
      compute_duration_(BuildHistogram()
                            .Name("gasloc_worker_inner_phase_duration_seconds")
                            .Help("Duration of a round's inner steps")
                            .Register(registry)
                            .Add({}, SecondsBuckets())) {}

void WorkerMetrics::RecordRound(const v1::ReportRoundRequest& report,
                                uint32_t local_steps) {
  inner_steps_.Increment(report.inner_steps());
  tokens_.Increment(static_cast<double>(report.tokens()));
  rounds_.Increment();
  bytes_sent_.Increment(static_cast<double>(report.bytes_sent()));
  bytes_received_.Increment(static_cast<double>(report.bytes_received()));
  wait_seconds_.Increment(report.wait_seconds());
  train_loss_.Set(report.train_loss());
  if (report.val_bpb() > 0) val_bpb_.Set(report.val_bpb());
  local_steps_.Set(local_steps);
  if (report.peer_distance() > 0) peer_distance_.Set(report.peer_distance());
  exchange_duration_.Observe(report.exchange_seconds());
  compute_duration_.Observe(report.compute_seconds());
  if (report.failed_peers_size() > 0)
    exchange_failures_.Add({{"reason", FailureReason(report.failure_reason())}})
        .Increment(report.failed_peers_size());
}

void WorkerMetrics::RecordRoundError(const std::string& reason) {
  round_errors_.Add({{"reason", reason}}).Increment();
}

void WorkerMetrics::SetTokensPerSecond(double value) {
  tokens_per_second_.Set(value);
}

void WorkerMetrics::RecordCheckpoint(double seconds) {
  checkpoint_seconds_.Set(seconds);
  checkpoint_time_.Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
}

}  // namespace gasloc
