// gasloc-worker: the long-running training daemon of one machine.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "common/flags_setup.h"
#include "common/log.h"
#include "common/version.h"

ABSL_FLAG(std::string, coordinator, "localhost:7070",
          "Coordinator address (host:port).");
ABSL_FLAG(std::string, listen, "0.0.0.0:0",
          "Address of this worker's Peer service (port 0 = pick a free one).");
ABSL_FLAG(std::string, advertise, "",
          "Address peers should dial (host:port); default: this host's name "
          "with the bound port.");
ABSL_FLAG(int, threads, 0, "Compute threads (0 = all cores).");
ABSL_FLAG(std::string, data_dir, ".",
          "Directory for checkpoints and scratch files.");
ABSL_FLAG(int, metrics_port, 0,
          "Port of the Prometheus /metrics endpoint (0 = off).");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate (enables TLS).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_ca, "", "PEM root of the cluster's certificates.");

int main(int argc, char** argv) {
  gasloc::ParseFlagsOrExit(
      argc, argv,
      "gasloc-worker: registers with the coordinator, trains the model of "
      "its job round by round and exchanges state with its peers.\n\n"
      "Usage: gasloc-worker --coordinator=HOST:PORT [--listen=HOST:PORT] "
      "[--threads=N]");
  std::fprintf(stderr,
               "gasloc-worker %s: the training daemon is not yet available "
               "in this build (flags parsed).\n",
               gasloc::kGaslocVersion);
  return 2;
}
