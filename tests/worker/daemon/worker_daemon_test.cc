// The worker daemon's control loop against a fake coordinator (no network,
// no gRPC): registration through an unavailable coordinator, dropped
// heartbeats, a coordinator that restarts and forgets the worker (NOT_FOUND
// on heartbeats and polls), a job whose corpus is missing, rounds reported
// and checkpointed when due, and Run() / Shutdown(). Every wait of the
// daemon is on a FakeClock: back-offs are seen as exact clock moves, never
// slept.
#include "worker/daemon/worker_daemon.h"

#include <deque>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <new>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/round/fake_trainer.h"
#include "worker/exchange/in_process_transport.h"
#include "worker/train/checkpoint.h"

namespace gasloc {
namespace {

using ::testing::HasSubstr;
using testing::FakeLayout;
using testing::FakeTrainer;

constexpr absl::Duration kBackoff = absl::Milliseconds(500);

// A coordinator in memory whose failures the test chooses.
class FakeCoordinator final : public CoordinatorLink {
 public:
  absl::StatusOr<v1::RegisterWorkerResponse> Register(
      const v1::WorkerInfo& info) override {
    absl::MutexLock lock(&mu_);
    ++registers_;
    if (unavailable_registers_ > 0) {
      --unavailable_registers_;
      return absl::UnavailableError("coordinator starting");
    }
    v1::RegisterWorkerResponse response;
    response.set_worker_id(next_id_);
    response.set_lease_ms(6000);
    known_.push_back(next_id_++);
    return response;
  }
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request) override {
    absl::MutexLock lock(&mu_);
    heartbeats_.push_back(request);
    if (dropped_heartbeats_ > 0) {
      --dropped_heartbeats_;
      return absl::UnavailableError("heartbeat lost");
    }
    if (!KnownLocked(request.worker_id()))
      return absl::NotFoundError(
          absl::StrCat("unknown worker ", request.worker_id()));
    v1::HeartbeatResponse response;
    response.set_lease_ms(6000);
    return response;
  }
  absl::Status Leave(uint64_t worker_id, const std::string& reason) override {
    absl::MutexLock lock(&mu_);
    left_.push_back(worker_id);
    return absl::OkStatus();
  }
  absl::StatusOr<v1::Assignment> GetAssignment(
      const v1::GetAssignmentRequest& request) override {
    std::function<void()> when_empty;
    {
      absl::MutexLock lock(&mu_);
      polls_.push_back(request);
      if (cancelled_) return absl::CancelledError("cancelled");
      if (!KnownLocked(request.worker_id()))
        return absl::NotFoundError(
            absl::StrCat("unknown worker ", request.worker_id()));
      if (forgotten_jobs_.count(request.job_id()))
        return WithErrorKind(absl::NotFoundError(absl::StrCat(
                                 "job ", request.job_id(), " not found")),
                             kJobNotFound);
      if (!assignments_.empty()) {
        v1::Assignment next = assignments_.front();
        assignments_.pop_front();
        return next;
      }
      when_empty = when_empty_;
    }
    if (when_empty) when_empty();
    v1::Assignment none;
    none.set_kind(v1::ASSIGNMENT_KIND_NONE);
    return none;
  }
  absl::Status ReportRound(const v1::ReportRoundRequest& request) override {
    absl::MutexLock lock(&mu_);
    ++report_calls_;
    if (unavailable_reports_ > 0) {
      --unavailable_reports_;
      return absl::UnavailableError("coordinator down");
    }
    if (!KnownLocked(request.worker_id()))
      return absl::NotFoundError("unknown worker");
    if (forgotten_jobs_.count(request.job_id()))
      return WithErrorKind(absl::NotFoundError(absl::StrCat(
                               "job ", request.job_id(), " not found")),
                           kJobNotFound);
    reports_.push_back(request);
    return absl::OkStatus();
  }
  void CancelWaits() override {
    absl::MutexLock lock(&mu_);
    cancelled_ = true;
  }

