#include "common/job_spec.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gasloc {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

v1::JobSpec MinimalSpec() {
  v1::JobSpec spec;
  spec.set_name("tiny-run");
  spec.mutable_data()->set_corpus_path("/usr/share/common-licenses");
  spec.mutable_stop()->set_max_rounds(10);
  return spec;
}

TEST(JobSpec, BinaryRoundTripKeepsEveryField) {
  v1::JobSpec spec = ApplyJobSpecDefaults(MinimalSpec());
  spec.mutable_outer()->set_algorithm(v1::ALGORITHM_DILOCO);
  spec.mutable_training()->set_precision(v1::PRECISION_BF16);
  spec.mutable_outer()->set_gamma(0.0f);  // explicit zero must survive
  std::string bytes;
  ASSERT_TRUE(spec.SerializeToString(&bytes));
  v1::JobSpec back;
  ASSERT_TRUE(back.ParseFromString(bytes));
  EXPECT_EQ(back.SerializeAsString(), bytes);
  EXPECT_TRUE(back.outer().has_gamma());
  EXPECT_EQ(back.outer().gamma(), 0.0f);
  EXPECT_EQ(back.training().precision(), v1::PRECISION_BF16);
}

TEST(JobSpec, DefaultsFollowTheAlgorithm) {
  v1::JobSpec spec = MinimalSpec();
  v1::JobSpec gasloc = ApplyJobSpecDefaults(spec);
  EXPECT_EQ(gasloc.outer().algorithm(), v1::ALGORITHM_GASLOC);
  EXPECT_FLOAT_EQ(gasloc.outer().eta(), 0.7f);
  EXPECT_FLOAT_EQ(gasloc.outer().gamma(), 0.9f);
  EXPECT_EQ(gasloc.outer().topology(), v1::TOPOLOGY_RANDOM_ONE_PEER);
  EXPECT_EQ(gasloc.outer().budget_policy(), v1::BUDGET_POLICY_ADAPTIVE);
  // The LOCAL default diverged under injected faults (docs/benchmarks.md,
  // "Momentum placement").
  EXPECT_EQ(gasloc.outer().momentum_placement(),
            v1::MOMENTUM_PLACEMENT_PSEUDO_GRADIENT);
  EXPECT_FLOAT_EQ(gasloc.training().adamw().beta2(), 0.95f);

  spec.mutable_outer()->set_algorithm(v1::ALGORITHM_DPSGD);
  v1::JobSpec dpsgd = ApplyJobSpecDefaults(spec);
  EXPECT_EQ(dpsgd.outer().local_steps(), 1u);
  EXPECT_FLOAT_EQ(dpsgd.outer().eta(), 1.0f);
  EXPECT_FLOAT_EQ(dpsgd.outer().gamma(), 0.0f);

  spec.mutable_outer()->set_algorithm(v1::ALGORITHM_LOCAL_SGD);
  v1::JobSpec local = ApplyJobSpecDefaults(spec);
  EXPECT_EQ(local.outer().topology(), v1::TOPOLOGY_COMPLETE);
  EXPECT_FLOAT_EQ(local.outer().lr(), 1.0f);
  EXPECT_FLOAT_EQ(local.outer().mu(), 0.0f);
  EXPECT_EQ(local.outer().budget_policy(), v1::BUDGET_POLICY_UNIFORM);
}

// Issue 32 item 5: a job stopped by wall-clock or by tokens anneals over
// that limit; jobs ended by max_rounds alone (or with decay_steps) keep
// the rounds x H schedule they had.
TEST(JobSpec, TheScheduleHorizonDefaultsToTheLimitsThatEndTheJob) {
  auto horizon = [](uint64_t rounds, uint64_t tokens, uint64_t seconds,
                    uint64_t decay_steps) {
    v1::JobSpec spec = MinimalSpec();
    spec.mutable_stop()->set_max_rounds(rounds);
    spec.mutable_stop()->set_max_tokens(tokens);
    spec.mutable_stop()->set_max_wall_seconds(seconds);
    spec.mutable_training()->mutable_adamw()->set_decay_steps(decay_steps);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
    const v1::ScheduleHorizon resolved = ScheduleHorizonOf(spec);
    EXPECT_EQ(ApplyJobSpecDefaults(spec).training().schedule_horizon(),
              resolved);
    return resolved;
  };
  EXPECT_EQ(horizon(10, 0, 0, 0), v1::SCHEDULE_HORIZON_ROUNDS);
  EXPECT_EQ(horizon(10, 0, 240, 500), v1::SCHEDULE_HORIZON_ROUNDS);
  EXPECT_EQ(horizon(0, 0, 240, 500), v1::SCHEDULE_HORIZON_ROUNDS);
  EXPECT_EQ(horizon(30, 0, 240, 0), v1::SCHEDULE_HORIZON_STOP);
  EXPECT_EQ(horizon(0, 0, 240, 0), v1::SCHEDULE_HORIZON_STOP);
  EXPECT_EQ(horizon(0, 1000000, 0, 0), v1::SCHEDULE_HORIZON_STOP);
  // An explicit choice is kept.
  v1::JobSpec spec = MinimalSpec();
  spec.mutable_stop()->set_max_wall_seconds(240);
  spec.mutable_training()->set_schedule_horizon(v1::SCHEDULE_HORIZON_SECONDS);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  EXPECT_EQ(ApplyJobSpecDefaults(spec).training().schedule_horizon(),
            v1::SCHEDULE_HORIZON_SECONDS);
}

