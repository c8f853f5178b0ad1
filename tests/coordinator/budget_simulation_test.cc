// The budget planner in closed loop (algorithms.md section 5): a small
// simulated cluster (true step rates, true link rates) runs ~30 rounds
// against a real Coordinator on a FakeClock. Each round every worker asks
// for its assignment, "computes" H_i / s_i seconds, exchanges with the
// round's peers (a transfer starts when both ends are there and takes the
// slower end's time) and reports what a real worker would measure: the
// exchange time including the wait for the partner, the wire time, and
// per-peer link samples. The planner must not be fooled by the waiting.
#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/job_spec.h"
#include "coordinator/coordinator.h"
#include "gtest/gtest.h"

namespace gasloc::coordinator {
namespace {

constexpr uint32_t kNominal = 100;
constexpr uint32_t kMin = 10;

struct SimWorker {
  double steps_per_second = 10;
  // The worker's link, in model transfers per second (1 = one model's wire
  // size per second); the simulation turns it into bytes.
  double models_per_second = 1;
  // A CPU quota's burst: the first burst_seconds of a round's compute run
  // at burst_steps_per_second (0 = none), the rest at steps_per_second.
  double burst_steps_per_second = 0;
  double burst_seconds = 0;

  // Seconds of compute for `steps` inner steps (at rate factor `noise`).
  double ComputeSeconds(double steps, double noise) const {
    const double burst_steps = burst_steps_per_second * noise * burst_seconds;
    if (burst_steps <= 0) return steps / (steps_per_second * noise);
    if (steps <= burst_steps) return steps / (burst_steps_per_second * noise);
    return burst_seconds + (steps - burst_steps) / (steps_per_second * noise);
  }
};

// One round as the cluster lived it.
struct SimRound {
  std::vector<uint32_t> local_steps;   // H_i (member order)
  std::vector<double> wait_fraction;   // wait / (compute + exchange)
  // The same at the workers' true rates (no jitter): the wait the budgets
  // themselves cause.
  std::vector<double> planned_wait_fraction;
  std::vector<std::vector<uint64_t>> peers;
};

class ClusterSim {
 public:
  // Which ends of an edge measure their receive's wire time. A real worker
  // measures only a receive it registered before the peer began sending
  // (worker/exchange/mailbox.cc): of a pair, the one that reached the
  // exchange first (on a tie, one of them).
  enum class Measuring { kBothEnds, kEarlierEndOnly };

  ClusterSim(std::vector<SimWorker> workers, v1::Topology topology,
             double jitter = 0, Measuring measuring = Measuring::kBothEnds)
      : workers_(std::move(workers)), jitter_(jitter), measuring_(measuring) {
    CoordinatorOptions options;
    options.lease = absl::Hours(24);  // the simulated rounds renew nothing
    auto c = Coordinator::Create(options, nullptr, &clock_);
    EXPECT_TRUE(c.ok()) << c.status();
    coord_ = std::move(*c);
    for (size_t i = 0; i < workers_.size(); ++i) {
      v1::RegisterWorkerRequest req;
      req.mutable_info()->set_address(absl::StrCat("10.0.0.", i + 1, ":7000"));
      req.mutable_info()->set_cores(4);
      auto resp = coord_->RegisterWorker(req);
      EXPECT_TRUE(resp.ok()) << resp.status();
      index_[resp->worker_id()] = ids_.size();
      ids_.push_back(resp->worker_id());
    }
    v1::JobSpec spec;
    spec.set_name("budget-sim");
    spec.mutable_data()->set_corpus_path("/data/corpus.txt");
    spec.mutable_stop()->set_max_rounds(1000);
    spec.set_min_workers(static_cast<uint32_t>(workers_.size()));
    spec.mutable_model()->set_layers(2);
    spec.mutable_model()->set_d_model(16);
    spec.mutable_model()->set_heads(1);
    spec.mutable_model()->set_context(16);
    spec.mutable_outer()->set_algorithm(v1::ALGORITHM_GASLOC);
    spec.mutable_outer()->set_topology(topology);
    spec.mutable_outer()->set_budget_policy(v1::BUDGET_POLICY_ADAPTIVE);
    spec.mutable_outer()->set_local_steps(kNominal);
    spec.mutable_outer()->set_min_local_steps(kMin);
    model_bytes_ = 4.0 * static_cast<double>(ModelParameterCount(
                             ApplyJobSpecDefaults(spec).model()));
    EXPECT_GT(model_bytes_, 0);
    auto st = coord_->StartJob(spec);
    EXPECT_TRUE(st.ok()) << st.status();
    job_ = st->job_id();
  }

