#include "server/credentials.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gasloc {
namespace {

absl::StatusOr<std::string> ReadPem(const std::string& path,
                                    absl::string_view what) {
  std::ifstream in(path);
  if (!in)
    return absl::InvalidArgumentError(
        absl::StrCat(what, " file ", path, " cannot be read"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const CredentialsOptions& options) {
  if (options.tls_cert_file.empty() && options.tls_key_file.empty())
    return grpc::InsecureServerCredentials();
  if (options.tls_cert_file.empty() || options.tls_key_file.empty())
    return absl::InvalidArgumentError(
        "TLS needs both --tls_cert and --tls_key");
  grpc::SslServerCredentialsOptions ssl;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  ASSIGN_OR_RETURN(pair.cert_chain, ReadPem(options.tls_cert_file, "--tls_cert"));
  ASSIGN_OR_RETURN(pair.private_key, ReadPem(options.tls_key_file, "--tls_key"));
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  if (!options.tls_ca_file.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem(options.tls_ca_file, "--tls_ca"));
  }
  return grpc::SslServerCredentials(ssl);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>>
MakeChannelCredentials(const CredentialsOptions& options) {
  if (options.tls_ca_file.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem(options.tls_ca_file, "--tls_ca"));
  if (!options.tls_cert_file.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadPem(options.tls_cert_file, "--tls_cert"));
    ASSIGN_OR_RETURN(ssl.pem_private_key, ReadPem(options.tls_key_file, "--tls_key"));
  }
  return grpc::SslCredentials(ssl);
}

}  // namespace gasloc
