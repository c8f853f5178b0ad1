// DiLoCo replicas through failures, end to end in one process: three worker
// daemons against the real coordinator state machine (DirectLink, no
// gRPC, an in-memory store), exchanging over the in-process transport, the
// model fetcher calling the source daemon's SnapshotModel (what
// Peer.FetchModel serves). Each daemon polls on its own thread, on the
// real clock. Checks that the replicas end bit-identical through
//  - an injected ring failure: one member's last all-gather step fails
//    while the others complete the round (it applies nothing and
//    re-synchronises from a member that completed, in the round or when
//    the coordinator names a source in the next assignment), and
//  - a silent divergence: one member's parameters change between rounds
//    (a bit flip); the replica checksums of the round differ, the
//    coordinator counts it in gasloc_coordinator_replica_divergence_total
//    and names a majority member as the re-sync source.
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/coordinator.h"
#include "coordinator/coordinator_metrics.h"
#include "gtest/gtest.h"
#include "prometheus/registry.h"
#include "tests/worker/daemon/direct_link.h"
#include "tests/worker/round/fail_step_transport.h"
#include "tests/worker/round/fake_trainer.h"
#include "tests/support/wait_for.h"
#include "worker/daemon/worker_daemon.h"
#include "worker/exchange/in_process_transport.h"

namespace gasloc {
namespace {

using testing::FailStepTransport;
using testing::FakeLayout;
using testing::FakeTrainer;

constexpr int kWorkers = 3;
constexpr uint64_t kRounds = 6;

// The final parameters of each worker's trainer, kept when the daemon
// drops the job (the trainer is destroyed then).
struct FinalModels {
  absl::Mutex mu;
  std::map<int, std::vector<float>> params ABSL_GUARDED_BY(mu);
};

// A FakeTrainer that records its parameters when destroyed and, when
// asked, flips one parameter at its `corrupt_at`-th evaluation (after a
// round's outer update: a silent fault between rounds).
class RecordingTrainer final : public FakeTrainer {
 public:
  RecordingTrainer(int rank, FinalModels* out, int corrupt_at)
      : FakeTrainer(FakeLayout(), 0.5f * static_cast<float>(rank + 1)),
        rank_(rank),
        out_(out),
        corrupt_at_(corrupt_at) {}
  ~RecordingTrainer() override {
    absl::MutexLock lock(&out_->mu);
    out_->params[rank_].assign(params().flat().begin(), params().flat().end());
  }
  absl::StatusOr<float> EvaluateBpb() override {
    if (++evaluations_ == corrupt_at_) params().data()[3] += 1e-3f;
    return FakeTrainer::EvaluateBpb();
  }

 private:
  const int rank_;
  FinalModels* const out_;
  const int corrupt_at_;
  int evaluations_ = 0;
};

// Reports as the coordinator received them, by (round, worker).
class RecordingLink final : public CoordinatorLink {
 public:
  explicit RecordingLink(coordinator::Coordinator* c) : direct_(c) {}
  absl::StatusOr<v1::RegisterWorkerResponse> Register(
      const v1::WorkerInfo& info) override {
    return direct_.Register(info);
  }
  absl::StatusOr<v1::HeartbeatResponse> Heartbeat(
      const v1::HeartbeatRequest& request) override {
    return direct_.Heartbeat(request);
  }
  absl::Status Leave(uint64_t worker_id, const std::string& reason) override {
    return direct_.Leave(worker_id, reason);
  }
  absl::StatusOr<v1::Assignment> GetAssignment(
      const v1::GetAssignmentRequest& request) override {
    return direct_.GetAssignment(request);
  }
  absl::Status ReportRound(const v1::ReportRoundRequest& request) override {
    {
      absl::MutexLock lock(&mu_);
      reports_[{request.round(), request.worker_id()}] = request;
    }
    return direct_.ReportRound(request);
  }
  void CancelWaits() override {}
  std::map<std::pair<uint64_t, uint64_t>, v1::ReportRoundRequest> reports() {
    absl::MutexLock lock(&mu_);
    return reports_;
  }