TEST(JobSpec, OneLayerGlobalModelIsValid) {
  v1::JobSpec spec = MinimalSpec();
  spec.mutable_model()->set_layers(1);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  EXPECT_EQ(ApplyJobSpecDefaults(spec).training().local_rgc().stages(), 1u);
}

TEST(JobSpec, MinimalSpecIsValid) {
  EXPECT_TRUE(ValidateJobSpec(MinimalSpec()).ok())
      << ValidateJobSpec(MinimalSpec());
}

// DiLoCo's eager updates need the overlapped all-reduce (the refusals are
// in JobSpecRejects below).
TEST(JobSpec, EagerUpdatesOfOverlappedDilocoAreValid) {
  v1::JobSpec spec = MinimalSpec();
  spec.mutable_outer()->set_algorithm(v1::ALGORITHM_DILOCO);
  spec.mutable_outer()->set_topology(v1::TOPOLOGY_COMPLETE);
  spec.mutable_outer()->set_overlap_exchange(true);
  spec.mutable_outer()->set_overlap_update(v1::OVERLAP_UPDATE_EAGER);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
  spec.mutable_outer()->set_overlap_update(v1::OVERLAP_UPDATE_DELAYED);
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

// Streaming DiLoCo's merge: for the all-reduce algorithms under the
// overlap, its weight defaulting to 0.5 and kept in [0, 1) (the refusals
// are in JobSpecRejects below).
TEST(JobSpec, MergeOfOverlappedAllReduceIsValidWithItsWeight) {
  for (v1::Algorithm algorithm :
       {v1::ALGORITHM_DILOCO, v1::ALGORITHM_LOCAL_SGD}) {
    SCOPED_TRACE(v1::Algorithm_Name(algorithm));
    v1::JobSpec spec = MinimalSpec();
    spec.mutable_outer()->set_algorithm(algorithm);
    spec.mutable_outer()->set_topology(v1::TOPOLOGY_COMPLETE);
    spec.mutable_outer()->set_overlap_exchange(true);
    spec.mutable_outer()->set_overlap_update(v1::OVERLAP_UPDATE_MERGE);
    spec = ApplyJobSpecDefaults(spec);
    EXPECT_EQ(spec.outer().overlap_merge_alpha(), 0.5f);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
    spec.mutable_outer()->set_overlap_merge_alpha(0.0f);
    EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
    spec.mutable_outer()->set_overlap_merge_alpha(0.9f);
    spec = ApplyJobSpecDefaults(spec);  // an explicit weight is kept
    EXPECT_EQ(spec.outer().overlap_merge_alpha(), 0.9f);
  }
}

// The round lead bound is the gossip algorithms', from lockstep (0) up;
// unset means unbounded (the refusals are in JobSpecRejects below).
TEST(JobSpec, RoundLeadBoundIsValidForGossip) {
  for (v1::Algorithm algorithm : {v1::ALGORITHM_GASLOC, v1::ALGORITHM_DPSGD}) {
    SCOPED_TRACE(v1::Algorithm_Name(algorithm));
    v1::JobSpec spec = MinimalSpec();
    spec.mutable_outer()->set_algorithm(algorithm);
    spec = ApplyJobSpecDefaults(spec);
    EXPECT_FALSE(spec.outer().has_max_round_lead()) << "unbounded by default";
    for (uint32_t lead : {0u, 1u, 1000u}) {
      spec.mutable_outer()->set_max_round_lead(lead);
      EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
    }
  }
}

// INT8 is every algorithm's: error feedback on the all-reduced
// pseudo-gradients or gradients, compressed differences against public
// copies (CHOCO-gossip) for the gossip algorithms. Before, gossip refused
// it.
TEST(JobSpec, Int8IsValidForEveryAlgorithm) {
  for (v1::Algorithm algorithm :
       {v1::ALGORITHM_DILOCO, v1::ALGORITHM_LOCAL_SGD,
        v1::ALGORITHM_DATA_PARALLEL, v1::ALGORITHM_GASLOC,
        v1::ALGORITHM_DPSGD}) {
    v1::JobSpec spec = MinimalSpec();
    spec.mutable_outer()->set_algorithm(algorithm);
    spec.mutable_exchange()->set_encoding(v1::WIRE_ENCODING_INT8);
    EXPECT_TRUE(ValidateJobSpec(spec).ok())
        << v1::Algorithm_Name(algorithm) << ": " << ValidateJobSpec(spec);
  }
}

struct BadField {
  const char* field;
  void (*mutate)(v1::JobSpec*);
};

class JobSpecRejects : public ::testing::TestWithParam<BadField> {};

TEST_P(JobSpecRejects, NamesTheField) {
  v1::JobSpec spec = MinimalSpec();
  GetParam().mutate(&spec);
  absl::Status status = ValidateJobSpec(spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), StartsWith(GetParam().field));
}

