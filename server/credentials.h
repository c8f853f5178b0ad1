// Transport security for every gRPC server and channel gasloc opens.
// Default is plaintext (loopback and trusted cluster networks); giving a
// certificate and key switches the server to TLS, and giving a CA file
// switches clients to TLS with that root. One options struct serves both
// ends so a deployment sets it once per process.
//
// Thread safety: pure functions.
#ifndef GASLOC_SERVER_CREDENTIALS_H_
#define GASLOC_SERVER_CREDENTIALS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"

namespace gasloc {

struct CredentialsOptions {
  // PEM files. Server TLS needs cert + key; client TLS needs ca (the root
  // that signed the servers' certificates). All empty = plaintext.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_ca_file;
};

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const CredentialsOptions& options);

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const CredentialsOptions& options);

}  // namespace gasloc

#endif  // GASLOC_SERVER_CREDENTIALS_H_
