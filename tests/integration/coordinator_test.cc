// The real gasloc-coordinator process with fake workers (gRPC clients in the
// test): registration, a job's assignments, SIGKILL and restart on the same
// SQLite file (the job resumes at the round it reached), status codes and
// messages for bad input, and gaslocctl against it.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "gasloc/v1/coordinator.grpc.pb.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/support/subprocess.h"

namespace gasloc::testing {
namespace {

using ::testing::HasSubstr;

class CoordinatorProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir();
    db_ = absl::StrCat(dir_, "/coordinator_process.sqlite");
    for (const char* suffix : {"", "-wal", "-shm"})
      std::remove((db_ + suffix).c_str());
    port_ = PickFreePort();
    address_ = absl::StrCat("127.0.0.1:", port_);
  }

  void StartCoordinator() {
    auto child = Subprocess::Start(
        {BinaryPath("gasloc-coordinator"), absl::StrCat("--listen=", address_),
         absl::StrCat("--db=", db_), "--lease_ms=5000", "--insecure"},
        absl::StrCat(dir_, "/coordinator_process.log"));
    ASSERT_TRUE(child.ok()) << child.status();
    coordinator_ = std::make_unique<Subprocess>(std::move(*child));
    auto port = coordinator_->WaitForPort(absl::Seconds(20));
    ASSERT_TRUE(port.ok()) << port.status();
    ASSERT_EQ(*port, port_);
    stub_ = v1::Coordinator::NewStub(
        grpc::CreateChannel(address_, grpc::InsecureChannelCredentials()));
  }

  std::unique_ptr<grpc::ClientContext> Ctx() {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return c;
  }

  uint64_t Register(int i) {
    v1::RegisterWorkerRequest req;
    req.mutable_info()->set_address(absl::StrCat("127.0.0.1:", 9000 + i));
    req.mutable_info()->set_cores(2);
    req.mutable_info()->set_software_version("0.1.0");
    v1::RegisterWorkerResponse resp;
    grpc::Status s = stub_->RegisterWorker(Ctx().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.lease_ms(), 5000u);
    return resp.worker_id();
  }

  v1::Assignment Ask(uint64_t worker, uint64_t job, int64_t after,
                     grpc::Status* status = nullptr) {
    v1::GetAssignmentRequest req;
    req.set_worker_id(worker);
    req.set_job_id(job);
    req.set_after_round(after);
    req.set_wait_ms(2000);
    v1::Assignment a;
    grpc::Status s = stub_->GetAssignment(Ctx().get(), req, &a);
    if (status != nullptr) {
      *status = s;
    } else {
      EXPECT_TRUE(s.ok()) << s.error_message();
    }
    return a;
  }

