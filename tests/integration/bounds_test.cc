// Hostile input against real processes (issue 17 item 2): oversized
// strings in StartJob and RegisterWorker are refused naming the field and
// leave `gaslocctl job list` working; the oversized model spec is refused
// and every worker stays up; a job whose corpus is outside the workers'
// --corpus_root, or is a named pipe, fails with a clear reason within the
// deadline.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/test_cluster.h"
#include "tests/support/wait_for.h"

namespace gasloc::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

class BoundsTest : public ::testing::Test {
 protected:
  BoundsTest() : cluster_("bounds") {}

  void SetUp() override {
    cluster_.StartCoordinator();
    // Workers may read corpora only from <dir>/corpora.
    corpora_ = cluster_.dir() + "/corpora";
    fs::create_directories(corpora_);
    fs::copy_file(Corpus(), corpora_ + "/tiny.txt");
    cluster_.StartWorkers(2, {}, {"--corpus_root=" + corpora_});
    ASSERT_TRUE(WaitForLiveWorkers(2));
  }
  void TearDown() override { cluster_.StopAll(); }

  bool WaitForLiveWorkers(int n) {
    return WaitFor(
        [&] {
          grpc::ClientContext context;
          v1::ListWorkersRequest request;
          v1::ListWorkersResponse response;
          return cluster_.stub().ListWorkers(&context, request, &response).ok() &&
                 response.workers_size() == n;
        },
        absl::Seconds(20), absl::Milliseconds(100));
  }

  grpc::Status StartJob(const v1::JobSpec& spec) {
    grpc::ClientContext context;
    v1::StartJobRequest request;
    *request.mutable_spec() = spec;
    v1::StartJobResponse response;
    return cluster_.stub().StartJob(&context, request, &response);
  }

  // gaslocctl `args`: (exit code, stdout + stderr).
  std::pair<int, std::string> Ctl(const std::vector<std::string>& args) {
    return cluster_.Ctl(args);
  }

  // Every worker process still runs.
  void ExpectWorkersUp() {
    for (int i = 0; i < 2; ++i) {
      auto exited = cluster_.worker(i).Wait(absl::Milliseconds(10));
      EXPECT_FALSE(exited.ok()) << "worker " << i << " exited (status "
                                << *exited << "):\n" << cluster_.WorkerLog(i);
    }
    EXPECT_TRUE(WaitForLiveWorkers(2));
  }

  Cluster cluster_;
  std::string corpora_;
};

