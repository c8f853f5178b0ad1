// JobSpec parsing, defaults and validation: the one place that decides
// whether a job description is acceptable (proto/gasloc/v1/job.proto gives
// every field's range and default). Used by the coordinator (StartJob), the
// CLI (before sending) and the workers (on receipt).
//
// Pure functions; thread-safe.
#ifndef GASLOC_COMMON_JOB_SPEC_H_
#define GASLOC_COMMON_JOB_SPEC_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gasloc/v1/job.pb.h"

namespace gasloc {

// Absolute caps of a job's size (ValidateJobSpec); docs/operations.md,
// "Limits", gives the reasons.
inline constexpr uint32_t kMaxLayers = 128;
inline constexpr uint32_t kMaxDModel = 4096;
inline constexpr uint32_t kMaxContext = 8192;
inline constexpr uint32_t kMaxBatch = 1024;
inline constexpr uint32_t kMaxThreads = 256;
// data.corpus_path, checkpoint.directory and model.init_from (PATH_MAX).
inline constexpr size_t kMaxPathBytes = 4096;
// max_consecutive_round_failures when unset (also for a job stored before
// the field existed).
inline constexpr uint32_t kDefaultMaxConsecutiveRoundFailures = 3;

// Returns `spec` with every unset field set to its documented default
// (defaults that depend on the algorithm use spec.outer.algorithm).
// Fields already set are kept as they are, even if out of range.
v1::JobSpec ApplyJobSpecDefaults(const v1::JobSpec& spec);

// The learning-rate schedule's horizon of `spec`, with UNSPECIFIED
// resolved (also for a spec stored before the field existed): ROUNDS when
// training.adamw.decay_steps > 0 or stop.max_rounds is the only stop limit
// set, else STOP (job.proto ScheduleHorizon).
v1::ScheduleHorizon ScheduleHorizonOf(const v1::JobSpec& spec);

// Checks every field of `spec` (after applying defaults) against its range.
// On failure returns INVALID_ARGUMENT whose message starts with the field's
// path, e.g. "outer.alpha must be in (0, 1], got 2".
absl::Status ValidateJobSpec(const v1::JobSpec& spec);

// Parses a JobSpec from JSON (if the text starts with '{') or protobuf text
// format. Unknown fields are an error naming them.
absl::StatusOr<v1::JobSpec> ParseJobSpec(absl::string_view text);

// The algorithm's gossip family: true for GASLOC and DPSGD (peer exchange),
// false for the all-reduce algorithms (DILOCO, LOCAL_SGD, DATA_PARALLEL).
bool IsGossipAlgorithm(v1::Algorithm algorithm);

// The most gossip peers a worker can have in one round of `topology`:
// 1 (RANDOM_ONE_PEER), 2 (RANDOM_TWO_PEER, RING); 0 for COMPLETE (its
// weights are 1/n, not checked against a degree).
uint32_t MaxGossipDegree(v1::Topology topology);

// Parameter count of the model (docs/model.md):
// P = L(12d^2 + 13d) + d(2*256 + T + 2).
uint64_t ModelParameterCount(const v1::ModelSpec& model);

}  // namespace gasloc

#endif  // GASLOC_COMMON_JOB_SPEC_H_
