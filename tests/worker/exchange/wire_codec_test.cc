// The wire codec: bf16 against its plain-loop reference, payload round
// trips, chunk planning, and the validator's verdict on each bad header.
#include "worker/exchange/wire_codec.h"

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace gasloc {
namespace {

using ::testing::HasSubstr;

TEST(Bf16, FastMatchesReferenceOnEveryExponentAndRoundingCase) {
  // All 2^16 upper halves combined with lower halves that hit the
  // rounding boundaries (below, at and above the tie) plus random ones.
  std::mt19937 rng(7);
  const uint32_t lows[] = {0x0000, 0x0001, 0x7fff, 0x8000,
                           0x8001, 0xffff, 0x4000, 0xc000};
  size_t checked = 0;
  for (uint32_t high = 0; high < 0x10000; ++high) {
    for (uint32_t low : lows) {
      const float v = std::bit_cast<float>((high << 16) | low);
      ASSERT_EQ(FloatToBf16(v), FloatToBf16Reference(v))
          << std::hex << ((high << 16) | low);
      ++checked;
    }
    const float r = std::bit_cast<float>(
        static_cast<uint32_t>((high << 16) | (rng() & 0xffff)));
    ASSERT_EQ(FloatToBf16(r), FloatToBf16Reference(r));
  }
  EXPECT_EQ(checked, 8u * 65536u);
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float fast = Bf16ToFloat(static_cast<uint16_t>(bits));
    const float ref = Bf16ToFloatReference(static_cast<uint16_t>(bits));
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(fast));
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(fast), std::bit_cast<uint32_t>(ref))
          << bits;
    }
  }
}

TEST(Bf16, RoundsToNearestEvenOnKnownValues) {
  // 1 + 2^-8 is exactly halfway between 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up.
  EXPECT_EQ(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7f80);  // inf
  EXPECT_TRUE(std::isnan(Bf16ToFloat(
      FloatToBf16(std::numeric_limits<float>::quiet_NaN()))));
}

std::vector<float> Ramp(size_t n, float scale = 0.001f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = scale * static_cast<float>(i) - 3.0f + 0.123f * std::sin(i);
  return v;
}

TEST(Payload, Fp32RoundTripIsExactAndBf16IsWithinHalfUlp) {
  const std::vector<float> values = Ramp(3001);
  std::string fp32, bf16;
  ASSERT_TRUE(EncodePayload(values, v1::WIRE_ENCODING_FP32, &fp32).ok());
  ASSERT_TRUE(EncodePayload(values, v1::WIRE_ENCODING_BF16, &bf16).ok());
  EXPECT_EQ(fp32.size(), values.size() * 4);
  EXPECT_EQ(bf16.size(), values.size() * 2);
  std::vector<float> a(values.size()), b(values.size());
  ASSERT_TRUE(DecodePayload(fp32, v1::WIRE_ENCODING_FP32, a).ok());
  ASSERT_TRUE(DecodePayload(bf16, v1::WIRE_ENCODING_BF16, b).ok());
  EXPECT_EQ(a, values);
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(b[i], Bf16ToFloatReference(FloatToBf16Reference(values[i])));
    EXPECT_LE(std::fabs(b[i] - values[i]),
              std::fabs(values[i]) * std::ldexp(1.0f, -8) + 1e-30f);
  }
}

TEST(Payload, DecodeRejectsNonFiniteAndNamesTheElement) {
  for (auto encoding : {v1::WIRE_ENCODING_FP32, v1::WIRE_ENCODING_BF16}) {
    std::vector<float> values = Ramp(100);
    values[37] = std::numeric_limits<float>::quiet_NaN();
    std::string payload;
    ASSERT_TRUE(EncodePayload(values, encoding, &payload).ok());
    std::vector<float> out(100);
    absl::Status s = DecodePayload(payload, encoding, out, 1000);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("element 1037 is not finite"));
    values[37] = std::numeric_limits<float>::infinity();
    payload.clear();
    ASSERT_TRUE(EncodePayload(values, encoding, &payload).ok());
    EXPECT_EQ(DecodePayload(payload, encoding, out).code(),
              absl::StatusCode::kInvalidArgument);
  }
}