  // Runs one round; returns what happened.
  SimRound Step() {
    const size_t n = workers_.size();
    SimRound out;
    out.local_steps.resize(n);
    out.wait_fraction.resize(n);
    out.peers.resize(n);
    for (size_t i = 0; i < n; ++i) {
      v1::GetAssignmentRequest req;
      req.set_worker_id(ids_[i]);
      req.set_job_id(job_);
      req.set_after_round(round_ - 1);
      req.set_wait_ms(1);
      auto a = coord_->GetAssignment(req);
      EXPECT_TRUE(a.ok()) << a.status();
      EXPECT_EQ(a->kind(), v1::ASSIGNMENT_KIND_ROUND);
      EXPECT_EQ(a->round(), static_cast<uint64_t>(round_));
      out.local_steps[i] = a->local_steps();
      for (const auto& p : a->peers()) out.peers[i].push_back(p.worker_id());
    }
    // Every worker starts the round at 0 and reaches the exchange at a_i.
    std::vector<double> compute(n), arrive(n);
    for (size_t i = 0; i < n; ++i) {
      // A deterministic +-jitter on the measured compute rate.
      const double noise =
          1 + jitter_ * (((round_ * 7 + static_cast<int64_t>(i) * 3) % 5) - 2) / 2.0;
      compute[i] = workers_[i].ComputeSeconds(out.local_steps[i], noise);
      arrive[i] = compute[i];
    }
    out.planned_wait_fraction = PlannedWaits(out);
    double round_end = 0;
    for (size_t i = 0; i < n; ++i) {
      const size_t degree = out.peers[i].size();
      const double own =
          static_cast<double>(degree) / workers_[i].models_per_second;
      v1::ReportRoundRequest rep;
      rep.set_worker_id(ids_[i]);
      rep.set_job_id(job_);
      rep.set_round(static_cast<uint64_t>(round_));
      rep.set_inner_steps(out.local_steps[i]);
      rep.set_compute_seconds(compute[i]);
      rep.set_tokens(1000);
      rep.set_train_loss(2.0f);
      double end = arrive[i], wire = 0;
      for (uint64_t peer : out.peers[i]) {
        const size_t j = index_.at(peer);
        const double theirs = static_cast<double>(out.peers[j].size()) /
                              workers_[j].models_per_second;
        // The edge moves one model each way; each end's link carries its
        // degree's worth, so the slower end sets the time.
        const double edge = std::max(own, theirs);
        end = std::max(end, std::max(arrive[i], arrive[j]) + edge);
        const bool measured =
            measuring_ == Measuring::kBothEnds || arrive[i] < arrive[j] ||
            (arrive[i] == arrive[j] && ids_[i] < ids_[j]);
        if (!measured) continue;
        wire = std::max(wire, edge);
        v1::LinkSample* s = rep.add_link_samples();
        s->set_peer_id(peer);
        s->set_bytes(static_cast<uint64_t>(model_bytes_));
        s->set_wire_seconds(edge);
      }
      const double exchange = end - arrive[i];
      rep.set_bytes_sent(static_cast<uint64_t>(model_bytes_ * degree));
      rep.set_bytes_received(static_cast<uint64_t>(model_bytes_ * degree));
      rep.set_exchange_seconds(exchange);
      if (wire > 0) rep.set_wire_seconds(wire);
      rep.set_wait_seconds(std::max(0.0, exchange - wire));  // as the worker clamps it
      out.wait_fraction[i] =
          (exchange - wire) / std::max(1e-9, compute[i] + exchange);
      round_end = std::max(round_end, end);
      reports_.push_back(rep);
    }
    for (const v1::ReportRoundRequest& rep : reports_) {
      absl::Status s = coord_->ReportRound(rep);
      EXPECT_TRUE(s.ok()) << s;
    }
    reports_.clear();
    clock_.Advance(absl::Seconds(round_end));
    ++round_;
    return out;
  }

