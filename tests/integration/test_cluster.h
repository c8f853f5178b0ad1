// A gasloc cluster of real processes on loopback for integration tests: one
// gasloc-coordinator and any number of gasloc-worker daemons, each with
// its log in a fresh directory, optional /metrics ports, a tiny job spec,
// and helpers to start, watch and stop jobs. The daemons run --insecure,
// or with mutual TLS after UseMutualTls() (a test CA, one certificate per
// worker: identities bound to worker ids, docs/security.md). The
// destructor (through Subprocess) kills whatever is still running.
//
// Thread safety: one test thread.
#ifndef GASLOC_TESTS_INTEGRATION_TEST_CLUSTER_H_
#define GASLOC_TESTS_INTEGRATION_TEST_CLUSTER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gasloc/v1/coordinator.grpc.pb.h"
#include "tests/support/subprocess.h"

namespace gasloc::testing {

// The tiny corpus tests train on (tests/data/, shipped in the repository).
std::string Corpus();
std::string ReadFile(const std::string& path);

class Cluster {
 public:
  explicit Cluster(const std::string& name);

  // Before StartCoordinator: mutual TLS with certificates made by
  // scripts/make_test_certs.sh for up to `workers` workers; the stub is
  // the operator.
  void UseMutualTls(int workers);
  // `metrics_port` != 0 gives the coordinator a /metrics endpoint.
  void StartCoordinator(int metrics_port = 0);
  // SIGKILLs the coordinator and starts it again on the same address;
  // `delete_database`: with a new, empty database (its file was lost).
  void RestartCoordinator(bool delete_database);
  // Starts `n` workers; worker i gets a /metrics endpoint on
  // metrics_ports[i] when that exists and is not 0.
  // `extra_args` are appended to every worker's command line.
  void StartWorkers(int n, const std::vector<int>& metrics_ports = {},
                    const std::vector<std::string>& extra_args = {});

  // Flags every worker started from now on gets too (e.g.
  // "--checkpoints_kept=8").
  void set_worker_flags(std::vector<std::string> flags) {
    worker_flags_ = std::move(flags);
  }
  // Starts worker i again (after the test killed it) with the same flags
  // and state directory; its log is appended to the same file.
  void RestartWorker(int i);

  // A 1-layer, 32-wide model on Corpus(): a round takes well under a second.
  v1::JobSpec TinySpec(v1::Algorithm algorithm, int rounds, int workers);
  uint64_t StartJob(const v1::JobSpec& spec);
  v1::JobStatus WaitForJobEnd(uint64_t job_id, absl::Duration timeout);
  // The job's status now (GetJob), or the call's error.
  absl::StatusOr<v1::JobStatus> GetJob(uint64_t job_id);
  // gaslocctl `args` against the coordinator as the operator: its exit
  // code and its stdout then stderr.
  std::pair<int, std::string> Ctl(const std::vector<std::string>& args);

  // The final parameters each worker checkpointed.
  void CheckpointedParams(std::vector<std::vector<float>>* out);

  std::string WorkerLog(int i) const { return ReadFile(logs_[i]); }
  Subprocess& worker(int i) { return *workers_[i]; }
  const std::string& dir() const { return dir_; }
  // The coordinator's "127.0.0.1:port".
  const std::string& address() const { return address_; }
  v1::Coordinator::Stub& stub() { return *stub_; }

  // SIGTERM to every worker (each must exit 0 unless the test killed it),
  // then to the coordinator.
  void StopAll();

 private:
  // The credentials flags of the coordinator ("coordinator"), the
  // operator ("operator") or worker i ("worker<i+1>").
  std::vector<std::string> CredentialFlags(const std::string& who) const;

  std::string dir_;
  std::string certs_;  // empty = --insecure
  std::string address_;
  int coordinator_metrics_port_ = 0;
  std::unique_ptr<Subprocess> coordinator_;
  std::vector<std::unique_ptr<Subprocess>> workers_;
  std::vector<std::string> logs_;
  std::vector<std::vector<std::string>> worker_argv_;
  std::vector<std::string> worker_flags_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

}  // namespace gasloc::testing

#endif  // GASLOC_TESTS_INTEGRATION_TEST_CLUSTER_H_
