// Worker daemons against the real coordinator state machine, in one
// process: a CoordinatorLink that calls coordinator::Coordinator directly
// (no gRPC, an in-memory store). Checks what only the two together show: a
// job whose corpus is missing on every worker ends FAILED with the reason.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "coordinator/coordinator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/daemon/direct_link.h"
#include "tests/worker/round/fake_trainer.h"
#include "worker/daemon/worker_daemon.h"
#include "worker/exchange/in_process_transport.h"

namespace gasloc {
namespace {

using ::testing::HasSubstr;

TEST(DaemonWithCoordinator, MissingCorpusOnEveryWorkerFailsTheJobWithTheReason) {
  FakeClock clock;
  clock.SetAutoAdvance(true);
  auto made = coordinator::Coordinator::Create({}, nullptr, &clock);
  ASSERT_TRUE(made.ok()) << made.status();
  std::unique_ptr<coordinator::Coordinator> coord = std::move(*made);
  testing::DirectLink link(coord.get());
  InProcessNetwork network(MailboxOptions{.clock = &clock});

  struct Worker {
    std::unique_ptr<InProcessTransport> transport;
    std::unique_ptr<WorkerDaemon> daemon;
  };
  std::vector<Worker> workers(2);
  for (int i = 0; i < 2; ++i) {
    Worker& w = workers[i];
    w.transport = network.Join(100 + i);
    WorkerDaemonOptions options;
    options.info.set_address(absl::StrCat("inproc:", 100 + i));
    options.info.set_cores(1);
    options.assignment_wait = absl::Milliseconds(50);
    options.clock = &clock;
    TrainerFactory trainers = [](const v1::JobSpec& spec, DataShard, int)
        -> absl::StatusOr<std::unique_ptr<InnerTrainer>> {
      return absl::NotFoundError(absl::StrCat(
          "corpus ", spec.data().corpus_path(), " does not exist"));
    };
    w.daemon = std::make_unique<WorkerDaemon>(options, &link,
                                              w.transport.get(), trainers,
                                              /*model_fetcher=*/nullptr);
    InProcessTransport* transport = w.transport.get();
    w.daemon->SetIdentityListener(
        [transport](uint64_t id) { transport->mailbox().set_self_id(id); });
    ASSERT_TRUE(w.daemon->Register().ok());
  }

  v1::JobSpec spec;
  spec.set_name("no-corpus");
  spec.mutable_data()->set_corpus_path("/nonexistent/gasloc/corpus.txt");
  spec.mutable_stop()->set_max_rounds(20);
  spec.set_min_workers(2);
  auto started = coord->StartJob(spec);
  ASSERT_TRUE(started.ok()) << started.status();
  const uint64_t job = started->job_id();

  v1::JobStatus status;
  for (int poll = 0; poll < 20; ++poll) {
    for (Worker& w : workers) w.daemon->PollOnce();
    status = *coord->GetJob(job);
    if (status.state() != v1::JOB_STATE_RUNNING) break;
  }
  EXPECT_EQ(status.state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(status.message(), HasSubstr("every worker failed to set up"));
  EXPECT_THAT(status.message(), HasSubstr("/nonexistent/gasloc/corpus.txt"));
  EXPECT_LT(status.round_planned(), 5u);  // not run empty to max_rounds
  EXPECT_EQ(status.tokens(), 0u);
  for (Worker& w : workers) w.daemon->Shutdown("test done");
}

}  // namespace
}  // namespace gasloc
