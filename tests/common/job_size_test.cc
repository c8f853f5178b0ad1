// A job's memory estimate and the checks against a worker's reported
// memory and cores (common/job_size.h), and the absolute caps of
// ValidateJobSpec for the spec that used to abort workers.
#include "common/job_size.h"

#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gasloc {
namespace {

using ::testing::HasSubstr;

v1::JobSpec Small() {
  v1::JobSpec spec;
  spec.set_name("size");
  spec.mutable_data()->set_corpus_path("/data/c.txt");
  spec.mutable_stop()->set_max_rounds(1);
  spec.mutable_model()->set_layers(2);
  spec.mutable_model()->set_d_model(64);
  spec.mutable_model()->set_heads(2);
  spec.mutable_model()->set_context(64);
  spec.mutable_training()->set_batch(4);
  return spec;
}

TEST(JobSize, EstimateCoversTheModelArrays) {
  const v1::JobSpec spec = Small();
  const uint64_t params = ModelParameterCount(spec.model());
  EXPECT_GE(EstimateJobMemoryBytes(spec), params * 4 * 10);
  EXPECT_LT(EstimateJobMemoryBytes(spec), params * 4 * 10 + (64u << 20));
}

// The spec of issue 17 (layers 256, d_model 8192, batch 4096, threads
// 1024): refused with the field named, before any worker sees it.
TEST(JobSize, OversizedSpecIsRefusedNamingTheField) {
  v1::JobSpec spec = Small();
  spec.mutable_model()->set_layers(256);
  spec.mutable_model()->set_d_model(8192);
  spec.mutable_model()->set_heads(64);
  spec.mutable_training()->set_batch(4096);
  spec.mutable_training()->set_threads(1024);
  const absl::Status status = ValidateJobSpec(spec);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("model.layers"));
  spec.mutable_model()->set_layers(2);
  EXPECT_THAT(ValidateJobSpec(spec).message(), HasSubstr("model.d_model"));
  spec.mutable_model()->set_d_model(64);
  EXPECT_THAT(ValidateJobSpec(spec).message(), HasSubstr("training.batch"));
  spec.mutable_training()->set_batch(4);
  EXPECT_THAT(ValidateJobSpec(spec).message(), HasSubstr("training.threads"));
  spec.mutable_training()->set_threads(1);
  spec.mutable_data()->set_corpus_path(std::string(5 << 20, 'c'));
  EXPECT_THAT(ValidateJobSpec(spec).message(), HasSubstr("data.corpus_path"));
  spec.mutable_data()->set_corpus_path("/data/c.txt");
  spec.mutable_checkpoint()->set_directory(std::string(5000, 'd'));
  EXPECT_THAT(ValidateJobSpec(spec).message(),
              HasSubstr("checkpoint.directory"));
}

TEST(JobSize, CheckedAgainstTheWorkersReport) {
  v1::JobSpec spec = Small();
  v1::WorkerInfo info;
  info.set_cores(2);
  info.set_memory_bytes(uint64_t{1} << 30);
  EXPECT_TRUE(CheckJobFitsWorker(spec, info).ok());
  // Inside the caps, far beyond 1 GiB: ~2.6e10 parameters.
  spec.mutable_model()->set_layers(128);
  spec.mutable_model()->set_d_model(4096);
  spec.mutable_model()->set_heads(32);
  ASSERT_TRUE(ValidateJobSpec(spec).ok());
  const absl::Status big = CheckJobFitsWorker(spec, info);
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(big.message(), HasSubstr("model.layers"));
  EXPECT_THAT(big.message(), HasSubstr("GiB"));
  v1::WorkerInfo unknown;  // memory and cores not reported: not checked
  EXPECT_TRUE(CheckJobFitsWorker(spec, unknown).ok());
  spec = Small();
  spec.mutable_training()->set_threads(3);
  EXPECT_THAT(CheckJobFitsWorker(spec, info).message(),
              HasSubstr("training.threads"));
}

}  // namespace
}  // namespace gasloc
