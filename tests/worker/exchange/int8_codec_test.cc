// The INT8 wire encoding: the fast codec against its plain-loop reference
// (scales, rounding, clamping, zero blocks, denormals), the properties the
// ring all-reduce relies on (exact decode, re-encoding decoded values
// gives the same bytes, RoundToInt8 = decode(encode)), and every bad
// payload refused naming what is wrong.
#include "worker/exchange/int8_codec.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/exchange/wire_codec.h"

namespace gasloc {
namespace {

using ::testing::HasSubstr;

constexpr size_t kBlock = kInt8BlockElements;

float ScaleOf(const std::string& payload, size_t block) {
  float scale;
  std::memcpy(&scale, payload.data() + block * (kBlock + kInt8ScaleBytes), 4);
  return scale;
}

int8_t CodeOf(const std::string& payload, size_t i) {
  const size_t block = i / kBlock;
  return static_cast<int8_t>(payload[(block + 1) * kInt8ScaleBytes + i]);
}

// Blocks of very different magnitudes, exact ties, a zero block, a block
// of denormals, values near FLT_MAX, and a short last block.
std::vector<float> Awkward() {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v;
  for (int e : {-30, -3, 0, 4, 20}) {  // magnitudes 2^e
    for (size_t i = 0; i < kBlock; ++i) v.push_back(std::ldexp(normal(rng), e));
  }
  // Ties: with max 127 the scale is 1, so k + 0.5 is halfway.
  v.push_back(127.0f);
  for (size_t i = 1; i < kBlock; ++i)
    v.push_back(static_cast<float>(static_cast<int>(i % 200) - 100) + 0.5f);
  v.insert(v.end(), kBlock, 0.0f);     // an all-zero block
  for (size_t i = 0; i < kBlock; ++i)  // denormals (and one -0)
    v.push_back(i == 3 ? -0.0f
                       : std::ldexp(static_cast<float>(i % 9) - 4.0f, -130));
  for (size_t i = 0; i < kBlock; ++i)  // near FLT_MAX: clamped at 127
    v.push_back((i % 2 ? -1 : 1) * std::numeric_limits<float>::max() /
                static_cast<float>(1 + i % 3));
  for (int i = 0; i < 77; ++i)
    v.push_back(0.01f * static_cast<float>(i) - 0.3f);
  return v;
}

TEST(Int8Codec, MatchesThePlainLoopReference) {
  const std::vector<float> values = Awkward();
  std::string payload;
  ASSERT_TRUE(EncodeInt8(values, &payload).ok());
  ASSERT_EQ(payload.size(), Int8PayloadBytes(values.size()));
  const Int8Reference ref = QuantizeInt8Reference(values);
  ASSERT_EQ(ref.scales.size(), (values.size() + kBlock - 1) / kBlock);
  for (size_t b = 0; b < ref.scales.size(); ++b)
    EXPECT_EQ(std::bit_cast<uint32_t>(ScaleOf(payload, b)),
              std::bit_cast<uint32_t>(ref.scales[b]))
        << "block " << b;
  std::vector<float> decoded(values.size());
  ASSERT_TRUE(DecodeInt8(payload, decoded).ok());
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_EQ(CodeOf(payload, i), ref.codes[i]) << i << ": " << values[i];
    const double exact =
        static_cast<double>(ref.codes[i]) * ref.scales[i / kBlock];
    ASSERT_EQ(static_cast<double>(decoded[i]), exact) << i;  // decode is exact
  }
}

TEST(Int8Codec, KnownScalesRoundingAndClamping) {
  // Max 127 -> scale 1: ties go to the even code.
  std::vector<float> v = {127.0f, 0.5f, 1.5f, 2.5f, -2.5f, -0.49f, 126.6f};
  std::string payload;
  ASSERT_TRUE(EncodeInt8(v, &payload).ok());
  EXPECT_EQ(ScaleOf(payload, 0), 1.0f);
  const int expected[] = {127, 0, 2, 2, -2, 0, 127};
  for (size_t i = 0; i < v.size(); ++i)
    EXPECT_EQ(CodeOf(payload, i), expected[i]) << i;
  // Max 127.5: 1.0039 rounds to 1 + 1/128 (8 significant bits); max 1:
  // 1/127 = 0.0078740 rounds to 129 * 2^-14 = 0.0078735.
  EXPECT_EQ(Int8BlockScale(std::vector<float>{-127.5f, 3.0f}), 1.0078125f);
  EXPECT_EQ(Int8BlockScale(std::vector<float>{1.0f}), 129.0f / 16384.0f);
  EXPECT_EQ(Int8BlockScale(std::vector<float>{0.0f, -0.0f}), 0.0f);
  // Denormals only: the smallest scale, 2^-126; 2^-127 is a tie that
  // rounds to code 0, and a block of codes 0 has scale 0.
  const float tiny = std::ldexp(1.0f, -127);
  EXPECT_EQ(Int8BlockScale(std::vector<float>{tiny, -tiny}), 0.0f);
  EXPECT_EQ(Int8BlockScale(std::vector<float>{tiny, 3 * tiny / 2}),
            std::ldexp(1.0f, -126));
  // FLT_MAX needs 2^122 > the largest scale: clamped to code 127 at 2^121.
  std::vector<float> huge = {std::numeric_limits<float>::max(), 1.0f};
  std::string big;
  ASSERT_TRUE(EncodeInt8(huge, &big).ok());
  EXPECT_EQ(ScaleOf(big, 0), std::ldexp(1.0f, 121));
  EXPECT_EQ(CodeOf(big, 0), 127);
}

TEST(Int8Codec, ErrorIsAtMostHalfAStepOfMaxAbsOver127) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> v(10 * kBlock + 5);
  for (float& x : v) x = normal(rng);
  std::vector<float> rounded = v;
  RoundToInt8(rounded);
  for (size_t b = 0; b * kBlock < v.size(); ++b) {
    const std::span<const float> block = std::span<const float>(v).subspan(
        b * kBlock, std::min(kBlock, v.size() - b * kBlock));
    const float scale = Int8BlockScale(block);
    float max_abs = 0;
    for (float x : block) max_abs = std::max(max_abs, std::fabs(x));
    // max-abs / 127 to 8 significant bits: within 2^-8 of it.
    EXPECT_NEAR(127 * scale / max_abs, 1.0, 1.0 / 256) << b;
    for (size_t i = 0; i < block.size(); ++i)
      EXPECT_LE(std::fabs(rounded[b * kBlock + i] - block[i]), scale / 2) << i;
  }
}

