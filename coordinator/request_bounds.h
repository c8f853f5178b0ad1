// Bounds on every field of the Coordinator service's requests that a
// caller could use to exhaust memory, wrap a counter or poison a job: the
// lengths of strings and repeated fields, and the numeric ranges of what a
// worker reports (a token count near 2^64, compute_seconds = 5e-324, a NaN
// loss). One overload per request (GetAssignment checks its own two
// numbers); each returns INVALID_ARGUMENT naming the
// field, the limit and what was sent (docs/operations.md, "Limits"). The
// JobSpec of StartJob is bounded by ValidateJobSpec (common/job_spec.h).
//
// Pure functions; thread-safe.
#ifndef GASLOC_COORDINATOR_REQUEST_BOUNDS_H_
#define GASLOC_COORDINATOR_REQUEST_BOUNDS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "gasloc/v1/coordinator.pb.h"

namespace gasloc::coordinator {

// WorkerInfo.address (host:port), .hostname.
inline constexpr size_t kMaxAddressBytes = 256;
// WorkerInfo.software_version.
inline constexpr size_t kMaxVersionBytes = 128;
// Free-text reasons (LeaveWorker, StopJob, ReportRound.failure_reason,
// .error).
inline constexpr size_t kMaxReasonBytes = 4096;
// ReportRoundRequest.failed_peers, .refused_peers.
inline constexpr int kMaxFailedPeers = 1024;
// Inner steps of one round (OuterSpec.local_steps is at most 1e6).
inline constexpr uint32_t kMaxInnerSteps = 1000000;
// Tokens of one report / one progress (2^40: 10^12 tokens a round; the
// job's total adds saturating, so it never wraps either).
inline constexpr uint64_t kMaxReportTokens = uint64_t{1} << 40;
// Bytes one round sends or receives (2^48 = 256 TiB).
inline constexpr uint64_t kMaxReportBytes = uint64_t{1} << 48;
// A round's seconds (compute, exchange, wait): at most 10^7 (115 days).
inline constexpr double kMaxReportSeconds = 1e7;
// The fastest step rate a report may imply (inner_steps / compute_seconds):
// far above any real trainer, and above the test doubles that do no work
// (about 10^6 steps/s measured), so only a nonsense rate is refused; the
// step-rate estimate itself moves at most 1.5x per report.
inline constexpr double kMaxStepsPerSecond = 1e9;

absl::Status CheckRequestBounds(const v1::RegisterWorkerRequest& request);
absl::Status CheckRequestBounds(const v1::HeartbeatRequest& request);
absl::Status CheckRequestBounds(const v1::LeaveWorkerRequest& request);
absl::Status CheckRequestBounds(const v1::StopJobRequest& request);
// The reason's length, and that it is UTF-8 (it goes into the job's
// message and events, proto3 strings that must hold UTF-8 to be sent).
absl::Status CheckRequestBounds(const v1::ResumeJobRequest& request);
// Also: train_loss, val_bpb and peer_distance finite and >= 0 (an honest
// worker whose loss is not finite reports ROUND_OUTCOME_FAILED instead:
// worker/train/trainer.cc), compute_seconds giving at most
// kMaxStepsPerSecond.
absl::Status CheckRequestBounds(const v1::ReportRoundRequest& request);

// a + b, saturating at UINT64_MAX (a job's token total).
uint64_t SaturatingAdd(uint64_t a, uint64_t b);

}  // namespace gasloc::coordinator

#endif  // GASLOC_COORDINATOR_REQUEST_BOUNDS_H_
