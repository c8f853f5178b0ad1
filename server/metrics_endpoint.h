// The daemons' Prometheus endpoint: GET /metrics on address:port (address
// from --metrics_address; default 0.0.0.0, every interface, as before:
// 127.0.0.1 keeps it to the machine), serving the given collectables (a
// registry, scrape-time gauges). Plain HTTP: bind it where only the
// scraper can reach it (docs/operations.md, "Limits").
//
// Thread safety: the returned Exposer serves from its own threads; the
// collectables must be thread-safe (prometheus-cpp's are).
#ifndef GASLOC_SERVER_METRICS_ENDPOINT_H_
#define GASLOC_SERVER_METRICS_ENDPOINT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"

namespace gasloc {

// Starts the endpoint on `port` (1-65535). The exposer keeps only weak
// references: the caller keeps every collectable alive while it serves. INVALID_ARGUMENT for a bad
// port; UNAVAILABLE when the port cannot be bound (in use).
// `address` is an IPv4 address or an IPv6 one (with or without brackets).
absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsEndpoint(
    int port,
    const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables,
    const std::string& address = "0.0.0.0");

}  // namespace gasloc

#endif  // GASLOC_SERVER_METRICS_ENDPOINT_H_