  void Report(uint64_t worker, uint64_t job, uint64_t round) {
    v1::ReportRoundRequest req;
    req.set_worker_id(worker);
    req.set_job_id(job);
    req.set_round(round);
    req.set_inner_steps(10);
    req.set_compute_seconds(1.0);
    req.set_train_loss(3.0f);
    req.set_tokens(500);
    v1::ReportRoundResponse resp;
    grpc::Status s = stub_->ReportRound(Ctx().get(), req, &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
  }

  v1::JobStatus GetJob(uint64_t job, grpc::Status* status = nullptr) {
    v1::GetJobRequest req;
    req.set_job_id(job);
    v1::GetJobResponse resp;
    grpc::Status s = stub_->GetJob(Ctx().get(), req, &resp);
    if (status != nullptr) *status = s;
    return resp.job();
  }

  // Runs gaslocctl; returns (exit code, stdout).
  std::pair<int, std::string> Ctl(std::vector<std::string> args) {
    std::vector<std::string> argv = {BinaryPath("gaslocctl"),
                                     absl::StrCat("--coordinator=", address_),
                                     "--insecure"};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string err = absl::StrCat(dir_, "/gaslocctl.err");
    std::remove(err.c_str());
    auto child = Subprocess::Start(argv, err);
    EXPECT_TRUE(child.ok()) << child.status();
    const std::string out = child->ReadLines(absl::Seconds(20));
    auto status = child->Wait(absl::Seconds(20));
    EXPECT_TRUE(status.ok()) << status.status();
    std::ifstream in(err);
    std::string err_text((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
    last_stderr_ = err_text;
    return {WIFEXITED(*status) ? WEXITSTATUS(*status) : -1, out};
  }

  std::string dir_, db_, address_, last_stderr_;
  int port_ = 0;
  std::unique_ptr<Subprocess> coordinator_;
  std::unique_ptr<v1::Coordinator::Stub> stub_;
};

v1::JobSpec Spec(uint64_t max_rounds) {
  v1::JobSpec spec;
  spec.set_name("integration");
  spec.mutable_data()->set_corpus_path("/data/corpus.txt");
  spec.mutable_stop()->set_max_rounds(max_rounds);
  spec.set_min_workers(2);
  return spec;
}

TEST_F(CoordinatorProcessTest, JobSurvivesSigkillAndRestart) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  const uint64_t a = Register(1), b = Register(2);
  v1::StartJobRequest start;
  *start.mutable_spec() = Spec(100);
  v1::StartJobResponse started;
  ASSERT_TRUE(stub_->StartJob(Ctx().get(), start, &started).ok());
  const uint64_t job = started.job().job_id();

  v1::Assignment a2;
  for (uint64_t r = 0; r < 3; ++r) {
    for (uint64_t w : {a, b}) {
      v1::Assignment as = Ask(w, r == 0 ? 0 : job, static_cast<int64_t>(r) - 1);
      ASSERT_EQ(as.kind(), v1::ASSIGNMENT_KIND_ROUND);
      ASSERT_EQ(as.round(), r);
      EXPECT_EQ(as.job_id(), job);
      EXPECT_EQ(as.peers_size(), 1) << "two workers always pair up";
      EXPECT_EQ(as.peers(0).worker_id(), w == a ? b : a);
      if (w == a && r == 2) a2 = as;
      if (r < 2) Report(w, job, r);
    }
  }
  EXPECT_EQ(GetJob(job).rounds_completed(), 2u);

  coordinator_->Signal(SIGKILL);
  auto killed = coordinator_->Wait(absl::Seconds(10));
  ASSERT_TRUE(killed.ok());
  ASSERT_TRUE(WIFSIGNALED(*killed));
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());

  v1::JobStatus resumed = GetJob(job);
  EXPECT_EQ(resumed.state(), v1::JOB_STATE_RUNNING);
  EXPECT_EQ(resumed.round_planned(), 2u);
  EXPECT_EQ(resumed.rounds_completed(), 2u);
  EXPECT_EQ(resumed.tokens(), 2000u);
  // The workers carry on without re-registering.
  v1::HeartbeatRequest beat;
  beat.set_worker_id(a);
  beat.mutable_progress()->set_job_id(job);
  v1::HeartbeatResponse beat_resp;
  ASSERT_TRUE(stub_->Heartbeat(Ctx().get(), beat, &beat_resp).ok());
  EXPECT_FALSE(beat_resp.abandon_job());
  EXPECT_EQ(Ask(a, job, 1).SerializeAsString(), a2.SerializeAsString())
      << "round 2 as planned before the crash";
  for (uint64_t w : {a, b}) {
    Report(w, job, 2);
    v1::Assignment as = Ask(w, job, 2);
    EXPECT_EQ(as.kind(), v1::ASSIGNMENT_KIND_ROUND);
    EXPECT_EQ(as.round(), 3u);
    EXPECT_EQ(as.epoch(), 1u);
  }
  EXPECT_EQ(GetJob(job).rounds_completed(), 3u);
}

TEST_F(CoordinatorProcessTest, BadInputGetsTheRightStatus) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  v1::StartJobRequest start;
  *start.mutable_spec() = Spec(10);
  start.mutable_spec()->mutable_outer()->set_alpha(3);
  v1::StartJobResponse started;
  grpc::Status s = stub_->StartJob(Ctx().get(), start, &started);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("outer.alpha"));

  GetJob(4242, &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("job 4242"));

  v1::HeartbeatRequest beat;
  beat.set_worker_id(777);
  v1::HeartbeatResponse beat_resp;
  s = stub_->Heartbeat(Ctx().get(), beat, &beat_resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("worker 777"));

  Ask(777, 0, -1, &s);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(s.error_message(), HasSubstr("worker 777"));

  // Stopping a job twice: wrong state.
  *start.mutable_spec() = Spec(10);
  ASSERT_TRUE(stub_->StartJob(Ctx().get(), start, &started).ok());
  v1::StopJobRequest stop;
  stop.set_job_id(started.job().job_id());
  v1::StopJobResponse stopped;
  ASSERT_TRUE(stub_->StopJob(Ctx().get(), stop, &stopped).ok());
  s = stub_->StopJob(Ctx().get(), stop, &stopped);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(s.error_message(), HasSubstr("STOPPED"));
}

