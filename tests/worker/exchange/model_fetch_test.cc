// FetchModel's payload without a network: a snapshot turned into chunks
// and reassembled, and the assembler refusing out-of-order, incomplete or
// inconsistent streams.
#include "worker/exchange/model_fetch.h"

#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gasloc {
namespace {

using ::testing::HasSubstr;

std::vector<v1::ExchangeChunk> Encode(const std::vector<float>& params,
                                      const std::vector<float>& outer,
                                      v1::WireEncoding encoding) {
  ModelSnapshot snapshot;
  snapshot.job_id = 6;
  snapshot.round = 40;
  snapshot.params = params;
  snapshot.outer_state = outer;
  std::vector<v1::ExchangeChunk> chunks;
  EXPECT_TRUE(ModelChunks(snapshot, /*sender_id=*/5, encoding, 1024,
                          [&](const v1::ExchangeChunk& c) {
                            chunks.push_back(c);
                            return true;
                          })
                  .ok());
  return chunks;
}

std::vector<float> Values(size_t n, float base) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = base + 0.5f * static_cast<float>(i);
  return v;
}

TEST(ModelFetch, RoundTripsParamsAndOuterState) {
  const auto params = Values(1000, 1), outer = Values(1000, -3);
  auto chunks = Encode(params, outer, v1::WIRE_ENCODING_FP32);
  ASSERT_EQ(chunks.size(), 8u);  // 4 + 4 chunks of 256 elements
  ModelAssembler assembler(6, 9);
  for (const auto& c : chunks) ASSERT_TRUE(assembler.Add(c).ok());
  auto model = assembler.Finish();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->round, 40u);
  EXPECT_EQ(model->sender_id, 5u);
  EXPECT_EQ(model->params, params);
  EXPECT_EQ(model->outer_state, outer);
}

// Joins stay lossless: INT8 is an all-reduce encoding, refused here
// before any chunk is written.
TEST(ModelFetch, Int8IsRefused) {
  ModelSnapshot snapshot;
  snapshot.job_id = 6;
  const std::vector<float> params = Values(300, 1);
  snapshot.params = params;
  int written = 0;
  const absl::Status s = ModelChunks(snapshot, 5, v1::WIRE_ENCODING_INT8, 1024,
                                     [&](const v1::ExchangeChunk&) {
                                       ++written;
                                       return true;
                                     });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("not INT8"));
  EXPECT_EQ(written, 0);
}

TEST(ModelFetch, EmptyOuterStateIsOneEmptyLastChunk) {
  const auto params = Values(300, 1);
  auto chunks = Encode(params, {}, v1::WIRE_ENCODING_BF16);
  ASSERT_EQ(chunks.size(), 2u);
  ModelAssembler assembler(6, 9);
  for (const auto& c : chunks) ASSERT_TRUE(assembler.Add(c).ok());
  auto model = assembler.Finish();
  ASSERT_TRUE(model.ok());
  EXPECT_TRUE(model->outer_state.empty());
  EXPECT_EQ(model->params.size(), 300u);
}

// A joining worker checks the announced size against its own model before
// allocating anything: a sender announcing 2^32 elements (16 GiB) or just
// another model size is refused on the first chunk.
TEST(ModelFetch, AnnouncedSizeIsCheckedAgainstTheModelFirst) {
  const auto params = Values(1000, 1), outer = Values(1000, -3);
  auto chunks = Encode(params, outer, v1::WIRE_ENCODING_FP32);
  {
    ModelAssembler assembler(6, 9, uint64_t{1} << 32,
                             /*expected_elements=*/1000);
    for (const auto& c : chunks) ASSERT_TRUE(assembler.Add(c).ok());
    ASSERT_TRUE(assembler.Finish().ok());
  }
  ModelAssembler assembler(6, 9, uint64_t{1} << 32,
                           /*expected_elements=*/999);
  const absl::Status refused = assembler.Add(chunks[0]);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("this job's model has 999"));
  ModelAssembler huge(6, 9, uint64_t{1} << 32, /*expected_elements=*/1000);
  v1::ExchangeChunk forged = chunks[0];
  forged.mutable_header()->set_arena_elements(uint64_t{1} << 32);
  EXPECT_THAT(huge.Add(forged).message(), HasSubstr("4294967296"));
}

