// Decoding a payload that arrives in pieces (gRPC's receive slices, cut
// anywhere, even inside an element) straight into the receive buffer:
// the same values and the same verdicts (checksum, size, non-finite
// element) as decoding the contiguous payload.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/crc32c.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/exchange/wire_codec.h"

namespace gasloc {
namespace {

using ::testing::HasSubstr;

// `payload` cut into pieces of the given sizes, cycled; the last piece
// takes what is left.
std::vector<absl::string_view> Cut(absl::string_view payload,
                                   const std::vector<size_t>& sizes) {
  std::vector<absl::string_view> pieces;
  for (size_t pos = 0, i = 0; pos < payload.size(); ++i) {
    const size_t n = std::min(sizes[i % sizes.size()], payload.size() - pos);
    pieces.push_back(payload.substr(pos, n));
    pos += n;
  }
  return pieces;
}

const std::vector<std::vector<size_t>> kCuts = {
    {1}, {3}, {5, 1, 7}, {4096 + 1}, {8191, 2}, {12288 * 2 + 3}, {1 << 20}};

TEST(PayloadPieces, DecodeMatchesTheContiguousDecodeWhereverThePiecesEnd) {
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  for (auto encoding : {v1::WIRE_ENCODING_FP32, v1::WIRE_ENCODING_BF16,
                        v1::WIRE_ENCODING_INT8}) {
    for (size_t n : {0, 1, 255, 257, 12289, 70001}) {
      std::vector<float> values(n);
      for (float& v : values) v = normal(rng);
      std::string payload;
      ASSERT_TRUE(EncodePayload(values, encoding, &payload).ok());
      const uint32_t crc = Crc32cReference(payload.data(), payload.size());
      std::vector<float> expected(n);
      ASSERT_TRUE(
          DecodeCheckedPayload(payload, encoding, expected, 0, crc).ok());
      for (const auto& sizes : kCuts) {
        SCOPED_TRACE(absl::StrCat(EncodingName(encoding), " n=", n,
                                  " first piece ", sizes[0]));
        const auto pieces = Cut(payload, sizes);
        std::vector<float> out(n, -1.0f);
        ASSERT_TRUE(DecodeCheckedPayload(pieces, encoding, out, 0, crc).ok());
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(out[i]),
                    std::bit_cast<uint32_t>(expected[i]))
              << i;
      }
    }
  }
}

TEST(PayloadPieces, BadChecksumSizeAndNonFiniteAreRefusedAsWhenContiguous) {
  for (auto encoding : {v1::WIRE_ENCODING_FP32, v1::WIRE_ENCODING_BF16}) {
    SCOPED_TRACE(EncodingName(encoding));
    std::vector<float> values(1000, 0.25f);
    std::string payload;
    ASSERT_TRUE(EncodePayload(values, encoding, &payload).ok());
    std::vector<float> out(values.size());
    const uint32_t crc = Crc32cReference(payload.data(), payload.size());
    const auto pieces = Cut(payload, {3});
    // A flipped bit anywhere: the checksum.
    std::string corrupt = payload;
    corrupt[1234] ^= 0x10;
    EXPECT_THAT(DecodeCheckedPayload(Cut(corrupt, {3}), encoding, out, 500,
                                     crc)
                    .message(),
                HasSubstr("bad checksum on chunk at offset 500"));
    // A piece short (a truncated payload) or one too many: the size.
    const std::vector<absl::string_view> short_pieces(pieces.begin(),
                                                      pieces.end() - 1);
    absl::Status truncated =
        DecodeCheckedPayload(short_pieces, encoding, out, 0, crc);
    EXPECT_EQ(truncated.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(truncated.message(), HasSubstr("bytes, expected"));
    std::vector<absl::string_view> long_pieces = pieces;
    long_pieces.push_back("x");
    EXPECT_EQ(DecodeCheckedPayload(long_pieces, encoding, out, 0, crc).code(),
              absl::StatusCode::kInvalidArgument);
    // A NaN the sender wrote (its CRC), split across two pieces: named.
    values[777] = std::numeric_limits<float>::quiet_NaN();
    payload.clear();
    ASSERT_TRUE(EncodePayload(values, encoding, &payload).ok());
    const uint32_t nan_crc = Crc32cReference(payload.data(), payload.size());
    absl::Status nan =
        DecodeCheckedPayload(Cut(payload, {3}), encoding, out, 10, nan_crc);
    EXPECT_THAT(nan.message(), HasSubstr("element 787 is not finite"));
  }
}

}  // namespace
}  // namespace gasloc