  // The coordinator restarts without its state: every worker is unknown.
  void Restart() {
    absl::MutexLock lock(&mu_);
    known_.clear();
  }
  // A new worker process after one that shut down (CancelWaits).
  void Reopen() {
    absl::MutexLock lock(&mu_);
    cancelled_ = false;
  }
  // The coordinator lost its database: `job` is unknown (NOT_FOUND).
  void ForgetJob(uint64_t job) {
    absl::MutexLock lock(&mu_);
    forgotten_jobs_.insert(job);
  }
  void FailReports(int n) {
    absl::MutexLock lock(&mu_);
    unavailable_reports_ = n;
  }
  int report_calls() const {
    absl::MutexLock lock(&mu_);
    return report_calls_;
  }
  std::vector<v1::GetAssignmentRequest> polls() const {
    absl::MutexLock lock(&mu_);
    return polls_;
  }
  void FailRegistrations(int n) {
    absl::MutexLock lock(&mu_);
    unavailable_registers_ = n;
  }
  void DropHeartbeats(int n) {
    absl::MutexLock lock(&mu_);
    dropped_heartbeats_ = n;
  }
  void Hand(v1::Assignment assignment) {
    absl::MutexLock lock(&mu_);
    assignments_.push_back(std::move(assignment));
  }
  // Called (outside the lock) when a poll finds no assignment left.
  void WhenEmpty(std::function<void()> f) {
    absl::MutexLock lock(&mu_);
    when_empty_ = std::move(f);
  }

  int registers() const {
    absl::MutexLock lock(&mu_);
    return registers_;
  }
  std::vector<v1::HeartbeatRequest> heartbeats() const {
    absl::MutexLock lock(&mu_);
    return heartbeats_;
  }
  std::vector<v1::ReportRoundRequest> reports() const {
    absl::MutexLock lock(&mu_);
    return reports_;
  }
  std::vector<uint64_t> left() const {
    absl::MutexLock lock(&mu_);
    return left_;
  }

 private:
  bool KnownLocked(uint64_t id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return std::find(known_.begin(), known_.end(), id) != known_.end();
  }

  mutable absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<uint64_t> known_ ABSL_GUARDED_BY(mu_);
  int registers_ ABSL_GUARDED_BY(mu_) = 0;
  int unavailable_registers_ ABSL_GUARDED_BY(mu_) = 0;
  int dropped_heartbeats_ ABSL_GUARDED_BY(mu_) = 0;
  int unavailable_reports_ ABSL_GUARDED_BY(mu_) = 0;
  int report_calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::set<uint64_t> forgotten_jobs_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<v1::Assignment> assignments_ ABSL_GUARDED_BY(mu_);
  std::function<void()> when_empty_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::HeartbeatRequest> heartbeats_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::GetAssignmentRequest> polls_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::ReportRoundRequest> reports_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> left_ ABSL_GUARDED_BY(mu_);
};

// The fake trainer with real checkpoint files (worker/train/checkpoint.h:
// checked, all or nothing), which records the file it loaded.
class FileTrainer final : public FakeTrainer {
 public:
  explicit FileTrainer(std::shared_ptr<const ArenaLayout> layout)
      : FakeTrainer(layout, 1.0f), layout_(std::move(layout)) {}
  absl::Status SaveCheckpoint(const std::string& path,
                              const CheckpointExtras& outer) override {
    CheckpointView view;
    view.params = view.adam_m = view.adam_v = &params();
    view.extras = &outer;
    return WriteCheckpoint(path, view);
  }
  absl::StatusOr<CheckpointExtras> LoadCheckpoint(
      const std::string& path, const CheckpointCheck& check) override {
    auto state = ReadCheckpoint(path, layout_);
    if (!state.ok()) return state.status();
    if (check) {
      absl::Status accepted = check((*state)->extras);
      if (!accepted.ok()) return accepted;
    }
    params().CopyFrom((*state)->params);
    loaded_from_ = path;
    return (*state)->extras;
  }
  const std::string& loaded_from() const { return loaded_from_; }