  // Each worker's wait / (compute + exchange) had it computed its H_i at
  // its true rate: its pair's later arrival, less its own.
  std::vector<double> PlannedWaits(const SimRound& round) const {
    const size_t n = workers_.size();
    std::vector<double> arrive(n), out(n);
    for (size_t i = 0; i < n; ++i)
      arrive[i] = workers_[i].ComputeSeconds(round.local_steps[i], 1);
    for (size_t i = 0; i < n; ++i) {
      double wait = 0, edge = 0;
      for (uint64_t peer : round.peers[i]) {
        const size_t j = index_.at(peer);
        wait = std::max(wait, arrive[j] - arrive[i]);
        edge = std::max(edge, std::max(round.peers[i].size() /
                                           workers_[i].models_per_second,
                                       round.peers[j].size() /
                                           workers_[j].models_per_second));
      }
      out[i] = wait / (arrive[i] + wait + edge);
    }
    return out;
  }

  std::vector<SimRound> Run(int rounds) {
    std::vector<SimRound> history;
    for (int r = 0; r < rounds; ++r) history.push_back(Step());
    return history;
  }

  uint64_t id(size_t i) const { return ids_[i]; }
  Coordinator& coordinator() { return *coord_; }
  uint64_t job() const { return job_; }

 private:
  FakeClock clock_;
  std::unique_ptr<Coordinator> coord_;
  std::vector<SimWorker> workers_;
  std::vector<uint64_t> ids_;
  std::map<uint64_t, size_t> index_;
  std::vector<v1::ReportRoundRequest> reports_;
  double jitter_ = 0;
  Measuring measuring_ = Measuring::kBothEnds;
  double model_bytes_ = 0;
  uint64_t job_ = 0;
  int64_t round_ = 0;
};

std::string Describe(const std::vector<SimRound>& history, size_t worker) {
  std::string out;
  for (const SimRound& r : history)
    absl::StrAppend(&out, r.local_steps[worker], "(",
                    static_cast<int>(100 * r.wait_fraction[worker]), "%) ");
  return out;
}

// The wait feedback of issue 16: one worker computes twice as fast, links
// are equal. Measured as bytes / exchange_seconds, the fast worker's wait
// for its partner looks like a slow link, it is given fewer steps, arrives
// even earlier, waits longer: it was pushed to H_min. From wire time it
// keeps the nominal H and the others get half.
TEST(BudgetSimulationTest, WaitingIsNotTakenForASlowLink) {
  ClusterSim sim({{.steps_per_second = 20, .models_per_second = 1},
                  {.steps_per_second = 10, .models_per_second = 1},
                  {.steps_per_second = 10, .models_per_second = 1},
                  {.steps_per_second = 10, .models_per_second = 1}},
                 v1::TOPOLOGY_RANDOM_ONE_PEER);
  const std::vector<SimRound> history = sim.Run(30);
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(absl::StrCat("worker ", i, ": ", Describe(history, i)));
    for (size_t r = 10; r < history.size(); ++r) {
      EXPECT_GT(history[r].local_steps[i], kMin) << "round " << r;
      EXPECT_LT(history[r].wait_fraction[i], 0.10) << "round " << r;
    }
    const uint32_t expected = i == 0 ? kNominal : kNominal / 2;
    EXPECT_NEAR(history.back().local_steps[i], expected, 0.05 * kNominal);
  }
}

// Homogeneous cluster: every H is the uniform H, even with a +-2% jitter on
// the measured step rates (within 5% before issue 32; the symmetric noise
// band keeps it exact).
TEST(BudgetSimulationTest, HomogeneousClusterKeepsTheUniformBudget) {
  std::vector<SimWorker> workers(5, {.steps_per_second = 10,
                                     .models_per_second = 1});
  ClusterSim sim(workers, v1::TOPOLOGY_RANDOM_ONE_PEER, /*jitter=*/0.02);
  const std::vector<SimRound> history = sim.Run(30);
  for (size_t i = 0; i < workers.size(); ++i)
    for (size_t r = 0; r < history.size(); ++r)
      EXPECT_EQ(history[r].local_steps[i], kNominal)
          << "worker " << i << " round " << r << ": " << Describe(history, i);
}

// The same with the measured rates moving +-5% and +-12% from round to
// round, as identical workers sharing a machine's cores measure them (the
// homogeneous netns sweep: single rounds at 78-108 steps/s): still every
// H_i = H exactly (the noise band). Before a band, at +-5% they got H_i of
// 90-95 that the dead band then held; with a fixed 10% band, at +-12% the
// worker measured slowest against the one measured fastest got 83-89
// (rounds 2-3).
TEST(BudgetSimulationTest, HomogeneousClusterKeepsTheUniformBudgetThroughNoise) {
  for (const double jitter : {0.05, 0.12}) {
    std::vector<SimWorker> workers(4, {.steps_per_second = 10,
                                       .models_per_second = 1});
    ClusterSim sim(workers, v1::TOPOLOGY_RANDOM_ONE_PEER, jitter);
    const std::vector<SimRound> history = sim.Run(30);
    for (size_t i = 0; i < workers.size(); ++i)
      for (size_t r = 0; r < history.size(); ++r)
        EXPECT_EQ(history[r].local_steps[i], kNominal)
            << "jitter " << jitter << " worker " << i << " round " << r
            << ": " << Describe(history, i);
  }
}

// The same noise does not hide a worker at 0.6x: it is planned about 0.6 H
// from the third round on.
TEST(BudgetSimulationTest, ASlowWorkerIsPlannedThroughSharedCoreNoise) {
  std::vector<SimWorker> workers(4, {.steps_per_second = 10,
                                     .models_per_second = 1});
  workers[2].steps_per_second = 6;
  ClusterSim sim(workers, v1::TOPOLOGY_RANDOM_ONE_PEER, /*jitter=*/0.12);
  const std::vector<SimRound> history = sim.Run(30);
  SCOPED_TRACE(Describe(history, 2));
  for (size_t r = 3; r < history.size(); ++r)
    EXPECT_NEAR(history[r].local_steps[2], 0.6 * kNominal, 0.12 * kNominal)
        << "round " << r;
}

// One link 10x slower on a one-peer matching: the slow-link worker always
// gets fewer steps; a worker paired with it gets about as few in that round
// only (the pair's transfer is bounded by the slower link; within the dead
// band); a worker paired with a fast peer keeps the nominal H.
TEST(BudgetSimulationTest, OneSlowLinkShrinksOnlyTheRoundsItBounds) {
  ClusterSim sim({{.steps_per_second = 10, .models_per_second = 2},
                  {.steps_per_second = 10, .models_per_second = 2},
                  {.steps_per_second = 10, .models_per_second = 2},
                  {.steps_per_second = 10, .models_per_second = 0.2}},
                 v1::TOPOLOGY_RANDOM_ONE_PEER);
  const std::vector<SimRound> history = sim.Run(30);
  const uint64_t slow = sim.id(3);
  for (size_t r = 10; r < history.size(); ++r) {
    const SimRound& round = history[r];
    // Slow worker: T = 10 + 0.5 s, its exchange 5 s: (10.5 - 5) * 10 = 55.
    EXPECT_NEAR(round.local_steps[3], 55, 5) << "round " << r;
    for (size_t i = 0; i < 3; ++i) {
      const bool with_slow = round.peers[i] == std::vector<uint64_t>{slow};
      if (with_slow) {
        // Within the dead band of the slow worker's.
        EXPECT_NEAR(round.local_steps[i], round.local_steps[3], 0.05 * kNominal)
            << "round " << r;
      } else {
        EXPECT_EQ(round.local_steps[i], kNominal) << "round " << r;
      }
      EXPECT_LT(round.wait_fraction[i], 0.10) << "round " << r;
    }
  }
  auto st = sim.coordinator().GetJob(sim.job());
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->worker_budgets_size(), 4);
  const v1::WorkerBudget& b = st->worker_budgets(3);
  EXPECT_EQ(b.worker_id(), slow);
  EXPECT_NEAR(b.exchange_seconds(), 5.0, 0.5);
  EXPECT_GT(b.bound_peer(), 0u);
  EXPECT_NE(b.reason().find("bound by worker"), std::string::npos)
      << b.reason();
}

