// Who may call which RPC. Every handler of the Coordinator and Peer
// services starts with Authenticator::Authorize(context, role): the caller
// is identified by its verified client certificate (mutual TLS) or by a
// bearer token ("authorization: Bearer <token>" metadata), and must hold
// the role the RPC needs.
//
//   role       may call                                     identities
//   operator   StartJob StopJob ResumeJob GetJob ListJobs    CN "operator" or
//              WatchJob ListWorkers                         "operator:<name>"
//   worker     RegisterWorker Heartbeat LeaveWorker          CN "worker:<name>"
//              GetAssignment ReportRound
//   peer       Exchange FetchModel Ping                      CN "worker:<name>"
//   coordinator  FetchModel (relaying gaslocctl job export)  CN "coordinator"
//
// A "worker:<name>" certificate holds both worker and peer roles and is
// bound to <name>: the coordinator lets it act only for the worker ids it
// registered itself, and peers accept from it only chunks whose sender_id
// is the id the coordinator scheduled under that name (docs/security.md).
// Tokens come from files, one per role, one token per line, optionally
// followed by the worker name it is bound to ("<token> <name>"); a token
// without a name grants the role without binding (a shared Kubernetes
// Secret). No credential = UNAUTHENTICATED; a known caller without the
// role = PERMISSION_DENIED. With AuthOptions::insecure every caller holds
// every role (the --insecure flag; tests and trusted loopback only).
//
// Thread safety: immutable after construction; Authorize may be called
// from any number of threads.
#ifndef GASLOC_SERVER_AUTH_H_
#define GASLOC_SERVER_AUTH_H_

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/server_context.h"
#include "server/credentials.h"

namespace gasloc {

enum class Role : uint32_t {
  kOperator = 1u << 0,
  kWorker = 1u << 1,
  kPeer = 1u << 2,
  // The coordinator fetching a model from a worker for an export; reads
  // only (Peer.FetchModel), never writes a chunk.
  kCoordinator = 1u << 3,
};

// "operator", "worker", "peer", "coordinator".
absl::string_view RoleName(Role role);

// An authenticated caller.
struct Caller {
  // Bit set of Role values.
  uint32_t roles = 0;
  // The worker name the caller is bound to ("w1" of "worker:w1"); empty =
  // not bound (operator, shared role token, --insecure).
  std::string worker_name;
  // For logs and errors: "certificate worker:w1", "worker token (w1)", ...
  std::string description;

  bool Has(Role role) const { return (roles & static_cast<uint32_t>(role)) != 0; }
};

struct TokenGrant {
  std::string token;
  Role role = Role::kOperator;
  std::string worker_name;  // empty = unbound
};

struct AuthOptions {
  // Every caller holds every role (no check). Must be asked for explicitly.
  bool insecure = false;
  // Accepted bearer tokens.
  std::vector<TokenGrant> tokens;
  // Trust the identity of verified client certificates (the server was
  // given --tls_ca, so gRPC requires and verifies them).
  bool client_certificates = false;
};

// Reads a token file: one "<token> [worker-name]" per line; blank lines and
// lines starting with '#' are skipped. Tokens of fewer than 16 characters
// are refused (guessable). INVALID_ARGUMENT names the file and line.
absl::StatusOr<std::vector<TokenGrant>> LoadTokenFile(const std::string& path,
                                                      Role role);

// The identity a certificate name grants: "operator[:x]" -> operator,
// "worker:<name>" -> worker + peer bound to <name>, "coordinator" ->
// coordinator; anything else -> no role (roles == 0).
Caller CallerFromCertificateName(absl::string_view name);

// Where a server's tokens come from (flags of the daemons' main()s); empty
// = none of that role.
struct AuthFiles {
  std::string operator_token_file;
  std::string worker_token_file;
  std::string peer_token_file;
  std::string coordinator_token_file;
};

// The AuthOptions of a server with transport `tls` and these token files:
// loads every token file named (INVALID_ARGUMENT names the bad one), trusts
// client certificates where tls has a CA, and checks with CheckServerAuth
// that callers are authenticated somehow. Logs a warning for --insecure.
absl::StatusOr<AuthOptions> LoadServerAuth(const CredentialsOptions& tls,
                                           const AuthFiles& files);

// OK when a server configured with `tls` and `auth` authenticates its
// callers somehow (client certificates, tokens) or --insecure was said;
// INVALID_ARGUMENT saying which flags to give otherwise.
absl::Status CheckServerAuth(const CredentialsOptions& tls,
                             const AuthOptions& auth);

class Authenticator {
 public:
  explicit Authenticator(AuthOptions options);

  // The caller of `context` if it holds `role`; UNAUTHENTICATED when it
  // presented no known credential, PERMISSION_DENIED when it lacks the
  // role. `method` names the RPC in the error and the log line.
  absl::StatusOr<Caller> Authorize(const grpc::ServerContext& context,
                                   Role role, absl::string_view method) const;
  // The caller if it holds any of `roles` (the error names them all).
  absl::StatusOr<Caller> Authorize(const grpc::ServerContext& context,
                                   std::initializer_list<Role> roles,
                                   absl::string_view method) const;

  // Whether any check is configured (tokens or client certificates) or
  // --insecure was said.
  bool configured() const {
    return options_.insecure || options_.client_certificates ||
           !options_.tokens.empty();
  }
  bool insecure() const { return options_.insecure; }

 private:
  absl::StatusOr<Caller> Identify(const grpc::ServerContext& context) const;

  const AuthOptions options_;
};

}  // namespace gasloc

#endif  // GASLOC_SERVER_AUTH_H_
