// The daemons' Prometheus endpoint: GET /metrics on 0.0.0.0:port, serving
// the given collectables (a registry, scrape-time gauges).
//
// Thread safety: the returned Exposer serves from its own threads; the
// collectables must be thread-safe (prometheus-cpp's are).
#ifndef GASLOC_SERVER_METRICS_ENDPOINT_H_
#define GASLOC_SERVER_METRICS_ENDPOINT_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "prometheus/exposer.h"

namespace gasloc {

// Starts the endpoint on `port` (1-65535). The exposer keeps only weak
// references: the caller keeps every collectable alive while it serves. INVALID_ARGUMENT for a bad
// port; UNAVAILABLE when the port cannot be bound (in use).
absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsEndpoint(
    int port,
    const std::vector<std::shared_ptr<prometheus::Collectable>>& collectables);

}  // namespace gasloc

#endif  // GASLOC_SERVER_METRICS_ENDPOINT_H_