 private:
  std::shared_ptr<const ArenaLayout> layout_;
  std::string loaded_from_;
};

// A job of one worker alone (no peers): GASLoC on the fake trainer.
v1::JobSpec Spec(const std::string& corpus) {
  v1::JobSpec spec;
  spec.set_name("daemon-test");
  spec.mutable_data()->set_corpus_path(corpus);
  spec.mutable_data()->set_eval_interval_rounds(0);
  spec.mutable_stop()->set_max_rounds(100);
  spec.mutable_outer()->set_algorithm(v1::ALGORITHM_GASLOC);
  spec.mutable_exchange()->set_chunk_bytes(4096);
  return spec;
}

v1::Assignment Round(uint64_t job, uint64_t round, const v1::JobSpec& spec) {
  v1::Assignment a;
  a.set_kind(v1::ASSIGNMENT_KIND_ROUND);
  a.set_job_id(job);
  a.set_round(round);
  a.set_local_steps(3);
  a.set_alpha(0.5f);
  a.set_num_workers(1);
  *a.mutable_spec() = spec;
  return a;
}

v1::Assignment Stop(uint64_t job) {
  v1::Assignment a;
  a.set_kind(v1::ASSIGNMENT_KIND_STOP);
  a.set_job_id(job);
  a.set_message("done");
  return a;
}

class WorkerDaemonTest : public ::testing::Test {
 protected:
  WorkerDaemonTest()
      : network_(MailboxOptions{.clock = &clock_}),
        transport_(network_.Join(100)),
        corpus_(std::filesystem::temp_directory_path() /
                absl::StrCat("gasloc-daemon-test-", getpid(), ".txt")) {
    std::ofstream(corpus_) << "some training text";
    clock_.SetAutoAdvance(true);  // the test thread is the only waiter
    WorkerDaemonOptions options;
    options.info.set_address("inproc:100");
    options.retry_backoff = kBackoff;
    options.assignment_wait = absl::Milliseconds(100);
    options.clock = &clock_;
    // Like a real trainer: a job whose corpus is not there cannot start.
    TrainerFactory trainers = [this](const v1::JobSpec& spec, DataShard shard,
                                     int threads)
        -> absl::StatusOr<std::unique_ptr<InnerTrainer>> {
      shards_.push_back(shard);
      if (throw_bad_alloc_) throw std::bad_alloc();
      if (!std::filesystem::exists(spec.data().corpus_path()))
        return absl::NotFoundError(absl::StrCat(
            "corpus ", spec.data().corpus_path(), " does not exist"));
      auto trainer = std::make_unique<FakeTrainer>(FakeLayout(), 1.0f);
      trainer_ = trainer.get();
      return std::unique_ptr<InnerTrainer>(std::move(trainer));
    };
    daemon_ = std::make_unique<WorkerDaemon>(options, &coordinator_,
                                             transport_.get(), trainers,
                                             /*model_fetcher=*/nullptr);
    daemon_->SetIdentityListener([this](uint64_t id) {
      ids_.push_back(id);
      transport_->mailbox().set_self_id(id);
    });
  }
  ~WorkerDaemonTest() override {
    daemon_.reset();
    std::filesystem::remove(corpus_);
  }

  // A registered daemon with a state directory and stable name, whose
  // trainers (FileTrainer: real checkpoint files) go to `trainers`.
  std::unique_ptr<WorkerDaemon> StartWithState(
      uint64_t address, const std::string& data_dir, const std::string& name,
      int kept, std::vector<FileTrainer*>* trainers) {
    WorkerDaemonOptions options;
    options.info.set_address(absl::StrCat("inproc:", address));
    options.retry_backoff = kBackoff;
    options.assignment_wait = absl::Milliseconds(100);
    options.clock = &clock_;
    options.data_dir = data_dir;
    options.name = name;
    options.checkpoints_kept = kept;
    TrainerFactory factory = [trainers](const v1::JobSpec&, DataShard, int)
        -> absl::StatusOr<std::unique_ptr<InnerTrainer>> {
      auto trainer = std::make_unique<FileTrainer>(FakeLayout());
      trainers->push_back(trainer.get());
      return std::unique_ptr<InnerTrainer>(std::move(trainer));
    };
    auto daemon = std::make_unique<WorkerDaemon>(options, &coordinator_,
                                                 transport_.get(), factory,
                                                 /*model_fetcher=*/nullptr);
    daemon->SetIdentityListener(
        [this](uint64_t id) { transport_->mailbox().set_self_id(id); });
    EXPECT_TRUE(daemon->Register().ok());
    return daemon;
  }

  FakeClock clock_;
  FakeCoordinator coordinator_;
  InProcessNetwork network_;
  std::unique_ptr<InProcessTransport> transport_;
  std::filesystem::path corpus_;
  std::vector<uint64_t> ids_;
  std::vector<DataShard> shards_;
  FakeTrainer* trainer_ = nullptr;  // the last one built
  bool throw_bad_alloc_ = false;    // the trainer factory runs out of memory
  std::unique_ptr<WorkerDaemon> daemon_;
};

TEST_F(WorkerDaemonTest, RegistersThroughAnUnavailableCoordinator) {
  coordinator_.FailRegistrations(3);
  const absl::Time start = clock_.Now();
  auto id = daemon_->Register();
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, 1u);
  EXPECT_EQ(coordinator_.registers(), 4);
  EXPECT_EQ(clock_.Now() - start, 3 * kBackoff);  // one back-off per refusal
  EXPECT_THAT(ids_, ::testing::ElementsAre(1u));
  EXPECT_EQ(transport_->self_id(), 1u);
}

