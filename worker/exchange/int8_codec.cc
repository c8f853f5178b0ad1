#include "worker/exchange/int8_codec.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"

namespace gasloc {

static_assert(std::endian::native == std::endian::little,
              "the wire format is little-endian; this code copies scales "
              "as they lie in memory");

namespace {

constexpr uint32_t kAbsMask = 0x7fffffffu;
constexpr uint32_t kExponentMask = 0x7f800000u;
const double kMinScale = std::ldexp(1.0, kInt8MinScaleExponent);
const double kMaxScale = std::ldexp(1.0, kInt8MaxScaleExponent);

// The scale of a block whose largest |value| is max_abs > 0 (finite):
// max_abs / 127 rounded to 8 significant bits, ties to even, clamped.
// (max_abs / 127 is never a tie: its binary expansion repeats every 7
// bits unless it is exact, so the double quotient rounds as the exact one
// would.)
double ScaleOf(float max_abs) {
  int e = 0;
  const double f = std::frexp(static_cast<double>(max_abs) / 127.0, &e);
  const double rounded = std::ldexp(std::nearbyint(std::ldexp(f, 8)), e - 8);
  return std::clamp(rounded, kMinScale, kMaxScale);
}

// The block's largest |value| as float bits (the order of finite floats'
// magnitudes is that of their bits).
uint32_t MaxAbsBits(const float* values, size_t count) {
  uint32_t max_bits = 0;
  for (size_t i = 0; i < count; ++i) {
    uint32_t u;
    std::memcpy(&u, values + i, 4);
    max_bits = std::max(max_bits, u & kAbsMask);
  }
  return max_bits;
}

// Codes of one block under `scale`: x / scale rounded to nearest, ties to
// even (the double quotient of a 24-bit by an 8-bit number is never a
// false tie), clamped.
void QuantizeBlock(const float* values, size_t count, double scale,
                   int8_t* codes) {
  for (size_t i = 0; i < count; ++i) {
    const double t = std::nearbyint(static_cast<double>(values[i]) / scale);
    codes[i] = static_cast<int8_t>(std::clamp(t, -127.0, 127.0));
  }
}

// The scale and codes of one finite block; scale 0 when every code is 0
// (only possible at the smallest scale: elsewhere the largest code is
// 127), so that encoding the decoded block gives the same bytes.
float EncodeBlock(const float* values, size_t count, int8_t* codes) {
  const uint32_t max_bits = MaxAbsBits(values, count);
  if (max_bits == 0) {
    std::fill(codes, codes + count, int8_t{0});
    return 0.0f;
  }
  const double scale = ScaleOf(std::bit_cast<float>(max_bits));
  QuantizeBlock(values, count, scale, codes);
  if (scale == kMinScale &&
      std::all_of(codes, codes + count, [](int8_t q) { return q == 0; }))
    return 0.0f;
  return static_cast<float>(scale);  // exact: 8 significant bits
}

absl::Status NotFinite(uint64_t index, float value) {
  return absl::InvalidArgumentError(absl::StrCat("element ", index,
                                                 " is not finite (", value,
                                                 "); INT8 cannot encode it"));
}

// What is wrong with a block scale, or "" if it is a valid one.
std::string ScaleProblem(float scale) {
  const uint32_t bits = std::bit_cast<uint32_t>(scale);
  if ((bits & kAbsMask) > kExponentMask) return "NaN";
  if ((bits & kAbsMask) == kExponentMask) return "infinite";
  if ((bits & ~kAbsMask) != 0) return absl::StrCat("negative (", scale, ")");
  if (bits == 0) return "";
  const uint32_t exponent = bits >> 23, mantissa = bits & 0x7fffffu;
  if (exponent == 0)
    return absl::StrCat(scale, ", a denormal, below 2^", kInt8MinScaleExponent);
  if ((mantissa & 0xffffu) != 0)
    return absl::StrCat(scale, ", with more than 8 significant bits");
  if (scale > kMaxScale)
    return absl::StrCat(scale, ", above 2^", kInt8MaxScaleExponent);
  return "";
}

absl::Status BadBlock(uint64_t begin, uint64_t end, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(
      "INT8 block of elements [", begin, ", ", end, "): ", what,
      " (a block's scale is 0 for an all-zero block, else a float of 8 "
      "significant bits in [2^",
      kInt8MinScaleExponent, ", 2^", kInt8MaxScaleExponent,
      "]; codes are -127..127)"));
}

}  // namespace

uint64_t Int8PayloadBytes(uint64_t elements) {
  const uint64_t blocks =
      (elements + kInt8BlockElements - 1) / kInt8BlockElements;
  return elements + blocks * kInt8ScaleBytes;
}

uint64_t Int8ElementsPerChunk(uint32_t chunk_bytes) {
  const uint64_t blocks = std::max<uint64_t>(
      1, chunk_bytes / (kInt8BlockElements + kInt8ScaleBytes));
  return blocks * kInt8BlockElements;
}

float Int8BlockScale(std::span<const float> block) {
  std::vector<int8_t> codes(block.size());
  return EncodeBlock(block.data(), block.size(), codes.data());
}

