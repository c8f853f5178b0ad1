#include "worker/round/outer_algorithm_registry.h"

#include <future>
#include <memory>
#include <stdexcept>
#include <vector>

#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/worker/round/fake_trainer.h"
#include "tests/worker/round/halfway_back_algorithm.h"
#include "worker/exchange/in_process_transport.h"
#include "worker/round/background_thread.h"
#include "worker/round/round_runner.h"

namespace gasloc {
namespace {

using testing::FakeLayout;
using testing::FakeTrainer;

constexpr uint64_t kJob = 7;
// Not a value of the proto enum: the toy's own.
constexpr auto kHalfwayBack = static_cast<v1::Algorithm>(1000);

v1::JobSpec Spec(v1::Algorithm algorithm) {
  v1::JobSpec spec;
  spec.set_name("registry-test");
  spec.mutable_data()->set_corpus_path("unused");
  spec.mutable_stop()->set_max_rounds(10);
  spec.mutable_outer()->set_algorithm(v1::ALGORITHM_GASLOC);
  spec = ApplyJobSpecDefaults(spec);
  spec.mutable_outer()->set_algorithm(algorithm);
  return spec;
}

v1::Assignment SoloRound(uint64_t round, uint32_t steps) {
  v1::Assignment a;
  a.set_kind(v1::ASSIGNMENT_KIND_ROUND);
  a.set_job_id(kJob);
  a.set_round(round);
  a.set_local_steps(steps);
  return a;
}

TEST(OuterAlgorithmRegistryTest, EveryAlgorithmOfTheEnumIsRegistered) {
  FakeTrainer trainer(FakeLayout(), 1.0f);
  InProcessNetwork network;
  auto transport = network.Join(1);
  OuterBuffers buffers(trainer.params());
  // Every value of the proto enum, so a new value without its line in
  // worker/round/algorithms/algorithms.def fails here.
  const google::protobuf::EnumDescriptor* values = v1::Algorithm_descriptor();
  ASSERT_GE(values->value_count(), 6);
  for (int k = 0; k < values->value_count(); ++k) {
    const auto algorithm = static_cast<v1::Algorithm>(values->value(k)->number());
    v1::JobSpec spec = Spec(algorithm);
    // Gossip keeps y_{t-1} under LOCAL (not the default PSEUDO_GRADIENT).
    spec.mutable_outer()->set_momentum_placement(v1::MOMENTUM_PLACEMENT_LOCAL);
    auto outer = OuterAlgorithmRegistry::Default().Create(
        {.job_id = kJob, .spec = &spec, .trainer = &trainer,
         .transport = transport.get(), .clock = &RealClock::Get(),
         .buffers = &buffers});
    ASSERT_TRUE(outer.ok()) << v1::Algorithm_Name(algorithm) << ": "
                            << outer.status();
    EXPECT_EQ((*outer)->KeepsPreviousIterate(), IsGossipAlgorithm(algorithm));
    EXPECT_EQ((*outer)->ReplicaChecksum().has_value(),
              !IsGossipAlgorithm(algorithm));
  }
}

// The overlap is composed onto an algorithm whose exchange can run beside
// inner steps (gossip, DiLoCo's pseudo-gradient ring), and refused for one
// whose cannot (data-parallel reduces each step's gradient).
TEST(OuterAlgorithmRegistryTest, TheOverlapComposesOntoOncePerRoundExchanges) {
  FakeTrainer trainer(FakeLayout(), 1.0f);
  InProcessNetwork network;
  auto transport = network.Join(1);
  OuterBuffers buffers(trainer.params());
  for (v1::Algorithm algorithm :
       {v1::ALGORITHM_GASLOC, v1::ALGORITHM_DILOCO, v1::ALGORITHM_LOCAL_SGD,
        v1::ALGORITHM_DATA_PARALLEL}) {
    v1::JobSpec spec = Spec(algorithm);
    spec.mutable_outer()->set_overlap_exchange(true);
    auto outer = OuterAlgorithmRegistry::Default().Create(
        {.job_id = kJob, .spec = &spec, .trainer = &trainer,
         .transport = transport.get(), .clock = &RealClock::Get(),
         .buffers = &buffers});
    if (algorithm != v1::ALGORITHM_DATA_PARALLEL) {
      ASSERT_TRUE(outer.ok()) << outer.status();
      EXPECT_NE(dynamic_cast<OverlappedExchange*>(outer->get()), nullptr);
    } else {
      EXPECT_TRUE(absl::IsInvalidArgument(outer.status())) << outer.status();
    }
  }
}

// Adding an outer algorithm: its own file (halfway_back_algorithm.h) and
// one registry line; RoundRunner runs it like any other.
TEST(OuterAlgorithmRegistryTest, AToyAlgorithmIsItsFileAndARegistryLine) {
  OuterAlgorithmRegistry registry = OuterAlgorithmRegistry::Default();
  registry.Register(kHalfwayBack, &testing::MakeHalfwayBack);

  FakeTrainer trainer(FakeLayout(), 1.0f);
  InProcessNetwork network;
  auto transport = network.Join(1);
  RoundRunner runner({kJob, Spec(kHalfwayBack), {}, &registry}, &trainer,
                     transport.get(), &RealClock::Get());
  const std::vector<float> start(trainer.params().flat().begin(),
                                 trainer.params().flat().end());
  auto report = runner.RunRound(SoloRound(0, 3));
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->inner_steps(), 3u);
  EXPECT_EQ(runner.next_round(), 1u);

  FakeTrainer solo(FakeLayout(), 1.0f);
  for (int h = 0; h < 3; ++h) ASSERT_TRUE(solo.Step().ok());
  for (size_t i = 0; i < start.size(); ++i)
    ASSERT_FLOAT_EQ(trainer.params().flat()[i],
                    0.5f * (start[i] + solo.params().flat()[i]))
        << "element " << i;
}

TEST(OuterAlgorithmRegistryTest, AnUnregisteredAlgorithmFailsTheRound) {
  FakeTrainer trainer(FakeLayout(), 1.0f);
  InProcessNetwork network;
  auto transport = network.Join(1);
  RoundRunner runner({kJob, Spec(kHalfwayBack), {}}, &trainer,
                     transport.get(), &RealClock::Get());
  auto report = runner.RunRound(SoloRound(0, 3));
  EXPECT_TRUE(absl::IsInvalidArgument(report.status())) << report.status();
  EXPECT_THAT(std::string(report.status().message()),
              ::testing::HasSubstr("no outer algorithm is registered"));
  EXPECT_EQ(trainer.steps(), 0);
}

TEST(BackgroundThreadTest, RunsTasksInOrderAndKeepsAThrowInItsFuture) {
  BackgroundThread thread;
  std::vector<int> order;
  std::future<void> first = thread.Run([&] { order.push_back(1); });
  std::future<void> failing =
      thread.Run([] { throw std::runtime_error("task failed"); });
  std::future<void> last = thread.Run([&] { order.push_back(2); });
  first.get();
  EXPECT_THROW(failing.get(), std::runtime_error);
  last.get();
  EXPECT_EQ(order, (std::vector<int>{1, 2}));
}

}  // namespace
}  // namespace gasloc
