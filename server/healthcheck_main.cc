// gasloc-healthcheck: asks a gasloc server's standard gRPC health service
// (grpc.health.v1.Health/Check, served by every ServerRunner) whether it is
// SERVING; the same RPC grpc_health_probe and Kubernetes' grpc probes send.
// The container image's HEALTHCHECK and the Kubernetes manifest's exec
// probes run it (deploy/image, deploy/kubernetes).
//
//   gasloc-healthcheck [--address=HOST:PORT] [--service=NAME] [--timeout_ms=N]
//                      [--tls_ca=PEM [--tls_cert=PEM --tls_key=PEM]]
//
// Exit codes: 0 SERVING; 1 anything else (not serving, unreachable, a
// deadline), with one line "gasloc-healthcheck: REASON" on stderr; 2 bad
// usage. The address defaults to $GASLOC_HEALTH_ADDRESS, else
// 127.0.0.1:7070 (the coordinator's port), so one image serves both
// daemons: a worker's container sets GASLOC_HEALTH_ADDRESS=127.0.0.1:7071.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/flags_setup.h"
#include "grpcpp/create_channel.h"
#include "server/credentials.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"

ABSL_FLAG(std::string, address, "",
          "Server to check (host:port); default $GASLOC_HEALTH_ADDRESS, else "
          "127.0.0.1:7070.");
ABSL_FLAG(std::string, service, "",
          "Service name to ask about (\"\" = the whole server).");
ABSL_FLAG(int, timeout_ms, 3000, "Deadline of the check in milliseconds.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM root of the server's certificate (enables TLS), as the "
          "daemons' --tls_ca.");
ABSL_FLAG(std::string, tls_cert, "", "PEM client certificate (mutual TLS).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");

namespace gasloc {
namespace {

constexpr int kServing = 1;

int Fail(const std::string& message) {
  std::fprintf(stderr, "gasloc-healthcheck: %s\n", message.c_str());
  return 1;
}

// HealthCheckRequest{service = 1: string}, hand-encoded: Debian's gRPC ships
// no generated health stubs, and the message is one optional field.
std::string EncodeRequest(const std::string& service) {
  if (service.empty()) return "";
  std::string out = "\x0a";  // field 1, length-delimited
  size_t n = service.size();
  while (n >= 0x80) {
    out.push_back(static_cast<char>((n & 0x7f) | 0x80));
    n >>= 7;
  }
  out.push_back(static_cast<char>(n));
  return out + service;
}

int Check(const std::string& address, const std::string& service,
          int timeout_ms) {
  // The health service needs no role and answers nothing secret, so a
  // plaintext probe of a token-authenticated server needs no --insecure.
  auto credentials =
      MakeChannelCredentials({.tls_cert_file = absl::GetFlag(FLAGS_tls_cert),
                              .tls_key_file = absl::GetFlag(FLAGS_tls_key),
                              .tls_ca_file = absl::GetFlag(FLAGS_tls_ca),
                              .token_file = "",
                              .tokens_checked = false,
                              .insecure = true});
  if (!credentials.ok()) return Fail(credentials.status().ToString());
  auto channel = grpc::CreateChannel(address, *credentials);
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(timeout_ms));
  const std::string encoded = EncodeRequest(service);
  grpc::Slice slice(encoded);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, "/grpc.health.v1.Health/Check", grpc::StubOptions(),
                 &request, &response,
                 [&done](grpc::Status s) { done.set_value(s); });
  const grpc::Status status = done.get_future().get();
  if (!status.ok())
    return Fail(absl::StrCat(address, ": ", status.error_message(), " (code ",
                             status.error_code(), ")"));
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return Fail("unreadable response");
  std::string bytes;
  for (const auto& s : slices)
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  // HealthCheckResponse{status = 1: enum} = 0x08 <status>; empty = UNKNOWN.
  const int serving_status =
      (bytes.size() == 2 && bytes[0] == 0x08) ? bytes[1] : 0;
  if (serving_status != kServing)
    return Fail(absl::StrCat(address, " is not serving (status ",
                             serving_status, ")"));
  std::printf("%s: SERVING\n", address.c_str());
  return 0;
}

}  // namespace
}  // namespace gasloc

int main(int argc, char** argv) {
  const std::vector<std::string> args = gasloc::ParseFlagsOrExit(
      argc, argv,
      "gasloc-healthcheck: exits 0 when the gasloc server at --address "
      "answers SERVING on grpc.health.v1.Health/Check.\n\n"
      "Usage: gasloc-healthcheck [--address=HOST:PORT] [--service=NAME] "
      "[--timeout_ms=N]");
  if (args.size() > 1) {
    std::fprintf(stderr, "gasloc-healthcheck: unexpected argument %s\n",
                 args[1].c_str());
    return 2;
  }
  std::string address = absl::GetFlag(FLAGS_address);
  if (address.empty()) {
    const char* env = std::getenv("GASLOC_HEALTH_ADDRESS");
    address = (env != nullptr && env[0] != '\0') ? env : "127.0.0.1:7070";
  }
  return gasloc::Check(address, absl::GetFlag(FLAGS_service),
                       absl::GetFlag(FLAGS_timeout_ms));
}