absl::Status EncodeInt8(std::span<const float> values, std::string* out) {
  const size_t n = values.size();
  const size_t start = out->size();
  out->resize(start + Int8PayloadBytes(n));
  char* dst = out->data() + start;
  for (size_t begin = 0; begin < n; begin += kInt8BlockElements) {
    const size_t count = std::min<size_t>(kInt8BlockElements, n - begin);
    const float* block = values.data() + begin;
    if (MaxAbsBits(block, count) >= kExponentMask) {
      for (size_t i = 0; i < count; ++i)
        if (!std::isfinite(block[i])) {
          out->resize(start);
          return NotFinite(begin + i, block[i]);
        }
    }
    const float scale = EncodeBlock(
        block, count, reinterpret_cast<int8_t*>(dst + kInt8ScaleBytes));
    std::memcpy(dst, &scale, kInt8ScaleBytes);
    dst += kInt8ScaleBytes + count;
  }
  return absl::OkStatus();
}

absl::Status DecodeInt8(absl::string_view payload, std::span<float> out,
                        uint64_t first_index) {
  const size_t n = out.size();
  if (payload.size() != Int8PayloadBytes(n))
    return absl::InvalidArgumentError(absl::StrCat(
        "payload has ", payload.size(), " bytes, expected ",
        Int8PayloadBytes(n), " (", n, " elements of INT8: one byte each and a ",
        kInt8ScaleBytes, "-byte scale per block of ", kInt8BlockElements, ")"));
  const char* src = payload.data();
  for (size_t begin = 0; begin < n; begin += kInt8BlockElements) {
    const size_t count = std::min<size_t>(kInt8BlockElements, n - begin);
    const uint64_t first = first_index + begin, end = first + count;
    float scale;
    std::memcpy(&scale, src, kInt8ScaleBytes);
    if (const std::string problem = ScaleProblem(scale); !problem.empty())
      return BadBlock(first, end, absl::StrCat("scale is ", problem));
    const auto* codes = reinterpret_cast<const int8_t*>(src + kInt8ScaleBytes);
    uint32_t bad = 0, nonzero = 0;
    float* dst = out.data() + begin;
    for (size_t i = 0; i < count; ++i) {
      bad |= static_cast<uint32_t>(codes[i] == -128);
      nonzero |= static_cast<uint32_t>(codes[i] != 0);
      dst[i] = static_cast<float>(codes[i]) * scale;  // exact
    }
    if (bad != 0 || (scale == 0.0f && nonzero != 0)) {
      for (size_t i = 0; i < count; ++i) {
        if (codes[i] == -128)
          return BadBlock(first, end,
                          absl::StrCat("code -128 at element ", first + i));
        if (scale == 0.0f && codes[i] != 0)
          return BadBlock(
              first, end,
              absl::StrCat("scale is 0 under code ", static_cast<int>(codes[i]),
                           " at element ", first + i));
      }
    }
    src += kInt8ScaleBytes + count;
  }
  return absl::OkStatus();
}

void RoundToInt8(std::span<float> values) {
  int8_t codes[kInt8BlockElements];
  for (size_t begin = 0; begin < values.size(); begin += kInt8BlockElements) {
    const size_t count =
        std::min<size_t>(kInt8BlockElements, values.size() - begin);
    float* block = values.data() + begin;
    const float scale = EncodeBlock(block, count, codes);
    for (size_t i = 0; i < count; ++i)
      block[i] = static_cast<float>(codes[i]) * scale;
  }
}

Int8Reference QuantizeInt8Reference(std::span<const float> values) {
  Int8Reference ref;
  // The nearer of two candidates a and a + step; on a tie the one whose
  // multiple of step is even.
  auto nearest = [](double v, double step) {
    const double low = std::floor(v / step) * step, high = low + step;
    if (v - low < high - v) return low;
    if (high - v < v - low) return high;
    return std::fmod(low / step, 2.0) == 0 ? low : high;
  };
  for (size_t begin = 0; begin < values.size(); begin += kInt8BlockElements) {
    const size_t end =
        std::min<size_t>(values.size(), begin + kInt8BlockElements);
    double max_abs = 0;
    for (size_t i = begin; i < end; ++i)
      max_abs = std::max(max_abs, std::fabs(static_cast<double>(values[i])));
    double scale = 0;
    if (max_abs > 0) {
      const double target = max_abs / 127;
      int k = -200;  // 2^k <= target < 2^(k+1): 8 bits are steps of 2^(k-7)
      while (std::ldexp(1.0, k + 1) <= target) ++k;
      scale = nearest(target, std::ldexp(1.0, k - 7));
      scale = std::min(std::max(scale, std::ldexp(1.0, kInt8MinScaleExponent)),
                       std::ldexp(1.0, kInt8MaxScaleExponent));
    }
    bool all_zero = true;
    for (size_t i = begin; i < end; ++i) {
      double code = 0;
      if (scale > 0)
        code = std::min(127.0, std::max(-127.0, nearest(values[i] / scale, 1)));
      all_zero = all_zero && code == 0;
      ref.codes.push_back(static_cast<int8_t>(code));
    }
    ref.scales.push_back(all_zero ? 0.0f : static_cast<float>(scale));
  }
  return ref;
}

}  // namespace gasloc