// The fused decode (CRC-32C and conversion in one pass, block by block)
// against its plain-loop reference: the bitwise CRC of the whole payload
// and the element-wise reference conversion. Sizes straddle the 16 KiB
// blocks; a flipped byte is a bad checksum even where it makes a NaN.
TEST(Payload, CheckedDecodeMatchesTheReferenceCrcAndConversion) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (auto encoding : {v1::WIRE_ENCODING_FP32, v1::WIRE_ENCODING_BF16}) {
    for (size_t n : {0, 1, 4095, 4096, 4097, 8192 + 3, 50000}) {
      SCOPED_TRACE(absl::StrCat(EncodingName(encoding), " n=", n));
      std::vector<float> values(n);
      for (float& v : values) v = normal(rng);
      std::string payload;
      ASSERT_TRUE(EncodePayload(values, encoding, &payload).ok());
      const uint32_t crc = Crc32cReference(payload.data(), payload.size());
      std::vector<float> out(n, -1.0f);
      ASSERT_TRUE(DecodeCheckedPayload(payload, encoding, out, 0, crc).ok());
      for (size_t i = 0; i < n; ++i) {
        const float expected =
            encoding == v1::WIRE_ENCODING_FP32
                ? values[i]
                : Bf16ToFloatReference(FloatToBf16Reference(values[i]));
        ASSERT_EQ(out[i], expected) << i;
      }
      absl::Status wrong = DecodeCheckedPayload(payload, encoding, out, 64,
                                                crc ^ 1u);
      EXPECT_THAT(wrong.message(), HasSubstr("bad checksum on chunk at offset 64"));
      if (n < 2) continue;
      // A corrupted exponent: NaN/Inf after decoding, yet the checksum is
      // what is reported (the sender did not write it).
      payload[payload.size() - 1] = static_cast<char>(0x7f);
      payload[payload.size() - 2] = static_cast<char>(0xff);
      absl::Status corrupt = DecodeCheckedPayload(payload, encoding, out, 0, crc);
      EXPECT_THAT(corrupt.message(), HasSubstr("bad checksum"));
      // Written by the sender (its CRC): the non-finite element is named.
      const uint32_t nan_crc = Crc32cReference(payload.data(), payload.size());
      absl::Status nan = DecodeCheckedPayload(payload, encoding, out, 0, nan_crc);
      EXPECT_THAT(nan.message(),
                  HasSubstr(absl::StrCat("element ", n - 1, " is not finite")));
    }
  }
}

