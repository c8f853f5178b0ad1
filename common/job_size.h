// How much a job asks of a worker, and whether a worker can give it: the
// memory a job's replica needs (parameters, gradients, AdamW moments, the
// outer optimizer's buffers, receive scratch, activations), checked against
// what the worker measured at start and reported at registration
// (WorkerInfo.memory_bytes, .cores). The coordinator refuses a job no
// registered worker can hold; a worker refuses one it cannot hold before
// allocating anything, so an oversized spec is an error naming the fields,
// never std::bad_alloc.
//
// Pure functions; thread-safe.
#ifndef GASLOC_COMMON_JOB_SIZE_H_
#define GASLOC_COMMON_JOB_SIZE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "gasloc/v1/coordinator.pb.h"
#include "gasloc/v1/job.pb.h"

namespace gasloc {

// Bytes one replica of `spec` (defaults applied by the caller or not)
// needs: 10 model-sized fp32 arrays (parameters, gradients, AdamW m and v,
// the outer optimizer's y_{t-1}, momentum and three receive buffers, one
// spare) plus the activations of one batch (see docs/operations.md,
// "Limits"). Saturates at UINT64_MAX instead of wrapping.
uint64_t EstimateJobMemoryBytes(const v1::JobSpec& spec);

// OK if a worker that reported `info` can run `spec`: the estimate is at
// most `fraction` of info.memory_bytes (0 = not reported: not checked), and
// training.threads (0 = all cores) at most info.cores (0 = not reported).
// INVALID_ARGUMENT naming the fields otherwise.
absl::Status CheckJobFitsWorker(const v1::JobSpec& spec,
                                const v1::WorkerInfo& info,
                                double fraction = 0.8);

}  // namespace gasloc

#endif  // GASLOC_COMMON_JOB_SIZE_H_