INSTANTIATE_TEST_SUITE_P(
    OutOfRange, JobSpecRejects,
    ::testing::Values(
        BadField{"name", [](v1::JobSpec* s) { s->set_name("bad name!"); }},
        BadField{"model.layers",
                 [](v1::JobSpec* s) { s->mutable_model()->set_layers(0); }},
        BadField{"model.heads",
                 [](v1::JobSpec* s) { s->mutable_model()->set_heads(3); }},
        BadField{"training.adamw.beta2",
                 [](v1::JobSpec* s) {
                   s->mutable_training()->mutable_adamw()->set_beta2(1.0f);
                 }},
        BadField{"training.adamw.lr",
                 [](v1::JobSpec* s) {
                   s->mutable_training()->mutable_adamw()->set_lr(NAN);
                 }},
        BadField{"training.local_rgc.stages",
                 [](v1::JobSpec* s) {
                   s->mutable_training()->set_mode(v1::TRAIN_MODE_LOCAL_RGC);
                   s->mutable_training()->mutable_local_rgc()->set_stages(9);
                 }},
        BadField{"data.corpus_path",
                 [](v1::JobSpec* s) { s->mutable_data()->clear_corpus_path(); }},
        BadField{"outer.alpha",
                 [](v1::JobSpec* s) { s->mutable_outer()->set_alpha(2.0f); }},
        // alpha * lambda = 1 on a one-peer matching swaps the two models
        // (eigenvalue -1): refused, naming alpha.
        BadField{"outer.alpha",
                 [](v1::JobSpec* s) {
                   s->mutable_outer()->set_topology(
                       v1::TOPOLOGY_RANDOM_ONE_PEER);
                   s->mutable_outer()->set_alpha(1.0f);
                   s->mutable_outer()->set_lambda(1.0f);
                 }},
        // Degree 2 with Metropolis weights: alpha * lambda must be < 3/4.
        BadField{"outer.alpha",
                 [](v1::JobSpec* s) {
                   s->mutable_outer()->set_topology(v1::TOPOLOGY_RING);
                   s->mutable_outer()->set_alpha(0.8f);
                   s->mutable_outer()->set_lambda(1.0f);
                 }},
        BadField{"outer.min_local_steps",
                 [](v1::JobSpec* s) {
                   s->mutable_outer()->set_local_steps(10);
                   s->mutable_outer()->set_min_local_steps(11);
                 }},
        BadField{"outer.topology",
                 [](v1::JobSpec* s) {
                   s->mutable_outer()->set_algorithm(v1::ALGORITHM_DILOCO);
                   s->mutable_outer()->set_topology(v1::TOPOLOGY_RING);
                 }},
        // Data-parallel reduces every step's gradient: nothing to overlap.
        BadField{"outer.overlap_exchange",
                 [](v1::JobSpec* s) {
                   s->mutable_outer()->set_algorithm(
                       v1::ALGORITHM_DATA_PARALLEL);
                   s->mutable_outer()->set_topology(v1::TOPOLOGY_COMPLETE);
                   s->mutable_outer()->set_overlap_exchange(true);
                 }},
        // Eager updates (DiLoCo's overlapped all-reduce): without the
        // overlap there is nothing to be eager about, and the rule is the
        // all-reduced pseudo-gradient's (issue 36 item 1).
        BadField{"outer.overlap_update",
                 [](v1::JobSpec* s) {
                   s->mutable_outer()->set_algorithm(v1::ALGORITHM_DILOCO);
                   s->mutable_outer()->set_topology(v1::TOPOLOGY_COMPLETE);
                   s->mutable_outer()->set_overlap_update(
                       v1::OVERLAP_UPDATE_EAGER);
                 }},
        BadField{"outer.overlap_update",
                 [](v1::JobSpec* s) {
                   s->mutable_outer()->set_overlap_exchange(true);
                   s->mutable_outer()->set_overlap_update(
                       v1::OVERLAP_UPDATE_EAGER);
                 }},
        BadField{"outer.overlap_update",
                 [](v1::JobSpec* s) {
                   s->mutable_outer()->set_algorithm(v1::ALGORITHM_LOCAL_SGD);
                   s->mutable_outer()->set_topology(v1::TOPOLOGY_COMPLETE);
                   s->mutable_outer()->set_overlap_exchange(true);
                   s->mutable_outer()->set_overlap_update(
                       v1::OVERLAP_UPDATE_EAGER);
                 }},
        BadField{"outer.overlap_update",
                 [](v1::JobSpec* s) {
                   s->mutable_outer()->set_overlap_update(
                       static_cast<v1::OverlapUpdate>(7));
                 }},
        // Streaming DiLoCo's merge: a global model to merge with (not
        // gossip's), under the overlap, and a weight in [0, 1) set only
        // with it.
        BadField{"outer.overlap_update",
                 [](v1::JobSpec* s) {
                   s->mutable_outer()->set_overlap_exchange(true);
                   s->mutable_outer()->set_overlap_update(
                       v1::OVERLAP_UPDATE_MERGE);
                 }},
        BadField{"outer.overlap_update",
                 [](v1::JobSpec* s) {
                   s->mutable_outer()->set_algorithm(v1::ALGORITHM_DILOCO);
                   s->mutable_outer()->set_topology(v1::TOPOLOGY_COMPLETE);
                   s->mutable_outer()->set_overlap_update(
                       v1::OVERLAP_UPDATE_MERGE);
                 }},
        BadField{"outer.overlap_merge_alpha",
                 [](v1::JobSpec* s) {
                   s->mutable_outer()->set_algorithm(v1::ALGORITHM_DILOCO);
                   s->mutable_outer()->set_topology(v1::TOPOLOGY_COMPLETE);
                   s->mutable_outer()->set_overlap_exchange(true);
                   s->mutable_outer()->set_overlap_merge_alpha(0.5f);
                 }},
        // The round lead bound: gossip only, at most 1000 rounds.
        BadField{"outer.max_round_lead",
                 [](v1::JobSpec* s) {
                   s->mutable_outer()->set_algorithm(v1::ALGORITHM_DILOCO);
                   s->mutable_outer()->set_topology(v1::TOPOLOGY_COMPLETE);
                   s->mutable_outer()->set_max_round_lead(1);
                 }},
        BadField{"outer.max_round_lead",
                 [](v1::JobSpec* s) {
                   s->mutable_outer()->set_max_round_lead(1001);
                 }},
        BadField{"outer.overlap_merge_alpha",
                 [](v1::JobSpec* s) {
                   s->mutable_outer()->set_algorithm(v1::ALGORITHM_DILOCO);
                   s->mutable_outer()->set_topology(v1::TOPOLOGY_COMPLETE);
                   s->mutable_outer()->set_overlap_exchange(true);
                   s->mutable_outer()->set_overlap_update(
                       v1::OVERLAP_UPDATE_MERGE);
                   s->mutable_outer()->set_overlap_merge_alpha(1.0f);
                 }},
        BadField{"outer.overlap_merge_alpha",
                 [](v1::JobSpec* s) {
                   s->mutable_outer()->set_algorithm(v1::ALGORITHM_DILOCO);
                   s->mutable_outer()->set_topology(v1::TOPOLOGY_COMPLETE);
                   s->mutable_outer()->set_overlap_exchange(true);
                   s->mutable_outer()->set_overlap_update(
                       v1::OVERLAP_UPDATE_MERGE);
                   s->mutable_outer()->set_overlap_merge_alpha(NAN);
                 }},
        BadField{"exchange.chunk_bytes",
                 [](v1::JobSpec* s) {
                   s->mutable_exchange()->set_chunk_bytes(16);
                 }},
        BadField{"exchange.encoding",
                 [](v1::JobSpec* s) {
                   s->mutable_exchange()->set_encoding(
                       static_cast<v1::WireEncoding>(9));
                 }},
        BadField{"stop", [](v1::JobSpec* s) { s->clear_stop(); }},
        // A horizon whose limit is not set (issue 32 item 5).
        BadField{"training.schedule_horizon",
                 [](v1::JobSpec* s) {
                   s->mutable_training()->set_schedule_horizon(
                       v1::SCHEDULE_HORIZON_SECONDS);
                 }},
        BadField{"training.schedule_horizon",
                 [](v1::JobSpec* s) {
                   s->mutable_training()->set_schedule_horizon(
                       v1::SCHEDULE_HORIZON_TOKENS);
                 }},
        BadField{"training.schedule_horizon",
                 [](v1::JobSpec* s) {
                   s->mutable_stop()->set_max_rounds(0);
                   s->mutable_stop()->set_max_tokens(1000000);
                   s->mutable_training()->set_schedule_horizon(
                       v1::SCHEDULE_HORIZON_ROUNDS);
                 }},
        BadField{"training.adamw.decay_steps",
                 [](v1::JobSpec* s) {
                   s->mutable_stop()->set_max_wall_seconds(240);
                   s->mutable_training()->set_schedule_horizon(
                       v1::SCHEDULE_HORIZON_STOP);
                   s->mutable_training()->mutable_adamw()->set_decay_steps(
                       5000);
                 }},
        BadField{"max_workers", [](v1::JobSpec* s) {
                   s->set_min_workers(4);
                   s->set_max_workers(2);
                 }},
        BadField{"max_consecutive_round_failures", [](v1::JobSpec* s) {
                   s->set_max_consecutive_round_failures(0);
                 }}));

