#include "worker/round/error_feedback.h"

#include <utility>

namespace gasloc {

ErrorFeedback::ErrorFeedback(const FloatArena& layout,
                             v1::WireEncoding encoding) {
  if (encoding == v1::WIRE_ENCODING_INT8)
    residual_ = std::make_unique<FloatArena>(layout.shared_layout());
}

std::span<float> ErrorFeedback::FoldInto(std::span<float> data) {
  if (!active()) return {};
  std::span<float> residual = residual_->flat();
  for (size_t i = 0; i < data.size(); ++i) data[i] += residual[i];
  return residual;
}

void ErrorFeedback::Reset() {
  if (active()) residual_->SetZero();
}

std::span<const float> ErrorFeedback::residual() const {
  if (!active()) return {};
  return std::as_const(*residual_).flat();
}

}  // namespace gasloc
