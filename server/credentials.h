// Transport security and client credentials for every gRPC server and
// channel gasloc opens. A process runs in one of three ways, and must say
// which (docs/security.md):
//   - TLS: a certificate and key make the server speak TLS; a CA file
//     makes clients verify servers with that root and, on a server, makes
//     it require and verify client certificates (mutual TLS);
//   - bearer tokens over plaintext (TLS terminated elsewhere): a client's
//     token_file holds the token it sends on every call; a server checks
//     tokens through server/auth.h (tokens_checked);
//   - insecure: plaintext without authentication, only when asked for.
// Anything else is refused with a message naming the flags to give.
//
// Thread safety: pure functions.
#ifndef GASLOC_SERVER_CREDENTIALS_H_
#define GASLOC_SERVER_CREDENTIALS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/support/channel_arguments.h"

namespace gasloc {

struct CredentialsOptions {
  // PEM files. Server TLS needs cert + key (ca: require and verify client
  // certificates signed by it); client TLS needs ca (the root that signed
  // the servers' certificates), cert + key = the client certificate.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_ca_file;
  // Client: a token file (server/auth.h format) whose first token is sent
  // as "authorization: Bearer <token>" on every call.
  std::string token_file;
  // Server: bearer tokens are checked, so plaintext is acceptable.
  bool tokens_checked = false;
  // Plaintext without credentials was asked for (--insecure).
  bool insecure = false;
};

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const CredentialsOptions& options);

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const CredentialsOptions& options);

// A channel to `address` with MakeChannelCredentials(options) that adds the
// bearer token of options.token_file (if any) to every call.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const std::string& address, const CredentialsOptions& options,
    const grpc::ChannelArguments& args = {});

// The first token of a token file (server/auth.h format).
absl::StatusOr<std::string> LoadOwnToken(const std::string& path);

}  // namespace gasloc

#endif  // GASLOC_SERVER_CREDENTIALS_H_