// One link so slow that its copy (20 s) outlasts a whole nominal round of
// compute (10 s): the pair holding it cannot finish before H_min / s + 20 s
// = 21 s, so the fast pairs compute through that time (H_i above H, up to
// H_max = 4H) instead of running H and waiting half the round for it. On
// the planner before, T was the fast pairs' 10.5 s: the slow pair ran
// H_min, the fast ones ran H and waited ~50% of every round.
TEST(BudgetSimulationTest, ALinkSlowerThanARoundLetsTheOthersComputeOn) {
  ClusterSim sim({{.steps_per_second = 10, .models_per_second = 2},
                  {.steps_per_second = 10, .models_per_second = 2},
                  {.steps_per_second = 10, .models_per_second = 2},
                  {.steps_per_second = 10, .models_per_second = 0.05}},
                 v1::TOPOLOGY_RANDOM_ONE_PEER);
  const std::vector<SimRound> history = sim.Run(30);
  const uint64_t slow = sim.id(3);
  for (size_t r = 10; r < history.size(); ++r) {
    const SimRound& round = history[r];
    SCOPED_TRACE(absl::StrCat("round ", r));
    EXPECT_EQ(round.local_steps[3], kMin);
    for (size_t i = 0; i < 3; ++i) {
      SCOPED_TRACE(absl::StrCat("worker ", i, ": ", Describe(history, i)));
      if (round.peers[i] == std::vector<uint64_t>{slow}) {
        EXPECT_EQ(round.local_steps[i], kMin);
      } else {
        // (21 - 0.5) * 10 = 205, within the dead band.
        EXPECT_NEAR(round.local_steps[i], 205, 0.05 * kNominal);
      }
      EXPECT_LT(round.wait_fraction[i], 0.10);
    }
  }
  auto st = sim.coordinator().GetJob(sim.job());
  ASSERT_TRUE(st.ok());
  bool stretched = false;
  for (const v1::WorkerBudget& b : st->worker_budgets())
    stretched = stretched ||
                b.reason().find("an exchange H_min cannot shorten") !=
                    std::string::npos;
  EXPECT_TRUE(stretched);
}