TEST_F(CoordinatorProcessTest, GaslocctlDrivesAJobToTheEnd) {
  ASSERT_NO_FATAL_FAILURE(StartCoordinator());
  const std::string spec_path = absl::StrCat(dir_, "/ctl_spec.txt");
  {
    std::ofstream out(spec_path);
    out << "name: \"ctl-job\"\n"
           "data { corpus_path: \"/data/corpus.txt\" }\n"
           "stop { max_rounds: 2 }\n"
           "min_workers: 2\n";
  }
  auto [rc, out] = Ctl({"job", "start", spec_path});
  ASSERT_EQ(rc, 0) << last_stderr_;
  EXPECT_THAT(out, HasSubstr("job 1 (ctl-job) started: PENDING"));

  std::tie(rc, out) = Ctl({"--output=json", "job", "get", "1"});
  ASSERT_EQ(rc, 0) << last_stderr_;
  EXPECT_THAT(out, HasSubstr("\"state\":\"JOB_STATE_PENDING\""));

  std::tie(rc, out) = Ctl({"job", "get", "99"});
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(last_stderr_, "gaslocctl: job 99 not found\n");

  const std::string bad_path = absl::StrCat(dir_, "/ctl_bad.json");
  {
    std::ofstream out(bad_path);
    out << R"({"name": "bad", "data": {"corpus_path": "/x"},
              "stop": {"max_rounds": 1}, "outer": {"lambda": 7}})";
  }
  std::tie(rc, out) = Ctl({"job", "start", bad_path});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(last_stderr_, HasSubstr("outer.lambda"));

  const uint64_t a = Register(1), b = Register(2);
  std::tie(rc, out) = Ctl({"workers"});
  ASSERT_EQ(rc, 0) << last_stderr_;
  EXPECT_THAT(out, HasSubstr("127.0.0.1:9001"));
  EXPECT_THAT(out, HasSubstr("ALIVE"));

  // Watch the job in the background while the fake workers run it.
  std::vector<std::string> argv = {BinaryPath("gaslocctl"),
                                   absl::StrCat("--coordinator=", address_),
                                   "--insecure", "job", "watch", "1"};
  auto watch = Subprocess::Start(argv, absl::StrCat(dir_, "/watch.err"));
  ASSERT_TRUE(watch.ok()) << watch.status();
  ASSERT_TRUE(watch->WaitForLine("job 1", absl::Seconds(10)).ok());
  for (uint64_t r = 0; r < 2; ++r) {
    for (uint64_t w : {a, b}) {
      v1::Assignment as = Ask(w, r == 0 ? 0 : 1, static_cast<int64_t>(r) - 1);
      ASSERT_EQ(as.round(), r);
      Report(w, 1, r);
    }
    if (r != 0) continue;
    // Every member's budget of the latest planned round, with its inputs.
    std::tie(rc, out) = Ctl({"job", "budgets", "1"});
    ASSERT_EQ(rc, 0) << last_stderr_;
    EXPECT_THAT(out, HasSubstr("H_I"));
    EXPECT_THAT(out, HasSubstr("BOUND_BY"));
    EXPECT_THAT(out, HasSubstr("no measurement yet"));
    EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 3) << out;
    std::tie(rc, out) = Ctl({"--output=json", "job", "budgets", "1"});
    ASSERT_EQ(rc, 0) << last_stderr_;
    EXPECT_THAT(out, HasSubstr("\"worker_budgets\""));
  }
  for (uint64_t w : {a, b}) EXPECT_EQ(Ask(w, 1, 1).kind(), v1::ASSIGNMENT_KIND_STOP);
  auto finished = watch->WaitForLine("FINISHED", absl::Seconds(10));
  ASSERT_TRUE(finished.ok()) << finished.status();
  EXPECT_THAT(*finished, HasSubstr("round 2/2"));
  auto status = watch->Wait(absl::Seconds(10));
  ASSERT_TRUE(status.ok());
  EXPECT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 0);

  std::tie(rc, out) = Ctl({"job", "list"});
  ASSERT_EQ(rc, 0);
  EXPECT_THAT(out, HasSubstr("FINISHED"));
  std::tie(rc, out) = Ctl({"job", "budgets", "1"});
  ASSERT_EQ(rc, 0) << last_stderr_;
  EXPECT_THAT(out, HasSubstr("no planned round to show"));
  std::tie(rc, out) = Ctl({"job", "budgets", "99"});
  EXPECT_EQ(rc, 1);
  EXPECT_EQ(last_stderr_, "gaslocctl: job 99 not found\n");
  std::tie(rc, out) = Ctl({"job", "stop", "1"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(last_stderr_, HasSubstr("already JOB_STATE_FINISHED"));

  coordinator_->Signal(SIGTERM);
  ASSERT_TRUE(coordinator_->Wait(absl::Seconds(10)).ok());
  std::tie(rc, out) = Ctl({"job", "list"});
  EXPECT_EQ(rc, 1);
  EXPECT_THAT(last_stderr_, HasSubstr("unreachable"));
}

}  // namespace
}  // namespace gasloc::testing
