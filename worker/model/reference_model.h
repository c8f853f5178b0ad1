// A plain-loop reference of the whole model (docs/model.md) in double
// precision, composed of the reference kernels: the ground truth the oneDNN
// model is tested against, and small enough to check against central finite
// differences. Slow; for tests only.
//
// Thread safety: a pure function; reentrant.
#ifndef GASLOC_WORKER_MODEL_REFERENCE_MODEL_H_
#define GASLOC_WORKER_MODEL_REFERENCE_MODEL_H_

#include <cstdint>
#include <vector>

#include "common/arena.h"
#include "worker/model/model.h"

namespace gasloc::ref {

// params: the arena (layout MakeModelLayout(config)) as doubles, padding
// included. tokens: (batch, length + 1) as in Model::ForwardBackward.
// Returns the mean cross-entropy in nats; when grads != nullptr, resizes it
// to params.size() and writes d loss / d params (padding zero).
double ModelForwardBackward(const ModelConfig& config,
                            const std::vector<double>& params,
                            const uint8_t* tokens, int batch, int length,
                            std::vector<double>* grads);

}  // namespace gasloc::ref

#endif  // GASLOC_WORKER_MODEL_REFERENCE_MODEL_H_
