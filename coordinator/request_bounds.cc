#include "coordinator/request_bounds.h"

#include <cmath>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "common/utf8.h"

namespace gasloc::coordinator {
namespace {

absl::Status MaxBytes(absl::string_view field, absl::string_view value,
                      size_t limit) {
  if (value.size() <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, " must be at most ", limit, " bytes, got ", value.size()));
}

absl::Status AtMost(absl::string_view field, uint64_t value, uint64_t limit) {
  if (value <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, " must be at most ", limit, ", got ", value));
}

// Finite and in [0, hi].
absl::Status FiniteIn(absl::string_view field, double value, double hi) {
  if (std::isfinite(value) && value >= 0 && value <= hi)
    return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      field, " must be finite and in [0, ", hi, "], got ", value));
}

absl::Status CheckProgress(const v1::WorkerProgress& p) {
  constexpr double kHuge = std::numeric_limits<float>::max();
  RETURN_IF_ERROR(FiniteIn("progress.train_loss", p.train_loss(), kHuge));
  RETURN_IF_ERROR(FiniteIn("progress.val_bpb", p.val_bpb(), kHuge));
  RETURN_IF_ERROR(
      FiniteIn("progress.tokens_per_second", p.tokens_per_second(), kHuge));
  RETURN_IF_ERROR(
      FiniteIn("progress.steps_per_second", p.steps_per_second(), kHuge));
  RETURN_IF_ERROR(FiniteIn("progress.link_bytes_per_second",
                           p.link_bytes_per_second(), kHuge));
  RETURN_IF_ERROR(AtMost("progress.tokens", p.tokens(), uint64_t{1} << 56));
  return absl::OkStatus();
}

}  // namespace

uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return b > std::numeric_limits<uint64_t>::max() - a
             ? std::numeric_limits<uint64_t>::max()
             : a + b;
}

absl::Status CheckRequestBounds(const v1::RegisterWorkerRequest& request) {
  const v1::WorkerInfo& info = request.info();
  RETURN_IF_ERROR(MaxBytes("info.address", info.address(), kMaxAddressBytes));
  RETURN_IF_ERROR(
      MaxBytes("info.hostname", info.hostname(), kMaxAddressBytes));
  RETURN_IF_ERROR(MaxBytes("info.name", info.name(), kMaxAddressBytes));
  RETURN_IF_ERROR(MaxBytes("info.software_version", info.software_version(),
                           kMaxVersionBytes));
  RETURN_IF_ERROR(AtMost("info.metrics_port", info.metrics_port(), 65535));
  return absl::OkStatus();
}

absl::Status CheckRequestBounds(const v1::HeartbeatRequest& request) {
  RETURN_IF_ERROR(MaxBytes("name", request.name(), kMaxAddressBytes));
  return CheckProgress(request.progress());
}

absl::Status CheckRequestBounds(const v1::LeaveWorkerRequest& request) {
  return MaxBytes("reason", request.reason(), kMaxReasonBytes);
}

absl::Status CheckRequestBounds(const v1::StopJobRequest& request) {
  return MaxBytes("reason", request.reason(), kMaxReasonBytes);
}

absl::Status CheckRequestBounds(const v1::ResumeJobRequest& request) {
  RETURN_IF_ERROR(MaxBytes("reason", request.reason(), kMaxReasonBytes));
  if (std::optional<size_t> bad = FirstInvalidUtf8(request.reason()))
    return absl::InvalidArgumentError(absl::StrCat(
        "reason is not UTF-8 (byte ", *bad, ")"));
  return absl::OkStatus();
}

absl::Status CheckRequestBounds(const v1::ReportRoundRequest& request) {
  RETURN_IF_ERROR(MaxBytes("failure_reason", request.failure_reason(),
                           kMaxReasonBytes));
  RETURN_IF_ERROR(MaxBytes("error", request.error(), kMaxReasonBytes));
  if (request.failed_peers_size() > kMaxFailedPeers)
    return absl::InvalidArgumentError(
        absl::StrCat("failed_peers must list at most ", kMaxFailedPeers,
                     " workers, got ", request.failed_peers_size()));
  if (request.refused_peers_size() > kMaxFailedPeers)
    return absl::InvalidArgumentError(
        absl::StrCat("refused_peers must list at most ", kMaxFailedPeers,
                     " workers, got ", request.refused_peers_size()));
  RETURN_IF_ERROR(AtMost("inner_steps", request.inner_steps(), kMaxInnerSteps));
  RETURN_IF_ERROR(AtMost("tokens", request.tokens(), kMaxReportTokens));
  RETURN_IF_ERROR(AtMost("bytes_sent", request.bytes_sent(), kMaxReportBytes));
  RETURN_IF_ERROR(
      AtMost("bytes_received", request.bytes_received(), kMaxReportBytes));
  RETURN_IF_ERROR(FiniteIn("compute_seconds", request.compute_seconds(),
                           kMaxReportSeconds));
  RETURN_IF_ERROR(FiniteIn("exchange_seconds", request.exchange_seconds(),
                           kMaxReportSeconds));
  RETURN_IF_ERROR(
      FiniteIn("wait_seconds", request.wait_seconds(), kMaxReportSeconds));
  RETURN_IF_ERROR(FiniteIn("round_seconds", request.round_seconds(),
                           kMaxReportSeconds));
  // The overlapped steps and seconds are a part of inner_steps and
  // compute_seconds (coordinator.proto).
  RETURN_IF_ERROR(
      AtMost("overlap_steps", request.overlap_steps(), request.inner_steps()));
  RETURN_IF_ERROR(FiniteIn("overlap_compute_seconds",
                           request.overlap_compute_seconds(),
                           request.compute_seconds()));
  if (request.inner_steps() > 0 && request.compute_seconds() > 0 &&
      request.inner_steps() / request.compute_seconds() > kMaxStepsPerSecond)
    return absl::InvalidArgumentError(absl::StrCat(
        "compute_seconds ", request.compute_seconds(), " for ",
        request.inner_steps(), " inner_steps gives ",
        request.inner_steps() / request.compute_seconds(),
        " steps per second, over the limit of ", kMaxStepsPerSecond));
  // Failure reports carry no measurements worth checking beyond the above.
  if (request.outcome() == v1::ROUND_OUTCOME_SETUP_FAILED ||
      request.outcome() == v1::ROUND_OUTCOME_FAILED)
    return absl::OkStatus();
  constexpr double kHuge = std::numeric_limits<float>::max();
  RETURN_IF_ERROR(FiniteIn("train_loss", request.train_loss(), kHuge));
  RETURN_IF_ERROR(FiniteIn("val_bpb", request.val_bpb(), kHuge));
  RETURN_IF_ERROR(FiniteIn("peer_distance", request.peer_distance(), kHuge));
  return absl::OkStatus();
}

}  // namespace gasloc::coordinator
