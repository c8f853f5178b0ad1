#include "server/metrics_endpoint.h"

#include <exception>

#include "absl/strings/str_cat.h"

namespace gasloc {

absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsEndpoint(
    int port,
    const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables,
    const std::string& address) {
  if (port < 1 || port > 65535)
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_port must be in [1, 65535], got ", port));
  if (address.empty() || address.size() > 64 ||
      address.find_first_of(", \t\n") != std::string::npos)
    return absl::InvalidArgumentError(absl::StrCat(
        "--metrics_address must be one IP address, got \"", address, "\""));
  const bool ipv6 = address.find(':') != std::string::npos &&
                    address.front() != '[';
  const std::string listen =
      absl::StrCat(ipv6 ? "[" : "", address, ipv6 ? "]" : "", ":", port);
  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    // CivetWeb throws when it cannot bind the address.
    exposer = std::make_unique<prometheus::Exposer>(listen);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "cannot serve /metrics on ", listen, ": ", e.what()));
  }
  for (const auto& collectable : collectables)
    exposer->RegisterCollectable(collectable);
  return exposer;
}

}  // namespace gasloc
