#include "server/metrics_endpoint.h"

#include <exception>

#include "absl/strings/str_cat.h"

namespace gasloc {

absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsEndpoint(
    int port,
    const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables) {
  if (port < 1 || port > 65535)
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_port must be in [1, 65535], got ", port));
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    // CivetWeb throws when it cannot bind the port.
    exposer = std::make_unique<prometheus::Exposer>(
        absl::StrCat("0.0.0.0:", port));
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve /metrics on port ", port, ": ", e.what()));
  }
  for (const auto& collectable : collectables)
    exposer->RegisterCollectable(collectable);
  return exposer;
}

}  // namespace gasloc
