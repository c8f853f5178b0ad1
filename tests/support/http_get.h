// A minimal HTTP/1.0 GET over a loopback TCP socket, for tests that read a
// process's Prometheus /metrics page.
#ifndef GASLOC_TESTS_SUPPORT_HTTP_GET_H_
#define GASLOC_TESTS_SUPPORT_HTTP_GET_H_

#include <string>

#include "absl/status/statusor.h"

namespace gasloc::testing {

// Returns the response body of GET `path` on 127.0.0.1:`port`; a status
// other than 200 is an error whose message holds the status line and the
// start of the body.
absl::StatusOr<std::string> HttpGet(int port, const std::string& path);

}  // namespace gasloc::testing

#endif  // GASLOC_TESTS_SUPPORT_HTTP_GET_H_
