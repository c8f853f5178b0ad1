// Fuzz target: what a hostile or broken peer can put in one exchange chunk.
// The input is parsed as a serialised v1::ExchangeChunk and checked against
// a fixed receiver expectation (fuzz_fixtures.h) by ValidateChunk and
// ValidateAndDecodeChunk; the raw input bytes also go through the payload
// decoders. Properties, each a crash (so libFuzzer keeps the input):
//   - ValidateChunk, and ValidateChunkHeader followed by the decode, agree;
//   - an accepted chunk wrote finite values into [offset, offset + length)
//     of the receive buffer, each the plain-loop decode of its bytes, and
//     nothing outside that span;
//   - DecodePayload agrees with the plain-loop references on any bytes:
//     every value bit for bit, and it fails exactly when some element is
//     not finite, naming the first one;
//   - DecodeCheckedPayload fails on a wrong CRC before anything else and
//     otherwise agrees with DecodePayload;
//   - FloatToBf16 agrees with FloatToBf16Reference on any float.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/crc32c.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_fixtures.h"
#include "tests/fuzz/fuzz_seeds.h"
#include "worker/exchange/wire_codec.h"

namespace gasloc::fuzz {
namespace {

bool SameBits(float a, float b) {
  return std::memcmp(&a, &b, sizeof(float)) == 0;
}

// The plain-loop decode of element i of `payload`.
float ReferenceElement(absl::string_view payload, v1::WireEncoding encoding,
                       size_t i) {
  if (encoding == v1::WIRE_ENCODING_BF16) {
    uint16_t bits;
    std::memcpy(&bits, payload.data() + 2 * i, 2);
    return Bf16ToFloatReference(bits);
  }
  float value;
  std::memcpy(&value, payload.data() + 4 * i, 4);
  return value;
}

void CheckPayloadDecoders(absl::string_view bytes) {
  for (v1::WireEncoding encoding :
       {v1::WIRE_ENCODING_FP32, v1::WIRE_ENCODING_BF16}) {
    const size_t width = encoding == v1::WIRE_ENCODING_BF16 ? 2 : 4;
    const size_t n = bytes.size() / width;
    const absl::string_view payload = bytes.substr(0, n * width);
    std::optional<size_t> first_bad;
    for (size_t i = 0; i < n && !first_bad; ++i)
      if (!std::isfinite(ReferenceElement(payload, encoding, i)))
        first_bad = i;
    std::vector<float> out(n);
    const absl::Status decoded = DecodePayload(payload, encoding, out, 100);
    if (first_bad) {
      GASLOC_FUZZ_CHECK(absl::IsInvalidArgument(decoded), decoded.ToString());
      GASLOC_FUZZ_CHECK(absl::StrContains(decoded.message(),
                                   absl::StrCat("element ", 100 + *first_bad,
                                                " is not finite")),
                 decoded.ToString());
    } else {
      GASLOC_FUZZ_CHECK(decoded.ok(), decoded.ToString());
      for (size_t i = 0; i < n; ++i)
        GASLOC_FUZZ_CHECK(SameBits(out[i], ReferenceElement(payload, encoding, i)),
                   absl::StrCat("element ", i));
    }
    const uint32_t crc = Crc32c(payload.data(), payload.size());
    GASLOC_FUZZ_CHECK(crc == Crc32cReference(payload.data(), payload.size()), "crc");
    std::vector<float> checked(n);
    const absl::Status wrong_crc =
        DecodeCheckedPayload(payload, encoding, checked, 100, crc ^ 1u);
    GASLOC_FUZZ_CHECK(absl::StrContains(wrong_crc.message(), "bad checksum"),
               wrong_crc.ToString());
    const absl::Status right_crc =
        DecodeCheckedPayload(payload, encoding, checked, 100, crc);
    GASLOC_FUZZ_CHECK(right_crc.code() == decoded.code(),
               absl::StrCat(right_crc.ToString(), " vs ", decoded.ToString()));
    if (decoded.ok() && n > 0)
      GASLOC_FUZZ_CHECK(std::memcmp(checked.data(), out.data(), n * 4) == 0,
                 "checked decode differs");
  }
  // Encoding: every 4 bytes as a float, fast against reference rounding.
  for (size_t i = 0; i + 4 <= bytes.size(); i += 4) {
    float value;
    std::memcpy(&value, bytes.data() + i, 4);
    const uint16_t fast = FloatToBf16(value);
    const uint16_t reference = FloatToBf16Reference(value);
    if (std::isnan(value)) {
      GASLOC_FUZZ_CHECK((fast & 0x7fc0u) == 0x7fc0u, "NaN must stay a quiet NaN");
    } else {
      GASLOC_FUZZ_CHECK(fast == reference, absl::StrCat("FloatToBf16(", value, ")"));
    }
  }
}

void CheckChunk(const v1::ExchangeChunk& chunk) {
  const ChunkExpectation expect = ChunkTargetExpectation();
  constexpr float kSentinel = -12345.0f;
  std::vector<float> buffer(kChunkArena, kSentinel);
  const absl::Status whole = ValidateChunk(chunk, expect);
  const absl::Status decoded = ValidateAndDecodeChunk(chunk, expect, buffer);
  const absl::Status header = ValidateChunkHeader(chunk, expect);
  if (!header.ok()) {
    GASLOC_FUZZ_CHECK(!whole.ok() && !decoded.ok(), header.ToString());
    GASLOC_FUZZ_CHECK(decoded.code() == header.code(), decoded.ToString());
  }
  if (!whole.ok())
    GASLOC_FUZZ_CHECK(!decoded.ok(), "decoded a chunk ValidateChunk refused: " +
                                  whole.ToString());
  const v1::ChunkHeader& h = chunk.header();
  if (header.ok()) {
    // The header was accepted: the span lies inside the expected range.
    GASLOC_FUZZ_CHECK(h.offset() >= expect.range_begin &&
                   h.offset() + h.length() <= expect.range_end,
               "accepted a span outside the range");
  }
  for (uint64_t i = 0; i < kChunkArena; ++i) {
    const bool inside =
        header.ok() && i >= h.offset() && i < h.offset() + h.length();
    if (!inside)
      GASLOC_FUZZ_CHECK(buffer[i] == kSentinel,
                 absl::StrCat("element ", i, " outside the chunk written"));
  }
  if (!decoded.ok()) return;
  GASLOC_FUZZ_CHECK(whole.ok(), "ValidateChunk refused a chunk that decoded: " +
                             whole.ToString());
  for (uint32_t i = 0; i < h.length(); ++i) {
    const float value = buffer[h.offset() + i];
    GASLOC_FUZZ_CHECK(std::isfinite(value), absl::StrCat("element ", i));
    GASLOC_FUZZ_CHECK(SameBits(value, ReferenceElement(chunk.payload(),
                                                h.encoding(), i)),
               absl::StrCat("element ", i, " decoded wrongly"));
  }
}

}  // namespace

// Chunks an honest sender writes for the expected transfer (fp32 and bf16,
// first, last and whole-range), one with a bad checksum, and raw bf16
// payload bytes (NaN, Inf, subnormals) for the decoders.
void WriteSeeds(SeedWriter& seeds) {
  const ChunkExpectation expect = ChunkTargetExpectation();
  const std::vector<float> source = SourceArena(kChunkArena);
  auto chunk = [&](v1::WireEncoding encoding, uint64_t offset,
                   uint32_t length, bool last) {
    ChunkContext context{expect.key,       expect.sender_id,
                         expect.range_begin, expect.range_end,
                         encoding,         expect.arena_elements};
    v1::ExchangeChunk out;
    absl::Status status =
        EncodeChunk(context, source, {offset, length}, last, &out);
    GASLOC_FUZZ_CHECK(status.ok(), status.ToString());
    return out;
  };
  seeds.Add("fp32_first", chunk(v1::WIRE_ENCODING_FP32, 8, 32, false)
                              .SerializeAsString());
  seeds.Add("bf16_last", chunk(v1::WIRE_ENCODING_BF16, 40, 32, true)
                             .SerializeAsString());
  seeds.Add("fp32_whole", chunk(v1::WIRE_ENCODING_FP32, 8, 64, true)
                              .SerializeAsString());
  v1::ExchangeChunk bad = chunk(v1::WIRE_ENCODING_BF16, 8, 16, false);
  bad.mutable_header()->set_crc32c(bad.header().crc32c() ^ 1u);
  seeds.Add("bf16_bad_crc", bad.SerializeAsString());
  const uint16_t specials[] = {0x7fc0, 0x7f80, 0xff80, 0x0001, 0x8000,
                               0x3f80, 0x7f7f, 0x0080};
  seeds.Add("bf16_specials",
            std::string_view(reinterpret_cast<const char*>(specials),
                             sizeof(specials)));
}

}  // namespace gasloc::fuzz

GASLOC_FUZZ_SEEDS()

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gasloc;
  fuzz::CheckPayloadDecoders(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  v1::ExchangeChunk chunk;
  if (chunk.ParseFromArray(data, static_cast<int>(size)))
    fuzz::CheckChunk(chunk);
  return 0;
}
