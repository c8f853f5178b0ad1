// gasloc-worker: the long-running training daemon of one machine. Wires the
// gRPC pieces (Peer service, peer transport, coordinator link, metrics
// endpoint) to the daemon's logic in worker/daemon/ and runs it; every
// decision is taken there.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "common/flags_setup.h"
#include "common/log.h"
#include "common/malloc_tuning.h"
#include "common/version.h"
#include "server/grpc_coordinator_link.h"
#include "server/grpc_peer_transport.h"
#include "server/peer_service.h"
#include "server/server_runner.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"
#include "server/metrics_endpoint.h"
#include "worker/daemon/worker_daemon.h"
#include "worker/model/elementwise_loops.h"
#include "worker/model/kernels.h"
#include "worker/round/trainer_adapter.h"
#include "worker/train/trainer.h"

ABSL_FLAG(std::string, coordinator, "localhost:7070",
          "Coordinator address (host:port).");
ABSL_FLAG(std::string, listen, "0.0.0.0:0",
          "Address of this worker's Peer service (port 0 = pick a free one; "
          "the bound port is printed as 'listening on port N').");
ABSL_FLAG(std::string, advertise, "",
          "Address peers should dial (host:port); default: the --listen host "
          "(or this machine's host name when listening on 0.0.0.0) with the "
          "bound port.");
ABSL_FLAG(int, threads, 0, "Compute threads (0 = all cores).");
ABSL_FLAG(std::string, data_dir, "",
          "The worker's state directory, one per worker: its stable name "
          "(file worker_name, made on first start, so a restarted worker "
          "finds its own checkpoints; locked while the worker runs) and the "
          "checkpoints of jobs whose checkpoint.directory is relative "
          "(resolved under it). Empty = none: checkpoints are named by the "
          "worker id and relative directories are under the working "
          "directory.");
ABSL_FLAG(std::string, corpus_root, "",
          "Directory every job's data.corpus_path and model.init_from "
          "must resolve inside "
          "(symbolic links and '..' followed first); a job naming a file "
          "elsewhere fails to set up with the reason. Empty = any readable "
          "file (a warning at start): set it wherever job specs come from "
          "more than one person.");
ABSL_FLAG(std::string, checkpoint_root, "",
          "Directory every job's checkpoint.directory must resolve inside; "
          "empty = --data_dir (anywhere without one: a warning at start).");
ABSL_FLAG(int, checkpoints_kept, 2,
          "Checkpoints kept per job: the latest and the previous ones "
          "(<path>.1 ...), tried newest first when one is damaged. >= 1.");
ABSL_FLAG(std::string, metrics_address, "0.0.0.0",
          "Address the /metrics endpoint binds (0.0.0.0 = every interface, "
          "127.0.0.1 = this machine only); it serves plain HTTP.");
ABSL_FLAG(int, metrics_port, 0,
          "Port of the Prometheus /metrics endpoint (0 = off).");
ABSL_FLAG(std::string, tls_cert, "", "PEM certificate (enables TLS).");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM root of the cluster's certificates: verifies the coordinator "
          "and peers, and the Peer service requires and verifies client "
          "certificates signed by it (mutual TLS).");
ABSL_FLAG(std::string, worker_token_file, "",
          "File whose first token this worker sends to the coordinator "
          "(\"<token> [worker-name]\" per line).");
ABSL_FLAG(std::string, peer_token_file, "",
          "File of peer bearer tokens the Peer service accepts "
          "(\"<token> [worker-name]\" per line); its first token is the one "
          "this worker sends to its peers.");
ABSL_FLAG(std::string, coordinator_token_file, "",
          "File of coordinator bearer tokens the Peer service accepts for "
          "FetchModel only: the coordinator relaying this worker's model to "
          "`gaslocctl job export` (its --export_token_file).");
ABSL_FLAG(bool, insecure, false,
          "Run without any authentication (plaintext, every caller may do "
          "everything). Only for tests and trusted loopback.");

