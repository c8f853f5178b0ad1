#include "tests/integration/test_cluster.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "coordinator/round_planner.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "server/credentials.h"
#include "tests/support/test_auth.h"
#include "tests/support/test_corpus.h"
#include "tests/support/wait_for.h"
#include "worker/model/model.h"
#include "worker/train/checkpoint.h"

namespace gasloc::testing {

namespace fs = std::filesystem;

std::string Corpus() {
  return kTinyShakespeare;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Cluster::Cluster(const std::string& name)
    : dir_(absl::StrCat(::testing::TempDir(), "/cluster-", name, "-",
                        getpid())) {
  fs::remove_all(dir_);
  fs::create_directories(dir_);
}

void Cluster::UseMutualTls(int workers) {
  certs_ = absl::StrCat(dir_, "/certs");
  ASSERT_TRUE(MakeTestCerts(certs_, workers).ok());
}

std::vector<std::string> Cluster::CredentialFlags(const std::string& who) const {
  if (certs_.empty()) return {"--insecure"};
  return {absl::StrCat("--tls_cert=", certs_, "/", who, ".pem"),
          absl::StrCat("--tls_key=", certs_, "/", who, ".key"),
          absl::StrCat("--tls_ca=", certs_, "/ca.pem")};
}

void Cluster::StartCoordinator(int metrics_port) {
  coordinator_metrics_port_ = metrics_port;
  std::vector<std::string> argv = {
      BinaryPath("gasloc-coordinator"),
      absl::StrCat("--listen=", address_.empty() ? "127.0.0.1:0" : address_),
      absl::StrCat("--db=", dir_, "/coordinator.sqlite"), "--lease_ms=3000",
      absl::StrCat("--metrics_port=", metrics_port)};
  for (std::string& flag : CredentialFlags("coordinator"))
    argv.push_back(std::move(flag));
  auto child = Subprocess::Start(argv, absl::StrCat(dir_, "/coordinator.log"));
  ASSERT_TRUE(child.ok()) << child.status();
  auto port = child->WaitForPort(absl::Seconds(20));
  ASSERT_TRUE(port.ok()) << port.status();
  address_ = absl::StrCat("127.0.0.1:", *port);
  coordinator_ = std::make_unique<Subprocess>(std::move(*child));
  CredentialsOptions operator_credentials = InsecureCredentials();
  if (!certs_.empty()) {
    operator_credentials.insecure = false;
    operator_credentials.tls_cert_file = absl::StrCat(certs_, "/operator.pem");
    operator_credentials.tls_key_file = absl::StrCat(certs_, "/operator.key");
    operator_credentials.tls_ca_file = absl::StrCat(certs_, "/ca.pem");
  }
  auto channel = MakeChannel(address_, operator_credentials);
  ASSERT_TRUE(channel.ok()) << channel.status();
  stub_ = v1::Coordinator::NewStub(*channel);
}

void Cluster::RestartCoordinator(bool delete_database) {
  coordinator_->Signal(SIGKILL);
  (void)coordinator_->Wait(absl::Seconds(10));
  if (delete_database)
    for (const char* suffix : {"", "-wal", "-shm"})
      fs::remove(absl::StrCat(dir_, "/coordinator.sqlite", suffix));
  StartCoordinator(coordinator_metrics_port_);  // on address_
}

void Cluster::StartWorkers(int n, const std::vector<int>& metrics_ports,
                           const std::vector<std::string>& extra_args) {
  for (int i = 0; i < n; ++i) {
    const std::string log = absl::StrCat(dir_, "/worker", workers_.size(), ".log");
    std::vector<std::string> argv = {
        BinaryPath("gasloc-worker"), absl::StrCat("--coordinator=", address_),
        "--listen=127.0.0.1:0", "--threads=1",
        // One state directory per worker (its stable name and lock).
        absl::StrCat("--data_dir=", dir_, "/worker", workers_.size()),
        // The specs' checkpoint directory is <dir>/ckpt, shared.
        absl::StrCat("--checkpoint_root=", dir_)};
    for (std::string& flag :
         CredentialFlags(absl::StrCat("worker", workers_.size() + 1)))
      argv.push_back(std::move(flag));
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    if (i < static_cast<int>(metrics_ports.size()) && metrics_ports[i] != 0)
      argv.push_back(absl::StrCat("--metrics_port=", metrics_ports[i]));
    argv.insert(argv.end(), worker_flags_.begin(), worker_flags_.end());
    auto child = Subprocess::Start(argv, log);
    ASSERT_TRUE(child.ok()) << child.status();
    ASSERT_TRUE(child->WaitForPort(absl::Seconds(20)).ok());
    workers_.push_back(std::make_unique<Subprocess>(std::move(*child)));
    logs_.push_back(log);
    worker_argv_.push_back(argv);
  }
}

void Cluster::RestartWorker(int i) {
  auto child = Subprocess::Start(worker_argv_[i], logs_[i]);
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_TRUE(child->WaitForPort(absl::Seconds(20)).ok());
  *workers_[i] = std::move(*child);
}

absl::StatusOr<v1::JobStatus> Cluster::GetJob(uint64_t job_id) {
  grpc::ClientContext context;
  v1::GetJobRequest request;
  request.set_job_id(job_id);
  v1::GetJobResponse response;
  grpc::Status status = stub_->GetJob(&context, request, &response);
  if (!status.ok())
    return absl::UnavailableError(absl::StrCat(
        "GetJob ", job_id, ": ", status.error_message()));
  return response.job();
}

std::pair<int, std::string> Cluster::Ctl(
    const std::vector<std::string>& args) {
  const std::string out = dir_ + "/ctl.txt";
  fs::remove(out);
  std::vector<std::string> argv = {BinaryPath("gaslocctl"),
                                   "--coordinator=" + address_};
  for (std::string& flag : CredentialFlags("operator"))
    argv.push_back(std::move(flag));
  argv.insert(argv.end(), args.begin(), args.end());
  auto child = Subprocess::Start(argv, out);
  EXPECT_TRUE(child.ok()) << child.status();
  if (!child.ok()) return {-1, ""};
  std::string text = child->ReadLines(absl::Seconds(20));
  auto status = child->Wait(absl::Seconds(20));
  EXPECT_TRUE(status.ok());
  text += ReadFile(out);
  return {status.ok() && WIFEXITED(*status) ? WEXITSTATUS(*status) : -1,
          text};
}

v1::JobSpec Cluster::TinySpec(v1::Algorithm algorithm, int rounds, int workers) {
  v1::JobSpec spec;
  spec.set_name("e2e");
  auto* m = spec.mutable_model();
  m->set_layers(1);
  m->set_d_model(32);
  m->set_heads(2);
  m->set_context(32);
  spec.mutable_training()->set_batch(8);
  spec.mutable_training()->set_threads(1);
  spec.mutable_training()->mutable_adamw()->set_lr(3e-3f);
  spec.mutable_training()->mutable_adamw()->set_warmup_steps(5);
  spec.mutable_data()->set_corpus_path(Corpus());
  spec.mutable_data()->set_eval_windows(16);
  spec.mutable_data()->set_eval_interval_rounds(1);
  spec.mutable_outer()->set_algorithm(algorithm);
  spec.mutable_outer()->set_local_steps(8);
  spec.mutable_exchange()->set_deadline_ms(5000);
  spec.mutable_exchange()->set_chunk_bytes(16384);
  spec.mutable_checkpoint()->set_directory(absl::StrCat(dir_, "/ckpt"));
  spec.mutable_checkpoint()->set_interval_rounds(1);
  spec.mutable_stop()->set_max_rounds(rounds);
  spec.set_min_workers(workers);
  return spec;
}

uint64_t Cluster::StartJob(const v1::JobSpec& spec) {
  grpc::ClientContext context;
  v1::StartJobRequest request;
  *request.mutable_spec() = spec;
  v1::StartJobResponse response;
  grpc::Status status = stub_->StartJob(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return status.ok() ? response.job().job_id() : 0;
}

v1::JobStatus Cluster::WaitForJobEnd(uint64_t job_id, absl::Duration timeout) {
  if (job_id == 0) return {};
  v1::JobStatus job;
  const bool ended = WaitFor(
      [&] {
        if (auto now = GetJob(job_id); now.ok()) job = *now;
        return coordinator::IsEnded(job.state());
      },
      timeout, absl::Milliseconds(200));
  if (ended) return job;
  ADD_FAILURE() << "job " << job_id << " did not end in time; last state "
                << v1::JobState_Name(job.state()) << ", logs in " << dir_;
  return job;
}

void Cluster::CheckpointedParams(std::vector<std::vector<float>>* out) {
  auto& params = *out;
  for (const auto& entry : fs::directory_iterator(absl::StrCat(dir_, "/ckpt"))) {
    if (entry.path().extension() != ".ckpt") continue;  // previous ones: .ckpt.1
    auto config = ReadCheckpointConfig(entry.path().string());
    ASSERT_TRUE(config.ok()) << entry.path() << ": " << config.status();
    auto state =
        ReadCheckpoint(entry.path().string(), MakeModelLayout(*config));
    ASSERT_TRUE(state.ok()) << entry.path() << ": " << state.status();
    const auto flat = (*state)->params.flat();
    params.emplace_back(flat.begin(), flat.end());
  }
}

void Cluster::StopAll() {
  for (auto& w : workers_) w->Signal(SIGTERM);
  for (auto& w : workers_) {
    auto status = w->Wait(absl::Seconds(20));
    if (status.ok() && WIFSIGNALED(*status) && WTERMSIG(*status) == SIGKILL)
      continue;  // killed on purpose by the test
    if (status.ok()) {
      EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0)
          << "worker exited with status " << *status << "; logs in " << dir_;
    }
  }
  coordinator_->Signal(SIGTERM);
  (void)coordinator_->Wait(absl::Seconds(10));
}

}  // namespace gasloc::testing
