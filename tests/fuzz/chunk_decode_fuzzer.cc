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
//   - FloatToBf16 agrees with FloatToBf16Reference on any float;
//   - DecodeInt8 on any bytes accepts exactly the payloads whose every
//     block scale and code the plain-loop check below accepts, and decodes
//     each value to code x scale bit for bit;
//   - EncodeInt8 on any finite floats (the input's bytes, or values just
//     decoded) agrees with QuantizeInt8Reference, and what it encodes
//     decodes to values that encode to the same bytes again (what keeps
//     ring replicas identical).
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
#include "worker/exchange/int8_codec.h"
#include "worker/exchange/wire_codec.h"

namespace gasloc::fuzz {
namespace {

bool SameBits(float a, float b) {
  return std::memcmp(&a, &b, sizeof(float)) == 0;
}

// INT8: the scale and code of element i, read by hand (blocks of
// kInt8BlockElements, each its 4-byte scale then its codes).
float Int8Scale(absl::string_view payload, size_t i) {
  float scale;
  std::memcpy(&scale,
              payload.data() + (i / kInt8BlockElements) *
                                   (kInt8BlockElements + kInt8ScaleBytes),
              4);
  return scale;
}
int Int8Code(absl::string_view payload, size_t i) {
  return static_cast<int8_t>(
      payload[(i / kInt8BlockElements + 1) * kInt8ScaleBytes + i]);
}

// The plain-loop decode of element i of `payload`.
float ReferenceElement(absl::string_view payload, v1::WireEncoding encoding,
                       size_t i) {
  if (encoding == v1::WIRE_ENCODING_INT8)
    return static_cast<float>(static_cast<double>(Int8Code(payload, i)) *
                              Int8Scale(payload, i));
  if (encoding == v1::WIRE_ENCODING_BF16) {
    uint16_t bits;
    std::memcpy(&bits, payload.data() + 2 * i, 2);
    return Bf16ToFloatReference(bits);
  }
  float value;
  std::memcpy(&value, payload.data() + 4 * i, 4);
  return value;
}

// Whether element i's scale and code are valid, checked field by field: a
// scale is +0 or a normal float of 8 significant bits (the low 16
// mantissa bits 0) in [2^-126, 2^121] (biased exponent 1..248, no
// mantissa at 248); a code is not -128, and 0 under a zero scale.
bool Int8ElementValid(absl::string_view payload, size_t i) {
  uint32_t bits;
  const float scale = Int8Scale(payload, i);
  std::memcpy(&bits, &scale, 4);
  const int code = Int8Code(payload, i);
  if (code == -128) return false;
  if (bits == 0) return code == 0;
  const uint32_t exponent = bits >> 23;  // the sign bit set: > 255
  const uint32_t mantissa = bits & 0x7fffffu;
  return (mantissa & 0xffffu) == 0 && exponent >= 1 &&
         (exponent < 248 || (exponent == 248 && mantissa == 0));
}

// On finite `values`: EncodeInt8's scales and codes are the plain-loop
// reference's, and what a receiver decodes encodes to the same bytes again
// (Q(Q(x)) = Q(x), what keeps ring replicas identical).
void CheckInt8Rounding(const std::vector<float>& values) {
  std::string payload;
  const absl::Status encoded = EncodeInt8(values, &payload);
  GASLOC_FUZZ_CHECK(encoded.ok(), encoded.ToString());
  const Int8Reference ref = QuantizeInt8Reference(values);
  for (size_t i = 0; i < values.size(); ++i) {
    GASLOC_FUZZ_CHECK(Int8Code(payload, i) == ref.codes[i],
                      absl::StrCat("INT8 code of ", values[i]));
    GASLOC_FUZZ_CHECK(
        SameBits(Int8Scale(payload, i), ref.scales[i / kInt8BlockElements]),
        absl::StrCat("INT8 scale of the block of element ", i));
  }
  std::vector<float> decoded(values.size());
  const absl::Status status = DecodeInt8(payload, decoded);
  GASLOC_FUZZ_CHECK(status.ok(), status.ToString());
  std::string again;
  GASLOC_FUZZ_CHECK(EncodeInt8(decoded, &again).ok(), "re-encoding");
  GASLOC_FUZZ_CHECK(again == payload,
                    "decoded INT8 values re-encode to other bytes");
  std::vector<float> rounded = values;
  RoundToInt8(rounded);
  GASLOC_FUZZ_CHECK(
      values.empty() ||
          std::memcmp(rounded.data(), decoded.data(), 4 * values.size()) == 0,
      "RoundToInt8 differs from decode(encode)");
}

void CheckInt8Decoder(absl::string_view bytes) {
  // The bytes as floats, when all are finite: the encoder's properties.
  std::vector<float> floats(bytes.size() / 4);
  if (!floats.empty())
    std::memcpy(floats.data(), bytes.data(), 4 * floats.size());
  bool finite = true;
  for (float f : floats) finite = finite && std::isfinite(f);
  if (finite) CheckInt8Rounding(floats);
  size_t n = 0;  // the most elements whose payload fits
  while (Int8PayloadBytes(n + 1) <= bytes.size()) ++n;
  const absl::string_view payload = bytes.substr(0, Int8PayloadBytes(n));
  bool valid = true;
  for (size_t i = 0; i < n && valid; ++i) valid = Int8ElementValid(payload, i);
  std::vector<float> out(n);
  const absl::Status decoded =
      DecodePayload(payload, v1::WIRE_ENCODING_INT8, out, 100);
  GASLOC_FUZZ_CHECK(decoded.ok() == valid, decoded.ToString());
  if (!decoded.ok()) {
    GASLOC_FUZZ_CHECK(absl::IsInvalidArgument(decoded), decoded.ToString());
    GASLOC_FUZZ_CHECK(
        absl::StrContains(decoded.message(), "INT8 block of elements"),
        decoded.ToString());
    return;
  }
  for (size_t i = 0; i < n; ++i)
    GASLOC_FUZZ_CHECK(
        SameBits(out[i], ReferenceElement(payload, v1::WIRE_ENCODING_INT8, i)),
        absl::StrCat("INT8 element ", i));
  CheckInt8Rounding(out);
  const uint32_t crc = Crc32c(payload.data(), payload.size());
  const absl::Status wrong_crc =
      DecodeCheckedPayload(payload, v1::WIRE_ENCODING_INT8, out, 100, crc ^ 1u);
  GASLOC_FUZZ_CHECK(absl::StrContains(wrong_crc.message(), "bad checksum"),
                    wrong_crc.ToString());
}

void CheckPayloadDecoders(absl::string_view bytes) {
  CheckInt8Decoder(bytes);
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
