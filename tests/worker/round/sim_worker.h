// Simulated workers for round-logic tests: a FakeTrainer, an in-process
// transport and a RoundRunner per worker, the job spec and assignments
// they run, and a helper that runs one round on several at once.
//
// Thread safety: a SimWorker's runner runs one round at a time; its
// progress fields are atomics, read by a test waiting for them (WaitFor).
#ifndef GASLOC_TESTS_WORKER_ROUND_SIM_WORKER_H_
#define GASLOC_TESTS_WORKER_ROUND_SIM_WORKER_H_

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/job_spec.h"
#include "tests/worker/round/fake_trainer.h"
#include "worker/exchange/in_process_transport.h"
#include "worker/round/round_runner.h"

namespace gasloc::testing {

inline constexpr uint64_t kJob = 42;

inline v1::JobSpec Spec(v1::Algorithm algorithm, uint32_t deadline_ms = 5000) {
  v1::JobSpec spec;
  spec.set_name("round-test");
  spec.mutable_data()->set_corpus_path("unused");
  spec.mutable_data()->set_eval_interval_rounds(1);
  spec.mutable_stop()->set_max_rounds(10);
  spec.mutable_outer()->set_algorithm(algorithm);
  spec.mutable_exchange()->set_chunk_bytes(4096);
  spec.mutable_exchange()->set_deadline_ms(deadline_ms);
  return ApplyJobSpecDefaults(spec);
}

// One simulated worker: fake trainer, in-process transport, runner; what
// its progress reports say, for a test that waits for them (WaitFor).
struct SimWorker {
  SimWorker(InProcessNetwork& network, uint64_t id, const v1::JobSpec& spec,
            float target)
      : trainer(FakeLayout(), target),
        transport(network.Join(id)),
        runner({kJob, spec,
                [this](const RoundProgress& progress) {
                  inner_step = progress.inner_step;
                  if (progress.activity == v1::WORKER_ACTIVITY_EXCHANGING)
                    exchanging = true;
                }},
               &trainer, transport.get(), &RealClock::Get()) {}
  FakeTrainer trainer;
  std::unique_ptr<InProcessTransport> transport;
  std::atomic<uint32_t> inner_step{0};   // of the last progress report
  std::atomic<bool> exchanging{false};   // reached an exchange
  RoundRunner runner;
};

inline v1::Assignment GossipAssignment(uint64_t round, uint64_t self,
                                const std::vector<uint64_t>& peers,
                                float alpha, uint32_t steps) {
  v1::Assignment a;
  a.set_kind(v1::ASSIGNMENT_KIND_ROUND);
  a.set_job_id(kJob);
  a.set_round(round);
  a.set_local_steps(steps);
  a.set_alpha(alpha);
  for (uint64_t p : peers) {
    auto* peer = a.add_peers();
    peer->set_worker_id(p);
    peer->set_address(InProcessNetwork::Address(p));
    peer->set_weight(1.0f);
  }
  return a;
}

inline v1::Assignment RingAssignment(uint64_t round, int n, uint32_t steps) {
  v1::Assignment a;
  a.set_kind(v1::ASSIGNMENT_KIND_ROUND);
  a.set_job_id(kJob);
  a.set_round(round);
  a.set_local_steps(steps);
  for (int i = 1; i <= n; ++i) {
    auto* member = a.add_ring_order();
    member->set_worker_id(i);
    member->set_address(InProcessNetwork::Address(i));
  }
  return a;
}

// Runs one round on every worker concurrently.
inline std::vector<absl::StatusOr<v1::ReportRoundRequest>> RunAll(
    std::vector<std::unique_ptr<SimWorker>>& workers,
    const std::vector<v1::Assignment>& assignments) {
  std::vector<absl::StatusOr<v1::ReportRoundRequest>> reports(
      workers.size(), absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < workers.size(); ++i)
    threads.emplace_back(
        [&, i] { reports[i] = workers[i]->runner.RunRound(assignments[i]); });
  for (auto& t : threads) t.join();
  return reports;
}

}  // namespace gasloc::testing

#endif  // GASLOC_TESTS_WORKER_ROUND_SIM_WORKER_H_
