#include "common/crc32c.h"

#include <nmmintrin.h>

#include <array>
#include <cstring>

namespace gasloc {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> table{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kTable = MakeTable();

uint32_t ExtendTable(uint32_t crc, const uint8_t* p, size_t n) {
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = kTable[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}

// Three streams: the crc32 instruction has a latency of 3 cycles and a
// throughput of 1 per cycle, so one dependent chain runs at a third of
// its speed. Each block of kCrc32cParallelBytes is three stripes of
// kStripe bytes, CRC'd side by side and joined with
//   raw(c, A B) = raw(0, B) ^ Shift(raw(c, A))
// where Shift(v) = raw(v, kStripe zero bytes) is linear in v: four tables
// of 256 entries, one per byte of v, built once from the plain loop.
constexpr size_t kStripe = kCrc32cParallelBytes / 3;

struct ShiftTables {
  std::array<std::array<uint32_t, 256>, 4> byte;
  ShiftTables() {
    std::array<uint32_t, 32> basis{};
    for (int bit = 0; bit < 32; ++bit) {
      uint32_t c = 1u << bit;
      for (size_t i = 0; i < kStripe; ++i) c = kTable[c & 0xFF] ^ (c >> 8);
      basis[bit] = c;
    }
    for (int k = 0; k < 4; ++k)
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t v = 0;
        for (int bit = 0; bit < 8; ++bit)
          if (b & (1u << bit)) v ^= basis[8 * k + bit];
        byte[k][b] = v;
      }
  }
  uint32_t Shift(uint32_t v) const {
    return byte[0][v & 0xFF] ^ byte[1][(v >> 8) & 0xFF] ^
           byte[2][(v >> 16) & 0xFF] ^ byte[3][v >> 24];
  }
};

const ShiftTables& Shifts() {
  static const ShiftTables kShifts;
  return kShifts;
}

__attribute__((target("sse4.2"))) uint32_t ExtendHardware(uint32_t crc,
                                                          const uint8_t* p,
                                                          size_t n) {
  uint64_t c = ~crc;
  if (n >= kCrc32cParallelBytes) {
    const ShiftTables& shifts = Shifts();
    for (; n >= kCrc32cParallelBytes; n -= kCrc32cParallelBytes) {
      uint64_t c1 = 0, c2 = 0;
      for (size_t i = 0; i < kStripe; i += 8) {
        uint64_t w0, w1, w2;
        std::memcpy(&w0, p + i, 8);
        std::memcpy(&w1, p + kStripe + i, 8);
        std::memcpy(&w2, p + 2 * kStripe + i, 8);
        c = _mm_crc32_u64(c, w0);
        c1 = _mm_crc32_u64(c1, w1);
        c2 = _mm_crc32_u64(c2, w2);
      }
      uint32_t joined = shifts.Shift(static_cast<uint32_t>(c)) ^
                        static_cast<uint32_t>(c1);
      c = shifts.Shift(joined) ^ static_cast<uint32_t>(c2);
      p += kCrc32cParallelBytes;
    }
  }
  while (n >= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = _mm_crc32_u64(c, word);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n > 0) {
    c32 = _mm_crc32_u8(c32, *p++);
    --n;
  }
  return ~c32;
}

bool HasSse42() {
  static const bool kHas = __builtin_cpu_supports("sse4.2");
  return kHas;
}

}  // namespace

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  return HasSse42() ? ExtendHardware(crc, p, size) : ExtendTable(crc, p, size);
}

uint32_t Crc32cReference(const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ kPoly : crc >> 1;
  }
  return ~crc;
}

}  // namespace gasloc
