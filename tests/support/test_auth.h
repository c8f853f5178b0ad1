// Credentials for tests. Servers and clients refuse to run without
// credentials unless told --insecure (docs/security.md), so every test
// that starts one says which it wants here:
//   - in-process servers: InsecureAuthenticator() for the services and
//     InsecureCredentials() for ServerRunner, channels and transports;
//   - spawned daemons and gaslocctl: the --insecure argument;
//   - tests of authentication itself: MakeTestCerts (the CA and
//     certificates of scripts/make_test_certs.sh) and WriteTokenFile.
//
// Thread safety: InsecureAuthenticator returns one immutable object;
// the other functions are pure or touch only the files they are given.
#ifndef GASLOC_TESTS_SUPPORT_TEST_AUTH_H_
#define GASLOC_TESTS_SUPPORT_TEST_AUTH_H_

#include <string>

#include "absl/status/status.h"
#include "server/auth.h"
#include "server/credentials.h"
#include "server/peer_service.h"

namespace gasloc::testing {

// Every caller holds every role.
const Authenticator& InsecureAuthenticator();
// Plaintext, no credentials, said explicitly.
CredentialsOptions InsecureCredentials();
// The defaults with InsecureAuthenticator().
PeerServiceOptions InsecurePeerServiceOptions();

// Runs scripts/make_test_certs.sh DIR WORKERS (ca.pem, coordinator.pem,
// operator.pem, worker1.pem ... with their .key files).
absl::Status MakeTestCerts(const std::string& dir, int workers);

// Writes `contents` to DIR/NAME (a token file); returns its path.
std::string WriteTokenFile(const std::string& dir, const std::string& name,
                           const std::string& contents);

}  // namespace gasloc::testing

#endif  // GASLOC_TESTS_SUPPORT_TEST_AUTH_H_
