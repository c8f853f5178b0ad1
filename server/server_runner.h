// The one place gasloc processes start a gRPC server: listening address
// (port 0 = pick a free one), credentials, message-size limits, the
// standard gRPC health service and server reflection (so grpcurl and
// grpc_health_probe work), and a graceful shutdown on SIGTERM / SIGINT.
//
//   BlockTerminationSignals();           // first thing in main()
//   ServerRunner runner(options);
//   runner.AddService(&coordinator_service);
//   ASSIGN_OR_RETURN(int port, runner.Start());
//   runner.WaitForTerminationSignal();   // blocks until SIGTERM / SIGINT
//   runner.Shutdown(absl::Seconds(5));
//
// Thread safety: Start/Shutdown from one thread (main); RequestShutdown is
// safe from any thread.
#ifndef GASLOC_SERVER_SERVER_RUNNER_H_
#define GASLOC_SERVER_SERVER_RUNNER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "server/credentials.h"

namespace gasloc {

struct ServerOptions {
  // "host:port"; port 0 picks a free port (see Start's result).
  std::string listen_address = "0.0.0.0:0";
  CredentialsOptions credentials;
  // Largest message accepted, bytes. Exchange chunks are at most 3 MiB of
  // payload plus a header, so 8 MiB leaves room without inviting abuse.
  int max_receive_message_bytes = 8 << 20;
  // HTTP/2 settings for bulk transfers (server/http2_tuning.h); false =
  // gRPC's defaults, which measured as fast or faster once malloc was
  // tuned (docs/benchmarks.md; `gasloc-bench exchange --http2` compares).
  bool http2_bulk_tuning = false;
  // Idle threads the synchronous server keeps per completion queue (gRPC's
  // MAX_POLLERS); 0 = gRPC's default, 2. Beyond it a thread whose call
  // finished exits and a later call starts a new one: a coordinator with
  // a thousand long polls in flight churned threads (kernel time) until
  // it kept 64 (docs/benchmarks.md, "Coordinator under simulated
  // workers").
  int max_idle_threads = 0;
};

// Blocks SIGTERM, SIGINT (and SIGPIPE, ignored) in the calling thread; call
// it in main() before any thread starts so every thread inherits the mask
// and only WaitForTerminationSignal receives them.
void BlockTerminationSignals();

class ServerRunner {
 public:
  explicit ServerRunner(ServerOptions options);
  ~ServerRunner();

  void AddService(grpc::Service* service);
  // Builds and starts the server; returns the bound port.
  absl::StatusOr<int> Start();
  // Blocks until SIGTERM or SIGINT arrives (or RequestShutdown is called);
  // returns the signal number (0 for RequestShutdown).
  int WaitForTerminationSignal();
  // Wakes WaitForTerminationSignal from another thread.
  void RequestShutdown();
  // Stops accepting calls, gives in-flight calls `grace` to finish, then
  // cancels them. Idempotent.
  void Shutdown(absl::Duration grace);

  grpc::Server* server() { return server_.get(); }
  int port() const { return port_; }

 private:
  ServerOptions options_;
  std::vector<grpc::Service*> services_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

}  // namespace gasloc

#endif  // GASLOC_SERVER_SERVER_RUNNER_H_