// What the ring relies on: the decoded values re-encode to the same bytes
// (so a forwarded segment reaches everyone unchanged), and RoundToInt8 is
// decode(encode(x)) bit for bit.
TEST(Int8Codec, DecodedValuesReencodeToTheSameBytes) {
  std::vector<float> values = Awkward();
  std::string once, twice;
  ASSERT_TRUE(EncodeInt8(values, &once).ok());
  std::vector<float> decoded(values.size());
  ASSERT_TRUE(DecodeInt8(once, decoded).ok());
  ASSERT_TRUE(EncodeInt8(decoded, &twice).ok());
  EXPECT_EQ(once, twice);
  std::vector<float> rounded = values;
  RoundToInt8(rounded);
  for (size_t i = 0; i < values.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(rounded[i]),
              std::bit_cast<uint32_t>(decoded[i]))
        << i;
}

TEST(Int8Codec, PayloadIsAboutAQuarterOfFp32AndChunksHoldWholeBlocks) {
  EXPECT_EQ(Int8PayloadBytes(0), 0u);
  EXPECT_EQ(Int8PayloadBytes(1), 5u);
  EXPECT_EQ(Int8PayloadBytes(256), 260u);
  EXPECT_EQ(Int8PayloadBytes(257), 265u);
  const uint64_t n = 1000000;
  EXPECT_GT(static_cast<double>(*PayloadBytes(v1::WIRE_ENCODING_FP32, n)) /
                static_cast<double>(*PayloadBytes(v1::WIRE_ENCODING_INT8, n)),
            3.9);
  // 1 MiB: 4032 blocks of 260 bytes.
  EXPECT_EQ(Int8ElementsPerChunk(1 << 20), 4032u * 256u);
  EXPECT_LE(Int8PayloadBytes(Int8ElementsPerChunk(1 << 20)), 1u << 20);
  EXPECT_EQ(Int8ElementsPerChunk(64), 256u);  // at least one block
  auto chunks = PlanChunks(16, 16 + 3000, v1::WIRE_ENCODING_INT8, 4096);
  ASSERT_TRUE(chunks.ok());
  ASSERT_EQ(chunks->size(), 1u);  // 15 blocks = 3840 elements fit 4 KiB
  auto small = PlanChunks(16, 16 + 3000, v1::WIRE_ENCODING_INT8, 600);
  ASSERT_TRUE(small.ok());
  ASSERT_EQ(small->size(), 6u);  // 2 blocks (520 bytes) a chunk
  EXPECT_EQ((*small)[1].offset, 16u + 512u);
  EXPECT_EQ((*small)[5].length, 3000u - 5 * 512u);
}

TEST(Int8Codec, EncodeRefusesNonFiniteNamingTheElement) {
  std::vector<float> v(600, 1.0f);
  v[300] = std::numeric_limits<float>::infinity();
  std::string payload = "keep";
  absl::Status s = EncodeInt8(v, &payload);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("element 300 is not finite"));
  EXPECT_EQ(payload, "keep");
  v[300] = std::nanf("");
  EXPECT_THAT(EncodeInt8(v, &payload).message(),
              HasSubstr("element 300 is not finite"));
}

