#include "common/job_size.h"

#include <cstdint>
#include <limits>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"

namespace gasloc {
namespace {

constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

// a * b, saturating.
uint64_t Mul(uint64_t a, uint64_t b) {
  if (a != 0 && b > kMax / a) return kMax;
  return a * b;
}

uint64_t Add(uint64_t a, uint64_t b) { return b > kMax - a ? kMax : a + b; }

std::string GiB(uint64_t bytes) {
  return absl::StrCat(static_cast<double>(bytes) / double{1 << 30}, " GiB");
}

}  // namespace

uint64_t EstimateJobMemoryBytes(const v1::JobSpec& raw) {
  const v1::JobSpec spec = ApplyJobSpecDefaults(raw);
  const v1::ModelSpec& m = spec.model();
  const uint64_t L = m.layers(), d = m.d_model(), T = m.context(),
                 H = m.heads(), B = spec.training().batch();
  // P = L(12d^2 + 13d) + d(2*256 + T + 2), saturating.
  const uint64_t per_layer = Add(Mul(12, Mul(d, d)), Mul(13, d));
  const uint64_t params =
      Add(Mul(L, per_layer), Mul(d, Add(2 * 256 + 2, T)));
  const uint64_t model_arrays = Mul(Mul(params, 4), 10);
  // Activations kept for the backward pass, per token: about 16 d per
  // layer, the attention probabilities (H x T per layer) and the logits.
  const uint64_t per_token =
      Add(Mul(L, Add(Mul(16, d), Mul(H, T))), 2 * 256);
  const uint64_t activations = Mul(Mul(Mul(B, T), per_token), 4);
  return Add(model_arrays, activations);
}

absl::Status CheckJobFitsWorker(const v1::JobSpec& raw,
                                const v1::WorkerInfo& info, double fraction) {
  const v1::JobSpec spec = ApplyJobSpecDefaults(raw);
  const uint64_t need = EstimateJobMemoryBytes(spec);
  const double can = fraction * static_cast<double>(info.memory_bytes());
  if (info.memory_bytes() != 0 && static_cast<double>(need) > can)
    return absl::InvalidArgumentError(absl::StrCat(
        "model.layers / model.d_model / model.context / training.batch: the "
        "job needs about ",
        GiB(need), " per worker (layers ", spec.model().layers(),
        ", d_model ", spec.model().d_model(), ", context ",
        spec.model().context(), ", batch ", spec.training().batch(),
        ") but the worker reports ", GiB(info.memory_bytes()),
        " of memory (at most ", fraction * 100, "% of it may be used)"));
  if (info.cores() != 0 && spec.training().threads() > info.cores())
    return absl::InvalidArgumentError(absl::StrCat(
        "training.threads must be at most the worker's ", info.cores(),
        " cores, got ", spec.training().threads()));
  return absl::OkStatus();
}

}  // namespace gasloc