TEST_F(BoundsTest, HugeStringsAreRefusedAndJobListStillWorks) {
  v1::JobSpec spec = cluster_.TinySpec(v1::ALGORITHM_GASLOC, 1, 1);
  spec.mutable_data()->set_corpus_path(std::string(5 << 20, 'c'));
  grpc::Status started = StartJob(spec);
  EXPECT_EQ(started.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(started.error_message(), HasSubstr("data.corpus_path"));

  grpc::ClientContext context;
  v1::RegisterWorkerRequest request;
  request.mutable_info()->set_address(std::string(5 << 20, 'a'));
  request.mutable_info()->set_cores(1);
  v1::RegisterWorkerResponse response;
  grpc::Status registered =
      cluster_.stub().RegisterWorker(&context, request, &response);
  EXPECT_EQ(registered.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(registered.error_message(), HasSubstr("info.address"));

  const auto [code, text] = Ctl({"job", "list"});
  EXPECT_EQ(code, 0) << text;
  EXPECT_THAT(text, Not(HasSubstr("larger than max")));
  EXPECT_TRUE(WaitForLiveWorkers(2));
}

TEST_F(BoundsTest, OversizedModelIsRefusedAndEveryWorkerStaysUp) {
  v1::JobSpec spec = cluster_.TinySpec(v1::ALGORITHM_GASLOC, 1, 2);
  spec.mutable_data()->set_corpus_path(corpora_ + "/tiny.txt");
  spec.mutable_model()->set_layers(256);
  spec.mutable_model()->set_d_model(8192);
  spec.mutable_model()->set_heads(64);
  spec.mutable_training()->set_batch(4096);
  spec.mutable_training()->set_threads(1024);
  grpc::Status refused = StartJob(spec);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("model.layers"));
  // Inside the absolute caps, beyond any worker's memory: refused by the
  // workers' reports.
  spec.mutable_model()->set_layers(128);
  spec.mutable_model()->set_d_model(4096);
  spec.mutable_model()->set_heads(32);
  spec.mutable_training()->set_batch(16);
  spec.mutable_training()->set_threads(1);
  refused = StartJob(spec);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(refused.error_message(), HasSubstr("GiB"));
  ExpectWorkersUp();
  // The cluster still trains.
  v1::JobSpec fine = cluster_.TinySpec(v1::ALGORITHM_GASLOC, 1, 2);
  fine.mutable_data()->set_corpus_path(corpora_ + "/tiny.txt");
  const v1::JobStatus done =
      cluster_.WaitForJobEnd(cluster_.StartJob(fine), absl::Seconds(60));
  EXPECT_EQ(done.state(), v1::JOB_STATE_FINISHED) << done.message();
}

// A corpus outside --corpus_root (/etc/shadow), a checkpoint directory
// outside the workers' checkpoint root (/root/.ssh/gasloc) and a named pipe
// inside the root: each job FAILS with the reason from the workers, within
// the deadline, and the workers stay up.
TEST_F(BoundsTest, ForbiddenAndBlockingPathsFailTheJobClearly) {
  ASSERT_EQ(::mkfifo((corpora_ + "/pipe").c_str(), 0600), 0);
  struct Case {
    std::string corpus, checkpoint_dir, reason;
  };
  const std::vector<Case> cases = {
      {.corpus = "/etc/shadow",
       .checkpoint_dir = cluster_.dir() + "/ckpt",
       .reason = "outside the worker's allowed directory"},
      {.corpus = corpora_ + "/tiny.txt",
       .checkpoint_dir = "/root/.ssh/gasloc",
       .reason = "checkpoint.directory /root/.ssh/gasloc"},
      {.corpus = corpora_ + "/pipe",
       .checkpoint_dir = cluster_.dir() + "/ckpt",
       .reason = "pipe"},
  };
  for (const Case& c : cases) {
    v1::JobSpec spec = cluster_.TinySpec(v1::ALGORITHM_GASLOC, 1, 2);
    spec.mutable_data()->set_corpus_path(c.corpus);
    spec.mutable_checkpoint()->set_directory(c.checkpoint_dir);
    const absl::Time start = absl::Now();
    const v1::JobStatus job =
        cluster_.WaitForJobEnd(cluster_.StartJob(spec), absl::Seconds(30));
    EXPECT_EQ(job.state(), v1::JOB_STATE_FAILED) << c.corpus;
    EXPECT_THAT(job.message(), HasSubstr(c.reason));
    EXPECT_LT(absl::Now() - start, absl::Seconds(30));
  }
  ExpectWorkersUp();
}

// A stop reason with terminal escape sequences is stored as sent but
// printed escaped by gaslocctl (job get, job list, job stop).
TEST_F(BoundsTest, GaslocctlEscapesWhatItPrints) {
  v1::JobSpec spec = cluster_.TinySpec(v1::ALGORITHM_GASLOC, 1000, 2);
  spec.mutable_data()->set_corpus_path(corpora_ + "/tiny.txt");
  const uint64_t job = cluster_.StartJob(spec);
  grpc::ClientContext context;
  v1::StopJobRequest stop;
  stop.set_job_id(job);
  stop.set_reason("\x1b]0;pwned\x07\x1b[2J");
  v1::StopJobResponse stopped;
  ASSERT_TRUE(cluster_.stub().StopJob(&context, stop, &stopped).ok());
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"job", "get", absl::StrCat(job)},
        std::vector<std::string>{"job", "list"}}) {
    const auto [code, text] = Ctl(args);
    EXPECT_EQ(code, 0) << text;
    EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
    EXPECT_EQ(text.find('\x07'), std::string::npos) << text;
  }
  EXPECT_THAT(Ctl({"job", "get", absl::StrCat(job)}).second,
              HasSubstr("\\x1b]0;pwned\\x07"));
}

}  // namespace
}  // namespace gasloc::testing