TEST_F(WorkerDaemonTest, DroppedHeartbeatsAreRetriedWithoutReregistering) {
  ASSERT_TRUE(daemon_->Register().ok());
  coordinator_.DropHeartbeats(2);
  EXPECT_EQ(daemon_->HeartbeatOnce(), absl::Seconds(1));  // retry soon
  EXPECT_EQ(daemon_->HeartbeatOnce(), absl::Seconds(1));
  EXPECT_EQ(daemon_->HeartbeatOnce(), absl::Seconds(2));  // lease / 3
  EXPECT_EQ(coordinator_.registers(), 1);
  for (const auto& beat : coordinator_.heartbeats())
    EXPECT_EQ(beat.worker_id(), 1u);
}

TEST_F(WorkerDaemonTest, RunsRoundsReportsThemAndCheckpointsWhenDue) {
  ASSERT_TRUE(daemon_->Register().ok());
  const std::string dir = ::testing::TempDir() + "daemon-ckpt";
  v1::JobSpec spec = Spec(corpus_.string());
  spec.mutable_checkpoint()->set_directory(dir);
  spec.mutable_checkpoint()->set_interval_rounds(2);
  for (uint64_t r = 0; r < 3; ++r) coordinator_.Hand(Round(7, r, spec));
  const std::string path = dir + "/job7-w1.ckpt";
  daemon_->PollOnce();
  ASSERT_NE(trainer_, nullptr);
  EXPECT_EQ(daemon_->job_id(), 7u);
  EXPECT_FALSE(trainer_->HasCheckpoint(path));  // round 0: not due
  daemon_->PollOnce();
  EXPECT_TRUE(trainer_->HasCheckpoint(path));  // round 1: due (every 2)
  daemon_->PollOnce();
  auto reports = coordinator_.reports();
  ASSERT_EQ(reports.size(), 3u);
  for (uint64_t r = 0; r < 3; ++r) {
    EXPECT_EQ(reports[r].worker_id(), 1u);
    EXPECT_EQ(reports[r].job_id(), 7u);
    EXPECT_EQ(reports[r].round(), r);
    EXPECT_EQ(reports[r].inner_steps(), 3u);
  }
  ASSERT_EQ(shards_.size(), 1u);  // one trainer for the whole job
  EXPECT_EQ(shards_[0].rank, 0);
  EXPECT_EQ(shards_[0].num_workers, 1);
  EXPECT_TRUE(daemon_->last_error().ok()) << daemon_->last_error();
  coordinator_.Hand(Stop(7));
  daemon_->PollOnce();
  EXPECT_EQ(daemon_->job_id(), 0u);  // idle again
}

// The coordinator restarts and forgets every worker (its database was
// lost): polls and heartbeats answer NOT_FOUND. The daemon backs off,
// registers again (a new id, which the transport learns), drops the job it
// held and runs the next one under the new id.
TEST_F(WorkerDaemonTest, CoordinatorThatForgotTheWorkerGetsItBack) {
  ASSERT_TRUE(daemon_->Register().ok());
  const v1::JobSpec spec = Spec(corpus_.string());
  coordinator_.Hand(Round(7, 0, spec));
  daemon_->PollOnce();
  coordinator_.Restart();
  // The new database's first job: the same id as the old one.
  coordinator_.Hand(Round(7, 0, spec));

  const absl::Time start = clock_.Now();
  daemon_->PollOnce();  // NOT_FOUND: nothing runs, the daemon backs off
  EXPECT_EQ(clock_.Now() - start, kBackoff);
  EXPECT_EQ(coordinator_.reports().size(), 1u);

  EXPECT_EQ(daemon_->HeartbeatOnce(), absl::Seconds(1));  // NOT_FOUND
  EXPECT_EQ(coordinator_.registers(), 2);
  EXPECT_EQ(daemon_->worker_id(), 2u);
  EXPECT_THAT(ids_, ::testing::ElementsAre(1u, 2u));
  EXPECT_EQ(daemon_->HeartbeatOnce(), absl::Seconds(2));  // known again
  EXPECT_EQ(coordinator_.heartbeats().back().worker_id(), 2u);

  // Registered anew, the worker is no member of the job it held: it drops
  // it and asks for any job; the new job 7 gets a new trainer (not the old
  // job's model). Before, it asked for round 1 of "its" job 7 forever
  // (INVALID_ARGUMENT from a real coordinator: ahead of the new job).
  daemon_->PollOnce();
  EXPECT_EQ(coordinator_.polls().back().job_id(), 0u);
  EXPECT_EQ(coordinator_.polls().back().after_round(), -1);
  auto reports = coordinator_.reports();
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[1].round(), 0u);
  EXPECT_EQ(reports[1].worker_id(), 2u);
  EXPECT_EQ(shards_.size(), 2u);
}

