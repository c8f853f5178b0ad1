// gasloc-coordinator: tracks workers, accepts jobs, plans every round.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/flags_setup.h"
#include "common/log.h"
#include "common/version.h"
#include "coordinator/coordinator.h"
#include "coordinator/store.h"
#include "coordinator/coordinator_metrics.h"
#include "prometheus/registry.h"
#include "server/auth.h"
#include "server/coordinator_service.h"
#include "server/credentials.h"
#include "server/metrics_endpoint.h"
#include "server/server_runner.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:7070",
          "Address the coordinator's gRPC service listens on (host:port; "
          "port 0 picks a free port, printed on stdout).");
ABSL_FLAG(std::string, db, "gasloc-coordinator.sqlite",
          "SQLite file holding jobs and workers (created if missing).");
ABSL_FLAG(int, lease_ms, 10000,
          "Worker lease length in milliseconds.");
ABSL_FLAG(std::string, metrics_address, "0.0.0.0",
          "Address the /metrics endpoint binds (0.0.0.0 = every interface, "
          "127.0.0.1 = this machine only); it serves plain HTTP.");
ABSL_FLAG(int, metrics_port, 0,
          "Port of the Prometheus /metrics endpoint on --metrics_address "
          "(0 = off).");
ABSL_FLAG(int, ended_jobs_kept, 1000,
          "Ended (finished, failed, stopped) jobs kept; older ones are "
          "forgotten with their events, rounds and members. >= 1.");
ABSL_FLAG(absl::Duration, ended_job_max_age, absl::Hours(24 * 30),
          "How long an ended job is kept after it ended (e.g. 720h).");
ABSL_FLAG(std::string, tls_cert, "", "PEM server certificate (enables TLS).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM root that signed client certificates: the server then "
          "requires and verifies them (mutual TLS).");
ABSL_FLAG(std::string, operator_token_file, "",
          "File of operator bearer tokens (\"<token>\" per line): who may "
          "start, stop and list jobs and list workers.");
ABSL_FLAG(std::string, worker_token_file, "",
          "File of worker bearer tokens (\"<token> [worker-name]\" per "
          "line): who may register and act as a worker.");
ABSL_FLAG(std::string, export_token_file, "",
          "File whose first token the coordinator presents to the workers' "
          "Peer service when it fetches a model for `gaslocctl job export` "
          "(a token their --coordinator_token_file lists). With mutual TLS "
          "the coordinator presents --tls_cert instead (CN \"coordinator\").");
ABSL_FLAG(bool, insecure, false,
          "Run without any authentication (plaintext, every caller may do "
          "everything). Only for tests and trusted loopback.");