TEST(JobSpec, ParsesJsonAndTextFormat) {
  auto json = ParseJobSpec(R"({"name": "j", "outer": {"algorithm": "ALGORITHM_DILOCO", "gamma": 0}})");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->outer().algorithm(), v1::ALGORITHM_DILOCO);
  EXPECT_TRUE(json->outer().has_gamma());

  auto text = ParseJobSpec("name: \"t\"\nmodel { layers: 2 }\n");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(text->model().layers(), 2u);
}

TEST(JobSpec, ParseErrorsNameTheProblem) {
  auto json = ParseJobSpec(R"({"name": "j", "bogus_field": 1})");
  EXPECT_EQ(json.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(json.status().message()), HasSubstr("bogus_field"));
  auto text = ParseJobSpec("model { layerz: 2 }");
  EXPECT_EQ(text.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(text.status().message()), HasSubstr("layerz"));
}

// Found by tests/fuzz/job_spec_fuzzer: the text format accepts a path that
// is not UTF-8, ValidateJobSpec passed it, and the coordinator could then
// not even parse the StartJob request (proto3 strings are UTF-8), so the
// operator saw "failed to parse" instead of the field.
TEST(JobSpec, PathsThatAreNotUtf8AreRefusedNamingTheField) {
  auto parsed = ParseJobSpec(
      "name: \"t\"\ndata { corpus_path: \"/data/c\\377rpus.txt\" }\n"
      "stop { max_rounds: 3 }\n");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  absl::Status status = ValidateJobSpec(*parsed);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              ::testing::StartsWith("data.corpus_path must be UTF-8; byte 7 "
                                    "(0xff) is not"));
  v1::JobSpec spec = *parsed;
  spec.mutable_data()->set_corpus_path("/data/corpus.txt");
  spec.mutable_checkpoint()->set_directory("/var/\xed\xa0\x80");
  status = ValidateJobSpec(spec);
  EXPECT_THAT(std::string(status.message()),
              ::testing::StartsWith("checkpoint.directory must be UTF-8"));
  spec.mutable_checkpoint()->set_directory("/var/lib/gasloc/\xc3\xa9t\xc3\xa9");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);  spec.mutable_model()->set_init_from("/models/s\xff");
  EXPECT_THAT(std::string(ValidateJobSpec(spec).message()),
              ::testing::StartsWith("model.init_from must be UTF-8"));
  spec.mutable_model()->set_init_from("/models/s");
  EXPECT_TRUE(ValidateJobSpec(spec).ok()) << ValidateJobSpec(spec);
}

TEST(JobSpec, ParameterCountMatchesTheFormula) {
  v1::ModelSpec m;
  m.set_layers(4);
  m.set_d_model(256);
  m.set_heads(4);
  m.set_context(256);
  // 4*(12*65536 + 13*256) + 256*(512 + 256 + 2)
  EXPECT_EQ(ModelParameterCount(m), 4u * (786432 + 3328) + 256u * 770);
}

}  // namespace
}  // namespace gasloc