// The same cluster on CPUs with a quota's burst: the first 0.5 s of every
// round runs at twice the sustained rate (cgroup CFS lets the first slice of
// a period run unthrottled). A worker paired with the slow link runs H_min
// = 10 steps, all of them in the burst, a third of its rounds. Weighted by
// rounds (before), those 20 steps/s samples held s_i near 13, 30% above the
// 10.25 of a long round, and the long rounds planned from it overran T. By
// their length they barely move it.
TEST(BudgetSimulationTest, ShortRoundsInACpuBurstDoNotInflateTheRate) {
  const SimWorker fast{.steps_per_second = 10,
                       .models_per_second = 2,
                       .burst_steps_per_second = 20,
                       .burst_seconds = 0.5};
  SimWorker slow = fast;
  slow.models_per_second = 0.05;
  ClusterSim sim({fast, fast, fast, slow}, v1::TOPOLOGY_RANDOM_ONE_PEER);
  const std::vector<SimRound> history = sim.Run(30);
  for (size_t r = 10; r < history.size(); ++r)
    for (size_t i = 0; i < 3; ++i)
      EXPECT_LT(history[r].wait_fraction[i], 0.10)
          << "round " << r << " worker " << i << ": " << Describe(history, i);
  auto st = sim.coordinator().GetJob(sim.job());
  ASSERT_TRUE(st.ok());
  ASSERT_EQ(st->worker_budgets_size(), 4);
  // The fast workers' long rounds: ~215 steps, 10 in the burst, the rest
  // at 10/s. (The slow worker runs only short rounds: its s_i is theirs.)
  const double sustained = 215 / (0.5 + 205 / 10.0);
  for (size_t i = 0; i < 3; ++i) {
    const v1::WorkerBudget& b = st->worker_budgets(static_cast<int>(i));
    EXPECT_EQ(b.worker_id(), sim.id(i));
    EXPECT_NEAR(b.steps_per_second(), sustained, 0.08 * sustained)
        << "worker " << b.worker_id() << ": " << b.reason();
  }
}

// The same cluster as a real one measures it: of each pair only the end
// that reached the exchange first has a wire-time sample (the other's
// receive was registered after its peer began sending). A sample is then
// also a lower bound on the sender's link, and a faster sample raises an
// estimate at once: a fast worker first measured against the slow one (or
// never the earlier end of a fast edge) is not left planned as a slow
// link. Before, fast workers were planned as the bound of their own pairs
// in a third of the rounds (netns_harness_test's 4-worker cluster too).
TEST(BudgetSimulationTest, OneSlowLinkWhenOnlyTheEarlierEndMeasures) {
  ClusterSim sim({{.steps_per_second = 10, .models_per_second = 2},
                  {.steps_per_second = 10, .models_per_second = 2},
                  {.steps_per_second = 10, .models_per_second = 2},
                  {.steps_per_second = 10, .models_per_second = 0.2}},
                 v1::TOPOLOGY_RANDOM_ONE_PEER, /*jitter=*/0.02,
                 ClusterSim::Measuring::kEarlierEndOnly);
  const std::vector<SimRound> history = sim.Run(30);
  const uint64_t slow = sim.id(3);
  for (size_t r = 6; r < history.size(); ++r) {
    const SimRound& round = history[r];
    SCOPED_TRACE(absl::StrCat("round ", r));
    EXPECT_NEAR(round.local_steps[3], 55, 10);
    for (size_t i = 0; i < 3; ++i) {
      const bool with_slow = round.peers[i] == std::vector<uint64_t>{slow};
      if (with_slow) {
        EXPECT_NEAR(round.local_steps[i], round.local_steps[3], 10);
      } else {
        EXPECT_GE(round.local_steps[i], kNominal - 0.05 * kNominal)
            << "worker " << i << ": " << Describe(history, i);
      }
    }
  }
}