namespace gasloc {
namespace {

std::string AdvertisedAddress(const std::string& listen, int port) {
  const std::string flag = absl::GetFlag(FLAGS_advertise);
  if (!flag.empty()) return flag;
  std::string host = listen.substr(0, listen.rfind(':'));
  if (host.empty() || host == "0.0.0.0" || host == "[::]") {
    char name[256] = {0};
    gethostname(name, sizeof(name) - 1);
    host = name;
  }
  return absl::StrCat(host, ":", port);
}

// The memory this worker may use, measured at start: the machine's
// physical memory, or less when a cgroup limit (systemd MemoryMax, a
// Kubernetes memory limit) says so. Reported at registration; jobs that
// need more are refused (common/job_size.h).
uint64_t MeasuredMemoryBytes() {
  uint64_t bytes =
      static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  for (const char* limit_file : {"/sys/fs/cgroup/memory.max",
                                 "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(limit_file);
    uint64_t limit = 0;
    if (in >> limit && limit > 0 && limit < bytes) bytes = limit;
  }
  return bytes;
}

// The daemon's options from the flags: what it registers (`address`, the
// machine's cores, memory and host name), its threads, roots and state
// directory (claimed here: worker/daemon/state_directory.h).
WorkerDaemonOptions DaemonOptionsFromFlags(const std::string& address) {
  WorkerDaemonOptions options;
  options.info.set_address(address);
  options.info.set_cores(std::thread::hardware_concurrency());
  options.info.set_memory_bytes(MeasuredMemoryBytes());
  options.info.set_software_version(kGaslocVersion);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  options.info.set_hostname(host);
  options.info.set_metrics_port(absl::GetFlag(FLAGS_metrics_port));
  options.threads = absl::GetFlag(FLAGS_threads);
  options.checkpoints_kept = std::max(1, absl::GetFlag(FLAGS_checkpoints_kept));
  options.corpus_root = absl::GetFlag(FLAGS_corpus_root);
  options.checkpoint_root = absl::GetFlag(FLAGS_checkpoint_root).empty()
                                ? absl::GetFlag(FLAGS_data_dir)
                                : absl::GetFlag(FLAGS_checkpoint_root);
  if (options.checkpoint_root.empty())
    GASLOC_LOG(WARNING) << "gasloc-worker: no --checkpoint_root or "
                           "--data_dir: a job may write checkpoints wherever "
                           "this process can write";
  if (options.corpus_root.empty())
    GASLOC_LOG(WARNING) << "gasloc-worker: no --corpus_root: a job may name "
                           "any file this process can read as its corpus";
  if (const std::string dir = absl::GetFlag(FLAGS_data_dir); !dir.empty()) {
    options.data_dir = dir;
    // One worker per state directory (worker/daemon/state_directory.h).
    auto name = ClaimStateDirectory(dir);
    if (name.ok()) {
      options.name = *name;
      GASLOC_LOG(INFO) << "state directory " << dir << ", worker name "
                       << options.name;
    } else {
      // Still a worker, but its checkpoints are named by its worker id: a
      // restarted worker will not find them.
      GASLOC_LOG(WARNING) << "gasloc-worker: --data_dir " << dir
                          << ": no stable name: " << name.status();
    }
  }
  return options;
}

int RunWorker() {
  // Three sets of credentials: the Peer service's (server), the link to
  // the coordinator (worker token) and the channels to peers (peer token).
  // Without any, the worker refuses to start unless --insecure says so.
  const CredentialsOptions credentials{
      .tls_cert_file = absl::GetFlag(FLAGS_tls_cert),
      .tls_key_file = absl::GetFlag(FLAGS_tls_key),
      .tls_ca_file = absl::GetFlag(FLAGS_tls_ca),
      .token_file = "",
      .tokens_checked = !absl::GetFlag(FLAGS_peer_token_file).empty(),
      .insecure = absl::GetFlag(FLAGS_insecure)};
  CredentialsOptions to_coordinator = credentials;
  to_coordinator.token_file = absl::GetFlag(FLAGS_worker_token_file);
  CredentialsOptions to_peers = credentials;
  to_peers.token_file = absl::GetFlag(FLAGS_peer_token_file);
  auto auth_options = LoadServerAuth(
      credentials, {.operator_token_file = "",
                    .worker_token_file = "",
                    .peer_token_file = absl::GetFlag(FLAGS_peer_token_file),
                    .coordinator_token_file =
                        absl::GetFlag(FLAGS_coordinator_token_file)});
  if (!auth_options.ok()) {
    std::fprintf(stderr, "gasloc-worker: %s\n",
                 std::string(auth_options.status().message()).c_str());
    return 2;
  }
  const Authenticator authenticator(*auth_options);
  PeerRoster roster;
  // The Peer service first: its port goes into the registration. The
  // mailbox learns this worker's id once the coordinator assigned it.
  Mailbox mailbox(MailboxOptions{});
  PeerServiceOptions peer_options;
  peer_options.authenticator = &authenticator;
  peer_options.roster = &roster;
  PeerService peer_service(&mailbox, peer_options);
  ServerOptions server_options;
  server_options.listen_address = absl::GetFlag(FLAGS_listen);
  server_options.credentials = credentials;
  ServerRunner server(server_options);
  server.AddService(&peer_service);
  auto port = server.Start();
  if (!port.ok()) {
    GASLOC_LOG(ERROR) << "gasloc-worker: " << port.status();
    return 1;
  }

  auto coordinator =
      GrpcCoordinatorLink::Create(absl::GetFlag(FLAGS_coordinator),
                                  to_coordinator, &roster);
  if (!coordinator.ok()) {
    GASLOC_LOG(ERROR) << "gasloc-worker: " << coordinator.status();
    return 1;
  }
  GrpcPeerTransportOptions transport_options;
  transport_options.mailbox = &mailbox;
  transport_options.credentials = to_peers;
  GrpcPeerTransport transport(transport_options);

  WorkerDaemonOptions options = DaemonOptionsFromFlags(
      AdvertisedAddress(server_options.listen_address, *port));
  // Metrics: one registry, exposed on --metrics_port, injected.
  auto registry = std::make_shared<prometheus::Registry>();
  WorkerMetrics metrics(*registry);
  // What this CPU computes with, said once: a bf16 job on a CPU without
  // bf16 matmuls runs emulated (docs/training.md).
  GASLOC_LOG(INFO) << "gasloc-worker compute: " << kernels::ComputeSummary();
  metrics.RecordCompute(
      kernels::OneDnnIsaName(), kernels::ActiveElementwiseLoops().isa,
      kernels::Bf16ComputeName(kernels::Bf16ComputeMode()));
  std::unique_ptr<prometheus::Exposer> exposer;
  if (absl::GetFlag(FLAGS_metrics_port) != 0) {
    auto started = StartMetricsEndpoint(absl::GetFlag(FLAGS_metrics_port),
                                        {registry, metrics.scrape_gauges()},
                                        absl::GetFlag(FLAGS_metrics_address));
    if (!started.ok()) {
      GASLOC_LOG(ERROR) << "gasloc-worker: " << started.status();
      return 1;
    }
    exposer = std::move(*started);
    options.metrics = &metrics;
  }
  // The deadline policy is the daemon's (WithFetchDeadline).
  ModelFetcher fetcher = WithFetchDeadline(
      [&transport](const v1::PeerAssignment& source, uint64_t job_id,
                   uint64_t /*self_id*/, uint64_t model_elements,
                   absl::Time deadline) {
        FetchModelOptions fetch;
        fetch.address = source.address();
        fetch.job_id = job_id;
        fetch.expected_elements = model_elements;
        fetch.deadline = deadline;
        return transport.FetchModel(fetch);
      },
      RealClock::Get());
  TrainerFactory trainers = [](const v1::JobSpec& spec, DataShard shard,
                               int threads) {
    return TrainerAdapter::Create(spec, shard.rank, shard.num_workers, threads);
  };
  WorkerDaemon daemon(options, coordinator->get(), &transport, trainers,
                      fetcher);
  peer_service.SetModelProvider(
      [&daemon](uint64_t job_id) { return daemon.SnapshotModel(job_id); });

  std::printf("listening on port %d\n", *port);
  std::fflush(stdout);
  GASLOC_LOG(INFO) << "gasloc-worker " << kGaslocVersion << ": peer service on "
                   << options.info.address() << ", coordinator "
                   << absl::GetFlag(FLAGS_coordinator);

  std::thread signals([&] {
    const int signal_number = server.WaitForTerminationSignal();
    daemon.Shutdown(signal_number == 0 ? "daemon ended"
                                       : absl::StrCat("signal ", signal_number));
  });
  daemon.SetIdentityListener(
      [&mailbox](uint64_t worker_id) { mailbox.set_self_id(worker_id); });
  absl::Status ran = daemon.Run();
  server.RequestShutdown();
  signals.join();
  // End open transfers first so no stream waits for a registration that
  // will never come while the server drains.
  mailbox.Shutdown();
  server.Shutdown(absl::Seconds(2));
  if (!ran.ok()) {
    GASLOC_LOG(ERROR) << "gasloc-worker: " << ran;
    return 1;
  }
  GASLOC_LOG(INFO) << "gasloc-worker stopped";
  return 0;
}

}  // namespace
}  // namespace gasloc

int main(int argc, char** argv) {
  // As the coordinator (coordinator_main.cc): Abseil's debug lock-order
  // graph is for the tests, not the daemon.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  gasloc::BlockTerminationSignals();
  gasloc::ParseFlagsOrExit(
      argc, argv,
      "gasloc-worker: registers with the coordinator, trains the model of "
      "its job round by round and exchanges state with its peers.\n\n"
      "Usage: gasloc-worker --coordinator=HOST:PORT [--listen=HOST:PORT] "
      "[--advertise=HOST:PORT] [--threads=N] [--metrics_port=N]\n"
      "  (--tls_cert=PEM --tls_key=PEM --tls_ca=PEM | "
      "--worker_token_file=F --peer_token_file=F | --insecure)");
  // Before any thread allocates: exchange buffers reuse warm heap pages.
  const std::string malloc_refused = gasloc::TuneMallocForStreaming(
      gasloc::ResolveThreads(absl::GetFlag(FLAGS_threads), {}));
  if (!malloc_refused.empty())
    GASLOC_LOG(WARNING) << "glibc refused the malloc tuning (" << malloc_refused
                        << "): exchanges will fault in fresh pages";
  return gasloc::RunWorker();
}