int main(int argc, char** argv) {
  // Debian's Abseil is built with its debug checks: every Mutex lock and
  // destruction updates a process-wide lock-order graph under one global
  // lock. The tests keep that check; the daemon does not (at 1,500
  // simulated workers it cut the heartbeats' p99 from 223 to 66 ms,
  // docs/benchmarks.md).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  gasloc::BlockTerminationSignals();
  gasloc::ParseFlagsOrExit(
      argc, argv,
      "gasloc-coordinator: tracks live workers, accepts jobs and issues every "
      "outer round's gossip pairing and local-step budgets.\n\n"
      "Usage: gasloc-coordinator [--listen=HOST:PORT] [--db=FILE] "
      "[--lease_ms=N] [--metrics_port=N]\n"
      "  (--tls_cert=PEM --tls_key=PEM --tls_ca=PEM | "
      "--operator_token_file=F --worker_token_file=F | --insecure)");

  // Credentials first: a coordinator that would let anyone in refuses to
  // start unless --insecure says so.
  const gasloc::CredentialsOptions credentials{
      .tls_cert_file = absl::GetFlag(FLAGS_tls_cert),
      .tls_key_file = absl::GetFlag(FLAGS_tls_key),
      .tls_ca_file = absl::GetFlag(FLAGS_tls_ca),
      .token_file = "",
      .tokens_checked = !absl::GetFlag(FLAGS_operator_token_file).empty() ||
                        !absl::GetFlag(FLAGS_worker_token_file).empty(),
      .insecure = absl::GetFlag(FLAGS_insecure)};
  auto auth_options = gasloc::LoadServerAuth(
      credentials,
      {.operator_token_file = absl::GetFlag(FLAGS_operator_token_file),
       .worker_token_file = absl::GetFlag(FLAGS_worker_token_file),
       .peer_token_file = "",
       .coordinator_token_file = ""});
  if (!auth_options.ok()) {
    std::fprintf(stderr, "gasloc-coordinator: %s\n",
                 std::string(auth_options.status().message()).c_str());
    return 2;
  }
  const gasloc::Authenticator authenticator(*auth_options);
  // The export token (the coordinator's own, for the workers' FetchModel)
  // is read now: a file that cannot be read stops the start, not the
  // first `gaslocctl job export`.
  if (const std::string export_token = absl::GetFlag(FLAGS_export_token_file);
      !export_token.empty()) {
    if (const absl::StatusOr<std::string> token =
            gasloc::LoadOwnToken(export_token);
        !token.ok()) {
      std::fprintf(stderr, "gasloc-coordinator: --export_token_file: %s\n",
                   std::string(token.status().message()).c_str());
      return 2;
    }
  }

  const int lease_ms = absl::GetFlag(FLAGS_lease_ms);
  if (lease_ms < 100 || lease_ms > 3600000) {
    std::fprintf(stderr,
                 "gasloc-coordinator: --lease_ms must be in [100, 3600000], "
                 "got %d\n",
                 lease_ms);
    return 2;
  }
  const std::string db = absl::GetFlag(FLAGS_db);
  auto store = gasloc::coordinator::Store::Open(db);
  if (!store.ok()) {
    GASLOC_LOG(ERROR) << "gasloc-coordinator: " << store.status();
    std::fprintf(stderr, "gasloc-coordinator: %s\n",
                 std::string(store.status().message()).c_str());
    return 1;
  }
  // Metrics: counters injected into the coordinator and the service,
  // scrape-time gauges read from the coordinator.
  const int metrics_port = absl::GetFlag(FLAGS_metrics_port);
  auto registry = std::make_shared<prometheus::Registry>();
  gasloc::coordinator::CoordinatorMetrics metrics(*registry);
  gasloc::coordinator::CoordinatorOptions coordinator_options;
  coordinator_options.lease = absl::Milliseconds(lease_ms);
  coordinator_options.retention = {
      .max_ended = static_cast<size_t>(
          std::max(1, absl::GetFlag(FLAGS_ended_jobs_kept))),
      .max_age = absl::GetFlag(FLAGS_ended_job_max_age)};
  if (metrics_port != 0) coordinator_options.metrics = &metrics;
  auto coordinator = gasloc::coordinator::Coordinator::Create(
      coordinator_options, std::move(*store), &gasloc::RealClock::Get());
  if (!coordinator.ok()) {
    GASLOC_LOG(ERROR) << "gasloc-coordinator: loading " << db << ": "
                      << coordinator.status();
    return 1;
  }
  // The exposer holds collectables weakly: `gauges` lives until main ends.
  const std::shared_ptr<prometheus::Collectable> gauges =
      gasloc::coordinator::CoordinatorGauges(coordinator->get());
  std::unique_ptr<prometheus::Exposer> exposer;
  if (metrics_port != 0) {
    auto started =
        gasloc::StartMetricsEndpoint(metrics_port, {registry, gauges},
                                     absl::GetFlag(FLAGS_metrics_address));
    if (!started.ok()) {
      GASLOC_LOG(ERROR) << "gasloc-coordinator: " << started.status();
      std::fprintf(stderr, "gasloc-coordinator: %s\n",
                   std::string(started.status().message()).c_str());
      return 1;
    }
    exposer = std::move(*started);
  }
  // Exports: the coordinator dials a member's Peer service as a client,
  // with its own certificate (mutual TLS) or its export token.
  const gasloc::CredentialsOptions to_workers{
      .tls_cert_file = absl::GetFlag(FLAGS_tls_cert),
      .tls_key_file = absl::GetFlag(FLAGS_tls_key),
      .tls_ca_file = absl::GetFlag(FLAGS_tls_ca),
      .token_file = absl::GetFlag(FLAGS_export_token_file),
      .tokens_checked = false,
      .insecure = absl::GetFlag(FLAGS_insecure)};
  const gasloc::ModelExportRelay export_relay(
      [to_workers](const std::string& address) {
        return gasloc::MakeChannel(address, to_workers);
      });
  gasloc::CoordinatorServiceOptions service_options;
  service_options.export_relay = &export_relay;
  service_options.metrics = coordinator_options.metrics;
  service_options.authenticator = &authenticator;
  gasloc::CoordinatorService service(coordinator->get(), service_options);

  gasloc::ServerOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.credentials = credentials;
  // A long poll per worker in flight: keep a pool of threads rather than
  // one started and ended per call (server_runner.h).
  options.max_idle_threads = 64;
  gasloc::ServerRunner runner(options);
  runner.AddService(&service);
  auto port = runner.Start();
  if (!port.ok()) {
    GASLOC_LOG(ERROR) << "gasloc-coordinator: " << port.status();
    return 1;
  }
  // Leases expire, pending jobs start and orphaned jobs fail even when no
  // RPC arrives.
  absl::Notification stop_ticker;
  std::thread ticker([&] {
    while (!stop_ticker.WaitForNotificationWithTimeout(absl::Milliseconds(500)))
      (*coordinator)->Tick();
  });
  GASLOC_LOG(INFO) << "gasloc-coordinator " << gasloc::kGaslocVersion
                   << " listening on port " << *port << ", database " << db
                   << ", lease " << lease_ms << " ms";
  std::printf("listening on port %d\n", *port);
  std::fflush(stdout);
  const int signal_number = runner.WaitForTerminationSignal();
  GASLOC_LOG(INFO) << "signal " << signal_number << ": shutting down";
  service.BeginShutdown();
  runner.Shutdown(absl::Seconds(5));
  stop_ticker.Notify();
  ticker.join();
  exposer.reset();  // before the coordinator its gauges read
  GASLOC_LOG(INFO) << "gasloc-coordinator stopped";
  return 0;
}
