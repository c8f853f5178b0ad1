#include "worker/round/poison_guard.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gasloc {

double PoisonGuard::median() const {
  if (recent_.empty()) return 0;
  std::vector<double> sorted(recent_.begin(), recent_.end());
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  return n % 2 == 1 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
}

absl::Status PoisonGuard::Check(double distance) const {
  if (ratio_ <= 0) return absl::OkStatus();
  if (!std::isfinite(distance))
    return absl::PermissionDeniedError(
        absl::StrCat("model refused (poisoning guard): distance ", distance,
                     " is not finite"));
  if (recent_.size() < kMinSamples) return absl::OkStatus();
  const double m = median();
  if (m <= 0 || distance <= ratio_ * m) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "model refused (poisoning guard): distance ", distance, " to this "
      "worker's model exceeds ", ratio_, " x the median ", m, " of the last ",
      recent_.size(), " accepted distances (exchange.poison_distance_ratio)"));
}

void PoisonGuard::Accept(double distance) {
  if (!std::isfinite(distance)) return;
  recent_.push_back(distance);
  while (recent_.size() > kWindow) recent_.pop_front();
}

}  // namespace gasloc
