#include "server/auth.h"

#include <fstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/log.h"
#include "grpcpp/security/auth_context.h"

namespace gasloc {
namespace {

constexpr size_t kMinTokenLength = 16;

// Compares without an early exit, so the time taken does not tell how
// many leading bytes of a guess were right.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kOperator: return "operator";
    case Role::kWorker: return "worker";
    case Role::kPeer: return "peer";
    case Role::kCoordinator: return "coordinator";
  }
  return "unknown";
}

absl::StatusOr<std::vector<TokenGrant>> LoadTokenFile(const std::string& path,
                                                      Role role) {
  std::ifstream in(path);
  if (!in)
    return absl::InvalidArgumentError(absl::StrCat(
        RoleName(role), " token file ", path, " cannot be read"));
  std::vector<TokenGrant> grants;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    const absl::string_view text = absl::StripAsciiWhitespace(line);
    if (text.empty() || text[0] == '#') continue;
    std::vector<absl::string_view> fields =
        absl::StrSplit(text, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() > 2)
      return absl::InvalidArgumentError(absl::StrCat(
          RoleName(role), " token file ", path, " line ", number,
          ": want \"<token> [worker-name]\", got ", fields.size(), " fields"));
    if (fields[0].size() < kMinTokenLength)
      return absl::InvalidArgumentError(absl::StrCat(
          RoleName(role), " token file ", path, " line ", number,
          ": token has ", fields[0].size(), " characters, fewer than ",
          kMinTokenLength));
    grants.push_back(TokenGrant{
        .token = std::string(fields[0]),
        .role = role,
        .worker_name = fields.size() == 2 ? std::string(fields[1]) : ""});
  }
  if (grants.empty())
    return absl::InvalidArgumentError(absl::StrCat(
        RoleName(role), " token file ", path, " holds no token"));
  return grants;
}

absl::Status CheckServerAuth(const CredentialsOptions& tls,
                             const AuthOptions& auth) {
  if (auth.insecure || auth.client_certificates || !auth.tokens.empty())
    return absl::OkStatus();
  if (!tls.tls_cert_file.empty())
    return absl::InvalidArgumentError(
        "TLS without --tls_ca authenticates no caller: give --tls_ca (mutual "
        "TLS) or token files, or say --insecure (docs/security.md)");
  return absl::InvalidArgumentError(
      "no credentials: give --tls_cert/--tls_key/--tls_ca (mutual TLS) or "
      "token files, or say --insecure to run without authentication "
      "(docs/security.md)");
}

absl::StatusOr<AuthOptions> LoadServerAuth(const CredentialsOptions& tls,
                                           const AuthFiles& files) {
  AuthOptions options{.insecure = tls.insecure,
                      .tokens = {},
                      .client_certificates = !tls.tls_ca_file.empty()};
  for (const auto& [path, role] :
       {std::pair{&files.operator_token_file, Role::kOperator},
        std::pair{&files.worker_token_file, Role::kWorker},
        std::pair{&files.peer_token_file, Role::kPeer},
        std::pair{&files.coordinator_token_file, Role::kCoordinator}}) {
    if (path->empty()) continue;
    absl::StatusOr<std::vector<TokenGrant>> grants = LoadTokenFile(*path, role);
    if (!grants.ok()) return grants.status();
    options.tokens.insert(options.tokens.end(), grants->begin(), grants->end());
  }
  if (absl::Status checked = CheckServerAuth(tls, options); !checked.ok())
    return checked;
  if (options.insecure)
    GASLOC_LOG(WARNING) << "--insecure: no authentication, every caller may "
                           "do everything";
  return options;
}

Caller CallerFromCertificateName(absl::string_view name) {
  Caller caller;
  caller.description = absl::StrCat("certificate ", name);
  if (name == "operator" || absl::StartsWith(name, "operator:")) {
    caller.roles = static_cast<uint32_t>(Role::kOperator);
  } else if (absl::StartsWith(name, "worker:") && name.size() > 7) {
    caller.roles =
        static_cast<uint32_t>(Role::kWorker) | static_cast<uint32_t>(Role::kPeer);
    caller.worker_name = std::string(name.substr(7));
  } else if (name == "coordinator") {
    caller.roles = static_cast<uint32_t>(Role::kCoordinator);
  }
  return caller;
}

Authenticator::Authenticator(AuthOptions options)
    : options_(std::move(options)) {}

absl::StatusOr<Caller> Authenticator::Identify(
    const grpc::ServerContext& context) const {
  if (options_.insecure)
    return Caller{.roles = static_cast<uint32_t>(Role::kOperator) |
                           static_cast<uint32_t>(Role::kWorker) |
                           static_cast<uint32_t>(Role::kPeer) |
                           static_cast<uint32_t>(Role::kCoordinator),
                  .worker_name = "",
                  .description = "--insecure caller"};
  // A verified client certificate whose name maps to a role.
  if (options_.client_certificates) {
    std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
    if (auth != nullptr && auth->IsPeerAuthenticated()) {
      for (const char* property :
           {"x509_common_name", "x509_subject_alternative_name"}) {
        for (const grpc::string_ref& value :
             auth->FindPropertyValues(property)) {
          Caller caller = CallerFromCertificateName(
              absl::string_view(value.data(), value.size()));
          if (caller.roles != 0) return caller;
        }
      }
    }
  }
  // A bearer token.
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end())
    return absl::UnauthenticatedError(
        "no credentials: present a client certificate or an "
        "\"authorization: Bearer <token>\" header");
  const absl::string_view header(it->second.data(), it->second.size());
  if (!absl::StartsWith(header, "Bearer "))
    return absl::UnauthenticatedError(
        "the authorization header is not \"Bearer <token>\"");
  const absl::string_view token = header.substr(7);
  const TokenGrant* match = nullptr;
  for (const TokenGrant& grant : options_.tokens)
    if (ConstantTimeEquals(grant.token, token)) match = &grant;
  if (match == nullptr)
    return absl::UnauthenticatedError("unknown bearer token");
  Caller caller{.roles = static_cast<uint32_t>(match->role),
                .worker_name = match->worker_name,
                .description = absl::StrCat(RoleName(match->role), " token")};
  if (!match->worker_name.empty())
    absl::StrAppend(&caller.description, " of worker ", match->worker_name);
  return caller;
}

absl::StatusOr<Caller> Authenticator::Authorize(
    const grpc::ServerContext& context, Role role,
    absl::string_view method) const {
  return Authorize(context, {role}, method);
}

absl::StatusOr<Caller> Authenticator::Authorize(
    const grpc::ServerContext& context, std::initializer_list<Role> roles,
    absl::string_view method) const {
  absl::StatusOr<Caller> caller = Identify(context);
  if (!caller.ok()) {
    GASLOC_LOG(WARNING) << method << " from " << context.peer()
                        << " refused: " << caller.status().message();
    return absl::UnauthenticatedError(
        absl::StrCat(method, ": ", caller.status().message()));
  }
  std::string names;
  for (Role role : roles) {
    if (caller->Has(role)) return caller;
    absl::StrAppend(&names, names.empty() ? "" : " or ", RoleName(role));
  }
  GASLOC_LOG(WARNING) << method << " from " << context.peer() << " ("
                      << caller->description << ") refused: needs the "
                      << names << " role";
  return absl::PermissionDeniedError(absl::StrCat(
      method, " needs the ", names, " role; ", caller->description,
      " does not hold it"));
}

}  // namespace gasloc