// The noise band does not make a partner wait for a worker that is really
// slower (issue 32 item 6). On shared-core noise (+-12% a round), one
// worker 20% slower than the others and one with a slow link (c_i = 2 s
// against 0.5 s), over 60 rounds: once the rates have settled (round 10 on)
// the wait the budgets cause any worker (at the true rates, jitter aside)
// is at most the narrowest noise band, 10% of its round (measured: at most
// 5.4%), and its measured wait, jitter included, averages at most 10%
// (measured: at most 6.9%). Before, the band was sized from one round's
// spread (2 sqrt(2) x 8.5% = 24%): the slower worker kept H in every round
// and its partner's wait was 19.2% of the round (averaging 11.7%).
TEST(BudgetSimulationTest, APartnersWaitIsBoundedByTheNoiseBand) {
  ClusterSim sim({{.steps_per_second = 10, .models_per_second = 2},
                  {.steps_per_second = 10, .models_per_second = 2},
                  {.steps_per_second = 8, .models_per_second = 2},
                  {.steps_per_second = 10, .models_per_second = 0.5}},
                 v1::TOPOLOGY_RANDOM_ONE_PEER, /*jitter=*/0.12);
  const std::vector<SimRound> history = sim.Run(60);
  for (size_t i = 0; i < 4; ++i) {
    SCOPED_TRACE(absl::StrCat("worker ", i, ": ", Describe(history, i)));
    double waited = 0;
    for (size_t r = 10; r < history.size(); ++r) {
      EXPECT_LE(history[r].planned_wait_fraction[i], 0.10)
          << "round " << r;
      waited += history[r].wait_fraction[i];
    }
    EXPECT_LE(waited / (history.size() - 10), 0.10);
  }
  // The slower worker is planned at about 0.8 H when paired with a fast
  // one (not H).
  for (size_t r = 10; r < history.size(); ++r) {
    if (history[r].peers[2] == std::vector<uint64_t>{sim.id(3)}) continue;
    EXPECT_NEAR(history[r].local_steps[2], 0.8 * kNominal, 0.08 * kNominal)
        << "round " << r << ": " << Describe(history, 2);
  }
}

// No oscillation: on a fixed ring with mixed step rates and one slow link,
// and +-2% jitter on the measurements, every H_i settles: after the first
// rounds it moves by less than 5% of H per round, and not at all once
// settled (the dead band).
TEST(BudgetSimulationTest, BudgetsSettleWithoutOscillation) {
  ClusterSim sim({{.steps_per_second = 20, .models_per_second = 2},
                  {.steps_per_second = 10, .models_per_second = 2},
                  {.steps_per_second = 15, .models_per_second = 0.5},
                  {.steps_per_second = 10, .models_per_second = 2},
                  {.steps_per_second = 12, .models_per_second = 2}},
                 v1::TOPOLOGY_RING, /*jitter=*/0.02);
  const std::vector<SimRound> history = sim.Run(30);
  for (size_t i = 0; i < 5; ++i) {
    SCOPED_TRACE(absl::StrCat("worker ", i, ": ", Describe(history, i)));
    for (size_t r = 6; r < history.size(); ++r) {
      const double change = std::abs(
          static_cast<double>(history[r].local_steps[i]) -
          static_cast<double>(history[r - 1].local_steps[i]));
      EXPECT_LE(change, 0.05 * kNominal) << "round " << r;
    }
    for (size_t r = 20; r < history.size(); ++r)
      EXPECT_EQ(history[r].local_steps[i], history[19].local_steps[i])
          << "round " << r;
    EXPECT_GT(history.back().local_steps[i], kMin);
  }
}

}  // namespace
}  // namespace gasloc::coordinator