class Int8DecodeRefuses : public ::testing::Test {
 protected:
  Int8DecodeRefuses() : values_(2 * kBlock + 10, 0.25f) {
    values_[kBlock + 7] = -3.0f;
    EXPECT_TRUE(EncodeInt8(values_, &payload_).ok());
  }
  // Sets the scale of block 1 (elements [1256, 1512) at first_index 1000).
  void SetScale(float scale) {
    std::memcpy(payload_.data() + kBlock + kInt8ScaleBytes, &scale, 4);
  }
  absl::Status Decode() {
    std::vector<float> out(values_.size());
    return DecodeInt8(payload_, out, 1000);
  }
  void ExpectRefused(const std::string& what) {
    const absl::Status s = Decode();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(s.message(),
                HasSubstr("INT8 block of elements [1256, 1512): " + what));
  }
  std::vector<float> values_;
  std::string payload_;
};

TEST_F(Int8DecodeRefuses, BadScales) {
  ASSERT_TRUE(Decode().ok());
  SetScale(std::numeric_limits<float>::quiet_NaN());
  ExpectRefused("scale is NaN");
  SetScale(std::numeric_limits<float>::infinity());
  ExpectRefused("scale is infinite");
  SetScale(-0.5f);
  ExpectRefused("scale is negative (-0.5)");
  SetScale(-0.0f);
  ExpectRefused("scale is negative (-0)");
  SetScale(0.1f);
  ExpectRefused("scale is 0.1, with more than 8 significant bits");
  SetScale(0.75f);  // 8 bits are enough: a valid scale
  EXPECT_TRUE(Decode().ok());
  SetScale(std::ldexp(1.0f, -130));
  ExpectRefused("scale is");
  EXPECT_THAT(Decode().message(), HasSubstr("a denormal"));
  SetScale(std::ldexp(1.0f, 121) * 1.0078125f);
  EXPECT_THAT(Decode().message(), HasSubstr("above 2^121"));
  SetScale(0.0f);  // block 1 holds non-zero codes
  ExpectRefused("scale is 0 under code");
  SetScale(std::ldexp(1.0f, 121));  // a valid scale again
  EXPECT_TRUE(Decode().ok());
}

TEST_F(Int8DecodeRefuses, CodeMinus128AndWrongLengths) {
  payload_[kBlock + 2 * kInt8ScaleBytes + 5] = static_cast<char>(-128);
  ExpectRefused("code -128 at element 1261");
  std::vector<float> out(values_.size() - 1);
  absl::Status s = DecodeInt8(payload_, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("payload has 534 bytes, expected 533"));
  out.resize(values_.size());
  s = DecodeInt8(absl::string_view(payload_).substr(0, payload_.size() - 1),
                 out);
  EXPECT_THAT(s.message(), HasSubstr("payload has 533 bytes, expected 534"));
}

// A bad scale inside a chunk whose CRC is right (the sender wrote it) is
// refused by the chunk decoder like any bad chunk, naming the block.
TEST(Int8Chunk, BadScaleWithAGoodChecksumIsInvalidArgument) {
  std::vector<float> arena(2000);
  for (size_t i = 0; i < arena.size(); ++i)
    arena[i] = 0.001f * static_cast<float>(i % 97) - 0.05f;
  const TransferKey key{
      .job_id = 1, .round = 2, .phase = v1::EXCHANGE_PHASE_REDUCE_SCATTER};
  const ChunkContext context{.key = key,
                             .sender_id = 7,
                             .range_begin = 100,
                             .range_end = 1900,
                             .encoding = v1::WIRE_ENCODING_INT8,
                             .arena_elements = arena.size()};
  const ChunkExpectation expect{.key = key,
                                .sender_id = 7,
                                .receiver_id = 3,
                                .range_begin = 100,
                                .range_end = 1900,
                                .arena_elements = arena.size()};
  v1::ExchangeChunk chunk;
  ASSERT_TRUE(
      EncodeChunk(context, arena, {.offset = 100, .length = 1800}, true, &chunk)
          .ok());
  std::vector<float> buffer(arena.size());
  ASSERT_TRUE(ValidateAndDecodeChunk(chunk, expect, buffer).ok());
  std::vector<float> rounded(arena.begin() + 100, arena.begin() + 1900);
  RoundToInt8(rounded);  // blocks counted from the range's start
  for (size_t i = 0; i < rounded.size(); ++i)
    ASSERT_EQ(buffer[100 + i], rounded[i]) << i;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(chunk.mutable_payload()->data() + 2 * (kBlock + 4), &nan, 4);
  chunk.mutable_header()->set_crc32c(
      Crc32c(chunk.payload().data(), chunk.payload().size()));
  const absl::Status s = ValidateAndDecodeChunk(chunk, expect, buffer);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("INT8 block of elements [612, 868): scale is NaN"));
}

}  // namespace
}  // namespace gasloc