 private:
  testing::DirectLink direct_;
  absl::Mutex mu_;
  std::map<std::pair<uint64_t, uint64_t>, v1::ReportRoundRequest> reports_
      ABSL_GUARDED_BY(mu_);
};

double CounterValue(prometheus::Registry& registry, const std::string& name,
                    const std::string& reason) {
  for (const auto& family : registry.Collect()) {
    if (family.name != name) continue;
    for (const auto& metric : family.metric)
      for (const auto& label : metric.label)
        if (label.name == "reason" && label.value == reason)
          return metric.counter.value;
  }
  return -1;
}

struct Outcome {
  std::map<int, std::vector<float>> final_params;
  std::map<std::pair<uint64_t, uint64_t>, v1::ReportRoundRequest> reports;
  double checksum_divergences = 0;
  double behind_divergences = 0;
  v1::JobStatus status;
  // What each daemon serves for the ended job (an export's FetchModel).
  std::vector<absl::StatusOr<ModelSnapshot>> served;
};

// Runs a DiLoCo job of kRounds rounds on kWorkers daemons. Worker index
// `ring_failure_worker` (or -1) fails its last all-gather step in round
// 1; worker index `corrupt_worker` (or -1) flips a parameter after round
// 1's update.
Outcome RunDiLoCoJob(int ring_failure_worker, int corrupt_worker,
                     v1::WireEncoding encoding = v1::WIRE_ENCODING_FP32) {
  prometheus::Registry registry;
  coordinator::CoordinatorMetrics metrics(registry);
  coordinator::CoordinatorOptions coordinator_options;
  coordinator_options.metrics = &metrics;
  auto made = coordinator::Coordinator::Create(coordinator_options, nullptr,
                                               &RealClock::Get());
  EXPECT_TRUE(made.ok()) << made.status();
  std::unique_ptr<coordinator::Coordinator> coord = std::move(*made);
  RecordingLink link(coord.get());
  InProcessNetwork network(MailboxOptions{.clock = &RealClock::Get()});
  FinalModels finals;

  struct Worker {
    std::unique_ptr<PeerTransport> transport;
    std::unique_ptr<WorkerDaemon> daemon;
  };
  std::vector<Worker> workers(kWorkers);
  ModelFetcher fetcher = [&workers](const v1::PeerAssignment& source,
                                    uint64_t job_id, uint64_t /*self_id*/,
                                    uint64_t /*model_elements*/)
      -> absl::StatusOr<FetchedModel> {
    for (Worker& w : workers) {
      if (w.daemon->worker_id() != source.worker_id()) continue;
      absl::StatusOr<ModelSnapshot> snapshot = w.daemon->SnapshotModel(job_id);
      if (!snapshot.ok()) return snapshot.status();
      FetchedModel model;
      model.job_id = job_id;
      model.round = snapshot->round;
      model.sender_id = source.worker_id();
      model.params.assign(snapshot->params.begin(), snapshot->params.end());
      model.outer_state.assign(snapshot->outer_state.begin(),
                               snapshot->outer_state.end());
      return model;
    }
    return absl::UnavailableError("no such worker");
  };
  for (int i = 0; i < kWorkers; ++i) {
    Worker& w = workers[i];
    // The coordinator numbers workers 1, 2, 3 in registration order; the
    // in-process network routes by that id.
    const uint64_t id = i + 1;
    std::unique_ptr<InProcessTransport> inner = network.Join(id);
    InProcessTransport* mailbox_owner = inner.get();
    if (i == ring_failure_worker) {
      // The ring's last step: all-gather step n - 2.
      w.transport = std::make_unique<FailStepTransport<InProcessTransport>>(
          std::move(inner),
          TransferKey{.job_id = 1,
                      .round = 1,
                      .phase = v1::EXCHANGE_PHASE_ALL_GATHER,
                      .step = kWorkers - 2});
    } else {
      w.transport = std::move(inner);
    }
    WorkerDaemonOptions options;
    options.info.set_address(InProcessNetwork::Address(id));
    options.info.set_cores(1);
    options.assignment_wait = absl::Milliseconds(50);
    options.retry_backoff = absl::Milliseconds(20);
    const int corrupt_at = i == corrupt_worker ? 2 : 0;  // after round 1
    TrainerFactory trainers = [&finals, corrupt_at](const v1::JobSpec&,
                                                    DataShard shard, int)
        -> absl::StatusOr<std::unique_ptr<InnerTrainer>> {
      return std::make_unique<RecordingTrainer>(shard.rank, &finals,
                                                corrupt_at);
    };
    w.daemon = std::make_unique<WorkerDaemon>(options, &link, w.transport.get(),
                                              trainers, fetcher);
    w.daemon->SetIdentityListener([mailbox_owner](uint64_t worker_id) {
      mailbox_owner->mailbox().set_self_id(worker_id);
    });
    EXPECT_TRUE(w.daemon->Register().ok());
  }

  v1::JobSpec spec;
  spec.set_name("diloco-replicas");
  spec.mutable_data()->set_corpus_path("unused");
  spec.mutable_data()->set_eval_interval_rounds(1);
  spec.mutable_stop()->set_max_rounds(kRounds);
  spec.mutable_outer()->set_algorithm(v1::ALGORITHM_DILOCO);
  spec.mutable_outer()->set_local_steps(4);
  spec.mutable_exchange()->set_chunk_bytes(4096);
  spec.mutable_exchange()->set_deadline_ms(5000);
  spec.mutable_exchange()->set_encoding(encoding);
  spec.set_min_workers(kWorkers);
  auto started = coord->StartJob(spec);
  EXPECT_TRUE(started.ok()) << started.status();
  const uint64_t job = started.ok() ? started->job_id() : 0;
  EXPECT_EQ(job, 1u);  // the failure key above names job 1

  std::atomic<bool> done{false};
  std::vector<std::thread> threads;
  for (Worker& w : workers)
    threads.emplace_back([&done, &w] {
      while (!done) w.daemon->PollOnce();
    });
  Outcome outcome;
  // Until the job ended and every worker dropped it.
  WaitFor(
      [&] {
        outcome.status = *coord->GetJob(job);
        if (outcome.status.state() == v1::JOB_STATE_RUNNING ||
            outcome.status.state() == v1::JOB_STATE_PENDING)
          return false;
        absl::MutexLock lock(&finals.mu);
        return finals.params.size() == kWorkers;
      },
      absl::Seconds(60), absl::Milliseconds(10));
  for (Worker& w : workers) outcome.served.push_back(w.daemon->SnapshotModel(job));
  done = true;
  for (Worker& w : workers) w.daemon->Shutdown("test done");
  for (std::thread& t : threads) t.join();
  outcome.reports = link.reports();
  {
    absl::MutexLock lock(&finals.mu);
    outcome.final_params = finals.params;
  }
  outcome.checksum_divergences = CounterValue(
      registry, "gasloc_coordinator_replica_divergence_total", "checksum");
  outcome.behind_divergences = CounterValue(
      registry, "gasloc_coordinator_replica_divergence_total", "behind");
  workers.clear();  // daemons and transports before the network
  return outcome;
}

void ExpectBitIdentical(const Outcome& outcome) {
  ASSERT_EQ(outcome.final_params.size(), static_cast<size_t>(kWorkers));
  const std::vector<float>& first = outcome.final_params.begin()->second;
  for (const auto& [rank, params] : outcome.final_params) {
    ASSERT_EQ(params.size(), first.size());
    EXPECT_EQ(0, std::memcmp(params.data(), first.data(),
                             first.size() * sizeof(float)))
        << "worker of rank " << rank << " ends with another model";
  }
  // The last round's replicas agree (parameters and outer momentum).
  std::map<uint32_t, int> last;
  for (const auto& [key, report] : outcome.reports)
    if (key.first == kRounds - 1) ++last[report.replica_checksum()];
  EXPECT_EQ(last.size(), 1u) << "the last round's checksums differ";
  // Once the job ended each daemon still serves its final parameters (no
  // outer state, no moments) for `gaslocctl job export`.
  ASSERT_EQ(outcome.served.size(), static_cast<size_t>(kWorkers));
  for (const absl::StatusOr<ModelSnapshot>& served : outcome.served) {
    ASSERT_TRUE(served.ok()) << served.status();
    ASSERT_EQ(served->params.size(), first.size());
    EXPECT_EQ(0, std::memcmp(served->params.data(), first.data(),
                             first.size() * sizeof(float)));
    EXPECT_TRUE(served->outer_state.empty());
    EXPECT_TRUE(served->optimizer_m.empty());
    EXPECT_EQ(served->round, kRounds);
  }
}

void ExpectRingFailureRepaired(v1::WireEncoding encoding) {
  const Outcome outcome = RunDiLoCoJob(/*ring_failure_worker=*/0,
                                       /*corrupt_worker=*/-1, encoding);
  EXPECT_EQ(outcome.status.state(), v1::JOB_STATE_FINISHED)
      << outcome.status.message();
  ExpectBitIdentical(outcome);
  // The failed member said so, and re-synchronised in round 1 (from a
  // member that completed it) or in round 2 (from the source the
  // coordinator named).
  int resynced = 0, failed_reports = 0;
  for (const auto& [key, report] : outcome.reports) {
    if (report.failed_peers_size() > 0) ++failed_reports;
    if (report.resynced_from() != 0) ++resynced;
    if (key.first >= 3) {
      EXPECT_FALSE(report.replica_behind()) << "round " << key.first;
      EXPECT_EQ(report.resynced_from(), 0u) << "round " << key.first;
    }
  }
  EXPECT_EQ(failed_reports, 1);
  EXPECT_EQ(resynced, 1);
  EXPECT_EQ(outcome.checksum_divergences, 0);
}

TEST(ReplicaResync, DiLoCoReplicasStayBitIdenticalThroughARingFailure) {
  ExpectRingFailureRepaired(v1::WIRE_ENCODING_FP32);
}

// The same with INT8 and error feedback (the failed worker resets its
// residual; the others keep theirs): no replica parts from the others.
TEST(ReplicaResync, Int8DiLoCoReplicasStayBitIdenticalThroughARingFailure) {
  ExpectRingFailureRepaired(v1::WIRE_ENCODING_INT8);
}

TEST(ReplicaResync, SilentDivergenceIsCountedAndRepaired) {
  const Outcome outcome = RunDiLoCoJob(/*ring_failure_worker=*/-1,
                                       /*corrupt_worker=*/2);
  EXPECT_EQ(outcome.status.state(), v1::JOB_STATE_FINISHED)
      << outcome.status.message();
  ExpectBitIdentical(outcome);
  // Round 1's checksums: two agree, the corrupted one differs.
  std::map<uint32_t, int> round1;
  for (const auto& [key, report] : outcome.reports)
    if (key.first == 1) ++round1[report.replica_checksum()];
  EXPECT_EQ(round1.size(), 2u);
  EXPECT_EQ(outcome.checksum_divergences, 1);
  EXPECT_EQ(outcome.behind_divergences, 0);
  // Detected once every member reported round 1 (round 2 waits for that),
  // and repaired before round 2 from the source the coordinator named.
  EXPECT_EQ(outcome.checksum_divergences, 1);
  EXPECT_EQ(outcome.behind_divergences, 0);
  int resynced = 0;
  for (const auto& [key, report] : outcome.reports)
    if (report.resynced_from() != 0) {
      ++resynced;
      EXPECT_EQ(key.first, 2u);
    }
  EXPECT_EQ(resynced, 1);
}

}  // namespace
}  // namespace gasloc
