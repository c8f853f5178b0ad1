// gasloc-coordinator: tracks workers, accepts jobs, plans every round.
#include <cstdlib>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/flags_setup.h"
#include "common/log.h"
#include "common/version.h"
#include "server/server_runner.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:7070",
          "Address the coordinator's gRPC service listens on (host:port; "
          "port 0 picks a free port, printed on stdout).");
ABSL_FLAG(std::string, db, "gasloc-coordinator.sqlite",
          "SQLite file holding jobs and workers (created if missing).");
ABSL_FLAG(int, lease_ms, 10000,
          "Worker lease length in milliseconds.");
ABSL_FLAG(int, metrics_port, 0,
          "Port of the Prometheus /metrics endpoint (0 = off).");
ABSL_FLAG(std::string, tls_cert, "", "PEM server certificate (enables TLS).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM root that signed client certificates (mutual TLS).");

int main(int argc, char** argv) {
  gasloc::BlockTerminationSignals();
  gasloc::ParseFlagsOrExit(
      argc, argv,
      "gasloc-coordinator: tracks live workers, accepts jobs and issues every "
      "outer round's gossip pairing and local-step budgets.\n\n"
      "Usage: gasloc-coordinator [--listen=HOST:PORT] [--db=FILE] "
      "[--metrics_port=N]");

  gasloc::ServerOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.credentials = {absl::GetFlag(FLAGS_tls_cert),
                         absl::GetFlag(FLAGS_tls_key),
                         absl::GetFlag(FLAGS_tls_ca)};
  gasloc::ServerRunner runner(options);
  auto port = runner.Start();
  if (!port.ok()) {
    GASLOC_LOG(ERROR) << "gasloc-coordinator: " << port.status();
    return 1;
  }
  GASLOC_LOG(INFO) << "gasloc-coordinator " << gasloc::kGaslocVersion
                   << " listening on port " << *port;
  std::printf("listening on port %d\n", *port);
  std::fflush(stdout);
  const int signal_number = runner.WaitForTerminationSignal();
  GASLOC_LOG(INFO) << "signal " << signal_number << ": shutting down";
  runner.Shutdown(absl::Seconds(5));
  GASLOC_LOG(INFO) << "gasloc-coordinator stopped";
  return 0;
}
