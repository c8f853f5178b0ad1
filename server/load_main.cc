// gasloc-load: plays N simulated workers against a real gasloc-coordinator
// (SimulatedFleet, server/simulated_fleet.h) for --seconds after their job
// started, and prints one JSON object: per RPC p50/p99/max latency and
// errors, the assignments' delivery latency, the rounds the job advanced.
// bench/coordinator_load.py runs the coordinator beside it and adds the
// coordinator's CPU, memory and SQLite figures.
//
//   gasloc-load --coordinator=HOST:PORT --workers=N [--seconds=S]
//     [--churn_per_minute=C] [--workers_per_connection=K]
//     (--worker_token_file=F --operator_token_file=F |
//      --tls_ca=PEM --tls_cert=PEM --tls_key=PEM [--operator_tls_cert=PEM
//      --operator_tls_key=PEM] | --insecure)
//
// Exit codes: 0 ran (failed calls are in the JSON); 1 the fleet could not
// start (no coordinator, the job refused); 2 bad usage.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "common/flags_setup.h"
#include "server/simulated_fleet.h"

ABSL_FLAG(std::string, coordinator, "127.0.0.1:7070",
          "The coordinator (host:port).");
ABSL_FLAG(int, workers, 10, "Simulated workers.");
ABSL_FLAG(int, workers_per_connection, 1,
          "Simulated workers sharing one gRPC connection (1 = a connection "
          "each, as real daemons).");
ABSL_FLAG(double, seconds, 60, "How long the job runs, from its start.");
ABSL_FLAG(double, churn_per_minute, 0,
          "Workers leaving (each replaced by a new one) per minute.");
ABSL_FLAG(double, min_steps_per_second, 20,
          "Slowest simulated inner-step rate.");
ABSL_FLAG(double, max_steps_per_second, 40,
          "Fastest simulated inner-step rate.");
ABSL_FLAG(int, local_steps, 40, "The job's H.");
ABSL_FLAG(int, wait_ms, 10000, "GetAssignment's long-poll wait.");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the step rates and the churn.");
ABSL_FLAG(std::string, worker_token_file, "",
          "The workers' bearer token file.");
ABSL_FLAG(std::string, operator_token_file, "",
          "The operator's bearer token file (StartJob, StopJob).");
ABSL_FLAG(std::string, tls_ca, "", "PEM root (mutual TLS).");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM worker certificate (CN worker:<name>) for every simulated "
          "worker.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, operator_tls_cert, "",
          "PEM operator certificate (CN operator) for the job's calls.");
ABSL_FLAG(std::string, operator_tls_key, "",
          "PEM private key of --operator_tls_cert.");
ABSL_FLAG(bool, insecure, false, "Plaintext, no credentials.");

int main(int argc, char** argv) {
  gasloc::ParseFlagsOrExit(
      argc, argv,
      "gasloc-load: plays N simulated workers against a gasloc-coordinator "
      "and prints the coordinator's latencies as JSON.\n\n"
      "Usage: gasloc-load --coordinator=HOST:PORT --workers=N [--seconds=S] "
      "[--churn_per_minute=C]\n"
      "  (--worker_token_file=F --operator_token_file=F | --tls_ca=PEM "
      "--tls_cert=PEM --tls_key=PEM | --insecure)");
  gasloc::FleetOptions options;
  options.coordinator = absl::GetFlag(FLAGS_coordinator);
  options.workers = absl::GetFlag(FLAGS_workers);
  options.workers_per_connection = absl::GetFlag(FLAGS_workers_per_connection);
  const double seconds = absl::GetFlag(FLAGS_seconds);
  if (!(seconds > 0) || seconds > 86400) {
    std::fprintf(stderr, "gasloc-load: --seconds must be in (0, 86400]\n");
    return 2;
  }
  options.duration = absl::Seconds(seconds);
  options.churn_per_minute = absl::GetFlag(FLAGS_churn_per_minute);
  options.min_steps_per_second = absl::GetFlag(FLAGS_min_steps_per_second);
  options.max_steps_per_second = absl::GetFlag(FLAGS_max_steps_per_second);
  const int local_steps = absl::GetFlag(FLAGS_local_steps);
  const int wait_ms = absl::GetFlag(FLAGS_wait_ms);
  if (local_steps < 1 || wait_ms < 0 || wait_ms > 60000 ||
      options.churn_per_minute < 0) {
    std::fprintf(stderr,
                 "gasloc-load: --local_steps >= 1, --wait_ms in [0, 60000] "
                 "and --churn_per_minute >= 0\n");
    return 2;
  }
  options.local_steps = static_cast<uint32_t>(local_steps);
  options.wait_ms = static_cast<uint32_t>(wait_ms);
  options.seed = absl::GetFlag(FLAGS_seed);
  const bool insecure = absl::GetFlag(FLAGS_insecure);
  options.worker_credentials = {
      .tls_cert_file = absl::GetFlag(FLAGS_tls_cert),
      .tls_key_file = absl::GetFlag(FLAGS_tls_key),
      .tls_ca_file = absl::GetFlag(FLAGS_tls_ca),
      .token_file = absl::GetFlag(FLAGS_worker_token_file),
      .tokens_checked = false,
      .insecure = insecure};
  options.operator_credentials = {
      .tls_cert_file = absl::GetFlag(FLAGS_operator_tls_cert),
      .tls_key_file = absl::GetFlag(FLAGS_operator_tls_key),
      .tls_ca_file = absl::GetFlag(FLAGS_tls_ca),
      .token_file = absl::GetFlag(FLAGS_operator_token_file),
      .tokens_checked = false,
      .insecure = insecure};
  absl::StatusOr<gasloc::FleetReport> report =
      gasloc::RunSimulatedFleet(options);
  if (!report.ok()) {
    std::fprintf(stderr, "gasloc-load: %s\n",
                 std::string(report.status().message()).c_str());
    return report.status().code() == absl::StatusCode::kInvalidArgument ? 2
                                                                          : 1;
  }
  std::printf("%s\n", gasloc::FleetReportJson(*report).c_str());
  return 0;
}
