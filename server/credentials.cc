#include "server/credentials.h"

#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/support/client_interceptor.h"
#include "server/auth.h"

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

// Adds "authorization: Bearer <token>" to the initial metadata of a call.
class BearerTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(const std::string* header)
      : header_(header) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA))
      methods->GetSendInitialMetadata()->insert({"authorization", *header_});
    methods->Proceed();
  }

 private:
  const std::string* header_;
};

class BearerTokenFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenFactory(const std::string& token)
      : header_(absl::StrCat("Bearer ", token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerTokenInterceptor(&header_);
  }

 private:
  const std::string header_;
};

constexpr absl::string_view kNoCredentials =
    "give --tls_cert/--tls_key/--tls_ca (mutual TLS) or the token files, or "
    "say --insecure to run without authentication (docs/security.md)";

}  // namespace

absl::StatusOr<std::string> LoadOwnToken(const std::string& path) {
  // The role is only used in messages; the client's file is its own.
  ASSIGN_OR_RETURN(std::vector<TokenGrant> grants,
                   LoadTokenFile(path, Role::kOperator));
  return grants.front().token;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const CredentialsOptions& options) {
  if (options.tls_cert_file.empty() && options.tls_key_file.empty()) {
    if (!options.tls_ca_file.empty())
      return absl::InvalidArgumentError(
          "--tls_ca on a server needs --tls_cert and --tls_key too");
    if (!options.insecure && !options.tokens_checked)
      return absl::InvalidArgumentError(
          absl::StrCat("server has no credentials: ", kNoCredentials));
    return grpc::InsecureServerCredentials();
  }
  if (options.tls_cert_file.empty() || options.tls_key_file.empty())
    return absl::InvalidArgumentError(
        "TLS needs both --tls_cert and --tls_key");
  grpc::SslServerCredentialsOptions ssl(
      options.tls_ca_file.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
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
  if (options.tls_ca_file.empty()) {
    if (!options.insecure && options.token_file.empty())
      return absl::InvalidArgumentError(
          absl::StrCat("client has no credentials: ", kNoCredentials));
    return grpc::InsecureChannelCredentials();
  }
  grpc::SslCredentialsOptions ssl;
  ASSIGN_OR_RETURN(ssl.pem_root_certs, ReadPem(options.tls_ca_file, "--tls_ca"));
  if (!options.tls_cert_file.empty()) {
    ASSIGN_OR_RETURN(ssl.pem_cert_chain, ReadPem(options.tls_cert_file, "--tls_cert"));
    ASSIGN_OR_RETURN(ssl.pem_private_key, ReadPem(options.tls_key_file, "--tls_key"));
  }
  return grpc::SslCredentials(ssl);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(
    const std::string& address, const CredentialsOptions& options,
    const grpc::ChannelArguments& args) {
  ASSIGN_OR_RETURN(auto credentials, MakeChannelCredentials(options));
  std::vector<std::unique_ptr<
      grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  if (!options.token_file.empty()) {
    ASSIGN_OR_RETURN(std::string token, LoadOwnToken(options.token_file));
    interceptors.push_back(std::make_unique<BearerTokenFactory>(token));
  }
  return grpc::experimental::CreateCustomChannelWithInterceptors(
      address, credentials, args, std::move(interceptors));
}

}  // namespace gasloc