TEST(ModelFetch, RejectsBadStreams) {
  const auto params = Values(1000, 1), outer = Values(1000, -3);
  auto chunks = Encode(params, outer, v1::WIRE_ENCODING_FP32);
  {
    ModelAssembler assembler(6, 9);
    ASSERT_TRUE(assembler.Add(chunks[0]).ok());
    EXPECT_THAT(assembler.Add(chunks[2]).message(), HasSubstr("in order"));
  }
  {
    ModelAssembler assembler(7, 9);  // asked for another job
    EXPECT_EQ(assembler.Add(chunks[0]).code(),
              absl::StatusCode::kFailedPrecondition);
  }
  {
    ModelAssembler assembler(6, 9, /*max_elements=*/999);
    EXPECT_EQ(assembler.Add(chunks[0]).code(),
              absl::StatusCode::kInvalidArgument);
  }
  {
    ModelAssembler assembler(6, 9);
    EXPECT_EQ(assembler.Add(chunks[4]).code(),  // OUTER_STATE first
              absl::StatusCode::kInvalidArgument);
  }
  {
    ModelAssembler assembler(6, 9);
    for (int i = 0; i < 5; ++i) ASSERT_TRUE(assembler.Add(chunks[i]).ok());
    EXPECT_EQ(assembler.Finish().status().code(),
              absl::StatusCode::kUnavailable);
  }
  {
    ModelAssembler assembler(6, 9);
    auto nan = chunks;
    auto p = params;
    p[3] = std::numeric_limits<float>::infinity();
    nan = Encode(p, outer, v1::WIRE_ENCODING_FP32);
    EXPECT_THAT(assembler.Add(nan[0]).message(), HasSubstr("not finite"));
  }
}

// A snapshot with the inner AdamW state, as a member serves it.
std::vector<v1::ExchangeChunk> EncodeWithOptimizer(
    const std::vector<float>& params, const std::vector<float>& m,
    const std::vector<float>& v, uint64_t step) {
  ModelSnapshot snapshot;
  snapshot.job_id = 6;
  snapshot.round = 40;
  snapshot.params = params;
  snapshot.outer_state = params;
  snapshot.optimizer_m = m;
  snapshot.optimizer_v = v;
  snapshot.optimizer_step = step;
  std::vector<v1::ExchangeChunk> chunks;
  EXPECT_TRUE(ModelChunks(snapshot, /*sender_id=*/5, v1::WIRE_ENCODING_FP32,
                          1024,
                          [&](const v1::ExchangeChunk& c) {
                            chunks.push_back(c);
                            return true;
                          })
                  .ok());
  return chunks;
}

TEST(ModelFetch, RoundTripsTheOptimizerState) {
  const auto params = Values(1000, 1), m = Values(1000, -2),
             v = Values(1000, 7);
  auto chunks = EncodeWithOptimizer(params, m, v, /*step=*/1234);
  ASSERT_EQ(chunks.size(), 16u);  // four parts of 4 chunks
  EXPECT_EQ(chunks[8].header().phase(), v1::EXCHANGE_PHASE_OPTIMIZER_M);
  EXPECT_EQ(chunks[8].header().step(), 1234u);
  ModelAssembler assembler(6, 9);
  for (const auto& c : chunks) ASSERT_TRUE(assembler.Add(c).ok());
  auto model = assembler.Finish();
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->optimizer_m, m);
  EXPECT_EQ(model->optimizer_v, v);
  EXPECT_EQ(model->optimizer_step, 1234u);
  // Without optimizer parts (a member whose trainer keeps none) the model
  // is complete after OUTER_STATE and carries no moments.
  auto plain = Encode(params, params, v1::WIRE_ENCODING_FP32);
  ModelAssembler without(6, 9);
  for (const auto& c : plain) ASSERT_TRUE(without.Add(c).ok());
  ASSERT_TRUE(without.Finish().ok());
  EXPECT_TRUE(without.Finish()->optimizer_m.empty());
}

TEST(ModelFetch, RejectsHalfAnOptimizerState) {
  const auto params = Values(1000, 1);
  auto chunks = EncodeWithOptimizer(params, params, params, 50);
  {
    // OPTIMIZER_M complete, OPTIMIZER_V missing: incomplete, not a model.
    ModelAssembler assembler(6, 9);
    for (int i = 0; i < 12; ++i) ASSERT_TRUE(assembler.Add(chunks[i]).ok());
    auto model = assembler.Finish();
    EXPECT_EQ(model.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(model.status().message(), HasSubstr("OPTIMIZER_M"));
  }
  {
    // Cut inside OPTIMIZER_M (found by tests/fuzz/model_fetch_fuzzer): the
    // two required parts are complete, but a started optimizer part must
    // be finished too, or the joiner installs a zero-filled half of m and
    // no v.
    ModelAssembler assembler(6, 9);
    for (int i = 0; i < 9; ++i) ASSERT_TRUE(assembler.Add(chunks[i]).ok());
    auto model = assembler.Finish();
    EXPECT_EQ(model.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(model.status().message(),
                HasSubstr("stopped in OPTIMIZER_M at element 256"));
  }
  {
    // The two moments must be of the same AdamW step.
    ModelAssembler assembler(6, 9);
    for (int i = 0; i < 12; ++i) ASSERT_TRUE(assembler.Add(chunks[i]).ok());
    v1::ExchangeChunk v = chunks[12];
    v.mutable_header()->set_step(51);
    EXPECT_THAT(assembler.Add(v).message(), HasSubstr("step 51"));
  }
  {
    // OPTIMIZER_V cannot come before OPTIMIZER_M.
    ModelAssembler assembler(6, 9);
    for (int i = 0; i < 8; ++i) ASSERT_TRUE(assembler.Add(chunks[i]).ok());
    EXPECT_THAT(assembler.Add(chunks[12]).message(),
                HasSubstr("expected OPTIMIZER_M"));
  }
}

}  // namespace
}  // namespace gasloc