TEST(Payload, UnknownEncodingAndSizeMismatchAreInvalidArgument) {
  std::string payload;
  std::vector<float> values(4, 1.0f);
  EXPECT_EQ(EncodePayload(values, static_cast<v1::WireEncoding>(42), &payload)
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BytesPerElement(static_cast<v1::WireEncoding>(42)).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(EncodePayload(values, v1::WIRE_ENCODING_FP32, &payload).ok());
  std::vector<float> out(3);
  EXPECT_EQ(DecodePayload(payload, v1::WIRE_ENCODING_FP32, out).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PlanChunks, CoversTheRangeContiguously) {
  auto chunks = PlanChunks(10, 1010, v1::WIRE_ENCODING_FP32, 1024);
  ASSERT_TRUE(chunks.ok());
  ASSERT_EQ(chunks->size(), 4u);  // 256 elements per chunk
  EXPECT_EQ((*chunks)[0].offset, 10u);
  EXPECT_EQ((*chunks)[3].offset, 778u);
  EXPECT_EQ((*chunks)[3].length, 232u);
  auto bf16 = PlanChunks(0, 1000, v1::WIRE_ENCODING_BF16, 1024);
  ASSERT_TRUE(bf16.ok());
  EXPECT_EQ(bf16->size(), 2u);  // 512 elements per chunk
  auto empty = PlanChunks(5, 5, v1::WIRE_ENCODING_FP32, 1024);
  ASSERT_TRUE(empty.ok());
  ASSERT_EQ(empty->size(), 1u);
  EXPECT_EQ((*empty)[0].length, 0u);
  EXPECT_EQ(PlanChunks(5, 4, v1::WIRE_ENCODING_FP32, 1024).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PlanChunks(0, 4, v1::WIRE_ENCODING_FP32, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// EncodeChunk computes the CRC block by block as it writes the payload:
// over many blocks it equals the bitwise reference over the whole payload,
// and the payload is EncodePayload's.
TEST(EncodeChunk, BlockwiseCrcMatchesTheReferenceOverTheWholePayload) {
  const std::vector<float> arena = Ramp(100000);
  const TransferKey key{.job_id = 1, .round = 2};
  for (auto encoding : {v1::WIRE_ENCODING_FP32, v1::WIRE_ENCODING_BF16}) {
    const ChunkContext context{.key = key,
                               .sender_id = 7,
                               .range_begin = 0,
                               .range_end = arena.size(),
                               .encoding = encoding,
                               .arena_elements = arena.size()};
    v1::ExchangeChunk chunk;
    ASSERT_TRUE(EncodeChunk(context, arena, {.offset = 13, .length = 99000},
                            true, &chunk)
                    .ok());
    std::string expected;
    ASSERT_TRUE(EncodePayload(std::span<const float>(arena).subspan(13, 99000),
                              encoding, &expected)
                    .ok());
    EXPECT_EQ(chunk.payload(), expected);
    EXPECT_EQ(chunk.header().crc32c(),
              Crc32cReference(expected.data(), expected.size()));
  }
}

class ValidateTest : public ::testing::Test {
 protected:
  ValidateTest() : arena_(Ramp(1000)) {
    key_ = {4, 12, v1::EXCHANGE_PHASE_GOSSIP, 0};
    context_ = {key_, 7, 100, 900, v1::WIRE_ENCODING_FP32, 1000};
    expect_ = {key_, 7, 3, 100, 900, 1000};
    EXPECT_TRUE(EncodeChunk(context_, arena_, {200, 100}, false, &chunk_).ok());
  }
  absl::Status Check() { return ValidateChunk(chunk_, expect_); }

  std::vector<float> arena_;
  TransferKey key_;
  ChunkContext context_;
  ChunkExpectation expect_;
  v1::ExchangeChunk chunk_;
};

TEST_F(ValidateTest, AcceptsAGoodChunkAndDecodesIntoItsRange) {
  const v1::ChunkHeader& h = chunk_.header();
  EXPECT_EQ(h.job_id(), 4u);
  EXPECT_EQ(h.round(), 12u);
  EXPECT_EQ(h.sender_id(), 7u);
  EXPECT_EQ(h.offset(), 200u);
  EXPECT_EQ(h.length(), 100u);
  EXPECT_EQ(h.range_begin(), 100u);
  EXPECT_EQ(h.range_end(), 900u);
  EXPECT_EQ(h.arena_elements(), 1000u);
  EXPECT_EQ(h.encoding(), v1::WIRE_ENCODING_FP32);
  EXPECT_FALSE(chunk_.last());
  std::vector<float> buffer(1000, -1.0f);
  ASSERT_TRUE(ValidateAndDecodeChunk(chunk_, expect_, buffer).ok());
  for (size_t i = 0; i < 1000; ++i) {
    if (i >= 200 && i < 300)
      EXPECT_EQ(buffer[i], arena_[i]);
    else
      EXPECT_EQ(buffer[i], -1.0f) << i;
  }
}

TEST_F(ValidateTest, WrongJobRoundPhaseOrSenderIsFailedPrecondition) {
  chunk_.mutable_header()->set_job_id(5);
  EXPECT_EQ(Check().code(), absl::StatusCode::kFailedPrecondition);
  chunk_.mutable_header()->set_job_id(4);
  chunk_.mutable_header()->set_round(11);
  EXPECT_EQ(Check().code(), absl::StatusCode::kFailedPrecondition);
  chunk_.mutable_header()->set_round(12);
  chunk_.mutable_header()->set_phase(v1::EXCHANGE_PHASE_ALL_GATHER);
  EXPECT_EQ(Check().code(), absl::StatusCode::kFailedPrecondition);
  chunk_.mutable_header()->set_phase(v1::EXCHANGE_PHASE_GOSSIP);
  chunk_.mutable_header()->set_sender_id(8);
  absl::Status s = Check();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(), "sender 8 is not a peer of worker 3 in round 12");
}

TEST_F(ValidateTest, BadGeometryPayloadOrChecksumIsInvalidArgument) {
  auto expect_invalid = [&](const char* what, const char* substring) {
    absl::Status s = Check();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(s.message(), HasSubstr(substring)) << what;
  };
  v1::ChunkHeader* h = chunk_.mutable_header();
  h->set_offset(850);  // [850, 950) leaves the range
  expect_invalid("offset", "outside range");
  h->set_offset(50);
  expect_invalid("offset before range", "outside range");
  h->set_offset(200);
  h->set_length(101);
  expect_invalid("length", "payload has 400 bytes");
  h->set_length(100);
  h->set_range_end(1200);
  expect_invalid("range", "announces range");
  h->set_range_end(900);
  h->set_arena_elements(999);
  expect_invalid("arena", "arena has 999");
  h->set_arena_elements(1000);
  h->set_encoding(static_cast<v1::WireEncoding>(42));
  expect_invalid("encoding", "unsupported wire encoding unknown(42)");
  // 100 INT8 values take 100 bytes and one 4-byte block scale.
  h->set_encoding(v1::WIRE_ENCODING_INT8);
  expect_invalid("INT8 size", "header says 100 elements of INT8 = 104 bytes");
  h->set_encoding(v1::WIRE_ENCODING_FP32);
  (*chunk_.mutable_payload())[5] ^= 1;
  expect_invalid("crc", "bad checksum");
  (*chunk_.mutable_payload())[5] ^= 1;
  EXPECT_TRUE(Check().ok());
}

TEST_F(ValidateTest, OffsetBeyondTheArenaIsRejectedEvenInsideAnnouncedRange) {
  expect_.range_end = 1200;  // a receiver bug must not let it through
  context_.range_end = 1000;
  chunk_.mutable_header()->set_range_end(1200);
  chunk_.mutable_header()->set_offset(950);
  chunk_.mutable_header()->set_length(100);
  chunk_.mutable_payload()->assign(400, '\0');
  chunk_.mutable_header()->set_crc32c(0);
  absl::Status s = Check();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("arena of 1000"));
}

TEST_F(ValidateTest, NonFiniteValueIsInvalidArgumentWhenDecoding) {
  arena_[250] = std::numeric_limits<float>::quiet_NaN();
  ASSERT_TRUE(EncodeChunk(context_, arena_, {200, 100}, false, &chunk_).ok());
  EXPECT_TRUE(Check().ok());  // the header and checksum are fine
  std::vector<float> buffer(1000);
  absl::Status s = ValidateAndDecodeChunk(chunk_, expect_, buffer);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("element 250 is not finite"));
}

TEST(Ack, EchoesTheTransferAndIsCheckedAgainstItsKey) {
  const TransferKey key{4, 12, v1::EXCHANGE_PHASE_ALL_GATHER, 2};
  ChunkContext context{key, /*sender_id=*/7, 100, 900, v1::WIRE_ENCODING_BF16,
                       1000};
  std::vector<float> arena(1000, 1.0f);
  v1::ExchangeChunk last;
  ASSERT_TRUE(EncodeChunk(context, arena, {800, 100}, true, &last).ok());
  const v1::ExchangeChunk ack = MakeAck(last.header(), /*receiver_id=*/3);
  EXPECT_TRUE(ack.last());
  EXPECT_TRUE(ack.payload().empty());
  EXPECT_EQ(ack.header().sender_id(), 3u);
  EXPECT_EQ(ack.header().offset(), 900u);
  EXPECT_EQ(ack.header().range_begin(), 100u);
  EXPECT_EQ(ack.header().encoding(), v1::WIRE_ENCODING_BF16);
  EXPECT_EQ(ack.header().arena_elements(), 1000u);
  EXPECT_TRUE(CheckAck(ack, key, 3).ok());
  // Another receiver, another step, or no last flag: not an acknowledgement.
  EXPECT_EQ(CheckAck(ack, key, 5).code(), absl::StatusCode::kUnavailable);
  TransferKey other = key;
  other.step = 3;
  EXPECT_THAT(CheckAck(ack, other, 3).message(), HasSubstr("does not match"));
  v1::ExchangeChunk unfinished = ack;
  unfinished.set_last(false);
  EXPECT_FALSE(CheckAck(unfinished, key, 3).ok());
}

}  // namespace
}  // namespace gasloc