// A job whose corpus is missing cannot be set up: the daemon reports the
// error (log, metrics, last_error) naming the job, round and path, keeps
// nothing of the job, and runs the next job normally.
TEST_F(WorkerDaemonTest, JobWithAMissingCorpusIsAnErrorNotACrash) {
  ASSERT_TRUE(daemon_->Register().ok());
  coordinator_.Hand(Round(9, 0, Spec("/nonexistent/gasloc/corpus.txt")));
  const absl::Time start = clock_.Now();
  daemon_->PollOnce();
  const absl::Status error = daemon_->last_error();
  EXPECT_EQ(error.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(error.message(), HasSubstr("job 9 round 0"));
  EXPECT_THAT(error.message(), HasSubstr("cannot set up the job"));
  EXPECT_THAT(error.message(), HasSubstr("/nonexistent/gasloc/corpus.txt"));
  EXPECT_EQ(daemon_->job_id(), 0u);
  EXPECT_EQ(coordinator_.heartbeats().size(), 0u);
  EXPECT_EQ(daemon_->HeartbeatOnce(), absl::Seconds(2));
  EXPECT_EQ(coordinator_.heartbeats().back().progress().activity(),
            v1::WORKER_ACTIVITY_IDLE);
  // The coordinator hears of it, with the reason.
  ASSERT_EQ(coordinator_.reports().size(), 1u);
  const v1::ReportRoundRequest failure = coordinator_.reports()[0];
  EXPECT_EQ(failure.job_id(), 9u);
  EXPECT_EQ(failure.round(), 0u);
  EXPECT_EQ(failure.worker_id(), 1u);
  EXPECT_EQ(failure.outcome(), v1::ROUND_OUTCOME_SETUP_FAILED);
  EXPECT_THAT(failure.error(), HasSubstr("/nonexistent/gasloc/corpus.txt"));
  EXPECT_EQ(failure.inner_steps(), 0u);
  EXPECT_EQ(clock_.Now() - start, kBackoff);  // backs off before asking again

  coordinator_.Hand(Stop(9));
  coordinator_.Hand(Round(10, 0, Spec(corpus_.string())));
  daemon_->PollOnce();
  daemon_->PollOnce();
  ASSERT_EQ(coordinator_.reports().size(), 2u);
  EXPECT_EQ(coordinator_.reports()[1].job_id(), 10u);
  EXPECT_EQ(coordinator_.reports()[1].outcome(), v1::ROUND_OUTCOME_COMPLETED);
}

// Allocation failure while setting up a job is an error reported for the
// job (SETUP_FAILED), never an abort; the daemon takes the next job.
TEST_F(WorkerDaemonTest, OutOfMemoryIsAnErrorNotAnAbort) {
  ASSERT_TRUE(daemon_->Register().ok());
  throw_bad_alloc_ = true;
  coordinator_.Hand(Round(12, 0, Spec(corpus_.string())));
  daemon_->PollOnce();
  EXPECT_EQ(daemon_->last_error().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(daemon_->last_error().message(), HasSubstr("out of memory"));
  ASSERT_EQ(coordinator_.reports().size(), 1u);
  EXPECT_EQ(coordinator_.reports()[0].outcome(),
            v1::ROUND_OUTCOME_SETUP_FAILED);
  EXPECT_THAT(coordinator_.reports()[0].error(), HasSubstr("bad_alloc"));
  throw_bad_alloc_ = false;
  coordinator_.Hand(Round(12, 0, Spec(corpus_.string())));
  daemon_->PollOnce();
  ASSERT_EQ(coordinator_.reports().size(), 2u);
  EXPECT_EQ(coordinator_.reports()[1].outcome(), v1::ROUND_OUTCOME_COMPLETED);
}

// A job bigger than the memory this worker measured is refused before
// anything is allocated (no trainer built), naming the fields.
TEST_F(WorkerDaemonTest, JobLargerThanThisWorkerIsRefusedBeforeAllocating) {
  WorkerDaemonOptions options;
  options.info.set_address("inproc:100");
  options.info.set_cores(2);
  options.info.set_memory_bytes(uint64_t{1} << 30);
  options.retry_backoff = kBackoff;
  options.clock = &clock_;
  options.corpus_root = corpus_.parent_path().string();
  daemon_.reset();
  coordinator_.Reopen();  // the destroyed daemon cancelled its waits
  daemon_ = std::make_unique<WorkerDaemon>(
      options, &coordinator_, transport_.get(),
      [this](const v1::JobSpec&, DataShard shard, int)
          -> absl::StatusOr<std::unique_ptr<InnerTrainer>> {
        shards_.push_back(shard);
        return std::unique_ptr<InnerTrainer>(
            std::make_unique<FakeTrainer>(FakeLayout(), 1.0f));
      },
      /*model_fetcher=*/nullptr);
  ASSERT_TRUE(daemon_->Register().ok());
  v1::JobSpec big = Spec(corpus_.string());
  big.mutable_model()->set_layers(128);
  big.mutable_model()->set_d_model(4096);
  big.mutable_model()->set_heads(32);
  coordinator_.Hand(Round(13, 0, big));
  daemon_->PollOnce();
  EXPECT_EQ(daemon_->last_error().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(daemon_->last_error().message(), HasSubstr("model.layers"));
  EXPECT_TRUE(shards_.empty());
  // A corpus outside --corpus_root is refused too.
  coordinator_.Hand(Round(14, 0, Spec("/etc/shadow")));
  daemon_->PollOnce();
  EXPECT_EQ(daemon_->last_error().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(daemon_->last_error().message(),
              HasSubstr("data.corpus_path /etc/shadow"));
  EXPECT_THAT(daemon_->last_error().message(), HasSubstr("outside"));
  EXPECT_TRUE(shards_.empty());  // So is a model.init_from outside it (a job could otherwise probe any
  // file's first bytes through the import's errors).
  v1::JobSpec imported = Spec(corpus_.string());
  imported.mutable_model()->set_init_from("/etc");
  coordinator_.Hand(Round(15, 0, imported));
  daemon_->PollOnce();
  EXPECT_EQ(daemon_->last_error().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(daemon_->last_error().message(),
              HasSubstr("model.init_from /etc"));
  EXPECT_TRUE(shards_.empty());
}

TEST_F(WorkerDaemonTest, InvalidJobSpecIsAnErrorNotACrash) {
  ASSERT_TRUE(daemon_->Register().ok());
  v1::JobSpec spec = Spec(corpus_.string());
  spec.mutable_data()->clear_corpus_path();
  coordinator_.Hand(Round(11, 0, spec));
  daemon_->PollOnce();
  EXPECT_EQ(daemon_->last_error().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(daemon_->last_error().message(),
              HasSubstr("data.corpus_path is required"));
  EXPECT_TRUE(shards_.empty());  // no trainer was built
}

// A round report sent while the coordinator is down is retried with a
// doubling back-off until accepted, never dropped.
TEST_F(WorkerDaemonTest, RoundReportIsRetriedUntilTheCoordinatorTakesIt) {
  ASSERT_TRUE(daemon_->Register().ok());
  coordinator_.Hand(Round(7, 0, Spec(corpus_.string())));
  coordinator_.FailReports(3);
  const absl::Time start = clock_.Now();
  daemon_->PollOnce();
  EXPECT_EQ(coordinator_.report_calls(), 4);
  ASSERT_EQ(coordinator_.reports().size(), 1u);
  EXPECT_EQ(coordinator_.reports()[0].round(), 0u);
  EXPECT_EQ(coordinator_.reports()[0].job_id(), 7u);
  EXPECT_EQ(clock_.Now() - start, kBackoff + 2 * kBackoff + 4 * kBackoff);
  EXPECT_TRUE(daemon_->last_error().ok()) << daemon_->last_error();
}

// The coordinator lost its database: the job the worker runs is unknown
// (NOT_FOUND "job 7 not found"). The worker drops it and takes new work
// instead of asking for job 7 forever.
TEST_F(WorkerDaemonTest, AJobTheCoordinatorNoLongerKnowsIsDropped) {
  ASSERT_TRUE(daemon_->Register().ok());
  const v1::JobSpec spec = Spec(corpus_.string());
  coordinator_.Hand(Round(7, 0, spec));
  daemon_->PollOnce();
  ASSERT_EQ(daemon_->job_id(), 7u);
  coordinator_.ForgetJob(7);
  daemon_->PollOnce();  // NOT_FOUND for the job: dropped
  EXPECT_EQ(daemon_->job_id(), 0u);
  coordinator_.Hand(Round(8, 0, spec));
  daemon_->PollOnce();
  EXPECT_EQ(coordinator_.polls().back().job_id(), 0u);  // any job
  EXPECT_EQ(daemon_->job_id(), 8u);
  ASSERT_EQ(coordinator_.reports().size(), 2u);
  EXPECT_EQ(coordinator_.reports()[1].job_id(), 8u);
}

// A worker restarted (a new process: a new worker id) finds its own
// checkpoints by its stable name, under --data_dir for a relative
// checkpoint directory; the latest is half written, so it resumes from the
// previous one (kept by the rotation) instead of from initial weights.
TEST_F(WorkerDaemonTest, RestartedWorkerResumesFromItsPreviousCheckpoint) {
  const std::string data_dir = ::testing::TempDir() + "daemon-state-" +
                               std::to_string(getpid());
  std::filesystem::remove_all(data_dir);
  auto name = LoadOrCreateWorkerName(data_dir);
  ASSERT_TRUE(name.ok()) << name.status();
  EXPECT_EQ(*LoadOrCreateWorkerName(data_dir), *name);  // stable
  v1::JobSpec spec = Spec(corpus_.string());
  spec.mutable_checkpoint()->set_directory("ckpt");  // under data_dir
  spec.mutable_checkpoint()->set_interval_rounds(1);
  std::vector<FileTrainer*> trainers;
  auto start = [&](uint64_t address) {
    return StartWithState(address, data_dir, *name, /*kept=*/2, &trainers);
  };
  auto first = start(100);
  coordinator_.Hand(Round(7, 0, spec));
  coordinator_.Hand(Round(7, 1, spec));
  first->PollOnce();
  first->PollOnce();
  const std::string latest =
      absl::StrCat(data_dir, "/ckpt/job7-", *name, ".ckpt");
  ASSERT_TRUE(std::filesystem::exists(latest));
  ASSERT_TRUE(std::filesystem::exists(latest + ".1"));  // the previous one
  first.reset();  // the process dies
  coordinator_.Reopen();

  std::filesystem::resize_file(latest, std::filesystem::file_size(latest) / 2);
  auto second = start(100);
  EXPECT_EQ(second->worker_id(), 2u);  // a new id, same name
  coordinator_.Hand(Round(7, 2, spec));
  second->PollOnce();
  EXPECT_TRUE(second->last_error().ok()) << second->last_error();
  ASSERT_EQ(trainers.size(), 2u);
  EXPECT_EQ(trainers[1]->loaded_from(), latest + ".1");
  const auto reports = coordinator_.reports();
  ASSERT_FALSE(reports.empty());
  EXPECT_EQ(reports.back().round(), 2u);
  EXPECT_EQ(reports.back().outcome(), v1::ROUND_OUTCOME_COMPLETED);
  second.reset();
  std::filesystem::remove_all(data_dir);
}

// Reports say which checkpoint was written; a restarted worker told to
// resume from the job's checkpoint set (Assignment.resume_from) loads the
// checkpoint of the set's round, not its newer ones; dropping a job whose
// last round is checkpointed already writes nothing (which would push the
// set's checkpoint out of those kept).
TEST_F(WorkerDaemonTest, ResumesFromTheCheckpointSetNotANewerCheckpoint) {
  const std::string data_dir = ::testing::TempDir() + "daemon-set-" +
                               std::to_string(getpid());
  std::filesystem::remove_all(data_dir);
  v1::JobSpec spec = Spec(corpus_.string());
  spec.mutable_checkpoint()->set_directory("ckpt");
  spec.mutable_checkpoint()->set_interval_rounds(1);
  std::vector<FileTrainer*> trainers;
  auto first = StartWithState(100, data_dir, "w-set", /*kept=*/3, &trainers);
  for (uint64_t r = 0; r < 3; ++r) coordinator_.Hand(Round(7, r, spec));
  coordinator_.Hand(Stop(7));
  for (int i = 0; i < 4; ++i) first->PollOnce();
  auto reports = coordinator_.reports();
  ASSERT_EQ(reports.size(), 3u);
  for (uint64_t r = 0; r < 3; ++r)
    EXPECT_EQ(reports[r].checkpoint_next_round(), r + 1) << "round " << r;
  first.reset();
  coordinator_.Reopen();

  // Checkpoints of rounds 2 (latest), 1 (.1) and 0 (.2); the set is round 0.
  const std::string latest = absl::StrCat(data_dir, "/ckpt/job7-w-set.ckpt");
  auto second = StartWithState(100, data_dir, "w-set", 3, &trainers);
  v1::Assignment resume = Round(7, 5, spec);
  resume.mutable_resume_from()->set_round(0);
  coordinator_.Hand(resume);
  second->PollOnce();
  EXPECT_TRUE(second->last_error().ok()) << second->last_error();
  ASSERT_EQ(trainers.size(), 2u);
  EXPECT_EQ(trainers[1]->loaded_from(), latest + ".2");
  reports = coordinator_.reports();
  EXPECT_EQ(reports.back().round(), 5u);
  EXPECT_EQ(reports.back().checkpoint_next_round(), 6u);
  second.reset();
  std::filesystem::remove_all(data_dir);
}

// A job that has trained (round > 0) with no model to fetch and no
// checkpoint: the worker does not start from initial weights; it reports
// a set-up failure saying why and asks again.
TEST_F(WorkerDaemonTest, NeverStartsFromInitialWeightsInATrainedJob) {
  ASSERT_TRUE(daemon_->Register().ok());
  coordinator_.Hand(Round(7, 5, Spec(corpus_.string())));
  daemon_->PollOnce();
  EXPECT_EQ(daemon_->last_error().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(daemon_->last_error().message(),
              HasSubstr("not starting from initial weights"));
  ASSERT_EQ(coordinator_.reports().size(), 1u);
  EXPECT_EQ(coordinator_.reports()[0].outcome(),
            v1::ROUND_OUTCOME_SETUP_FAILED);
  // No inner step ran (the daemon has already destroyed the job's
  // trainer, so trainer_ must not be read here: ASan caught that).
  EXPECT_EQ(coordinator_.reports()[0].inner_steps(), 0u);
  EXPECT_EQ(daemon_->job_id(), 0u);
}

TEST(DataShardOf, RankAmongTheRingOrTheJobsWorkers) {
  v1::Assignment gossip;
  gossip.set_rank(2);
  gossip.set_num_workers(4);
  EXPECT_EQ(DataShardOf(gossip).rank, 2);
  EXPECT_EQ(DataShardOf(gossip).num_workers, 4);
  v1::Assignment ring = gossip;
  for (int i = 0; i < 3; ++i) ring.add_ring_order()->set_worker_id(i + 1);
  EXPECT_EQ(DataShardOf(ring).num_workers, 3);
  v1::Assignment beyond;
  beyond.set_rank(5);  // never fewer shards than rank + 1
  EXPECT_EQ(DataShardOf(beyond).num_workers, 6);
}

// Run() on its own thread: registers, starts its heartbeat thread (which
// waits on the fake clock, never moved here), runs the rounds it is handed,
// and on Shutdown wakes the heartbeat thread, leaves the coordinator and
// returns.
TEST_F(WorkerDaemonTest, RunUntilShutdownThenLeaves) {
  clock_.SetAutoAdvance(false);  // two threads wait: the test moves time
  const v1::JobSpec spec = Spec(corpus_.string());
  coordinator_.Hand(Round(7, 0, spec));
  coordinator_.Hand(Round(7, 1, spec));
  coordinator_.WhenEmpty([this] { daemon_->Shutdown("test done"); });
  absl::Status ran = absl::UnknownError("not run");
  std::thread run([&] { ran = daemon_->Run(); });
  run.join();
  EXPECT_TRUE(ran.ok()) << ran;
  EXPECT_EQ(coordinator_.reports().size(), 2u);
  EXPECT_THAT(coordinator_.left(), ::testing::ElementsAre(1u));
  EXPECT_EQ(daemon_->job_id(), 0u);
}

}  // namespace
}  // namespace gasloc
