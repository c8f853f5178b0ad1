// Calls the standard gRPC health service (grpc.health.v1.Health/Check) of a
// server through a generic stub, the same RPC grpc_health_probe sends.
#ifndef GASLOC_TESTS_SUPPORT_HEALTH_CHECK_H_
#define GASLOC_TESTS_SUPPORT_HEALTH_CHECK_H_

#include <string>

#include "absl/status/statusor.h"

namespace gasloc::testing {

// Returns the ServingStatus enum value (1 = SERVING, 2 = NOT_SERVING) of
// service "" at `address`, or the RPC's error.
absl::StatusOr<int> CheckHealth(const std::string& address);

}  // namespace gasloc::testing

#endif  // GASLOC_TESTS_SUPPORT_HEALTH_CHECK_H_
