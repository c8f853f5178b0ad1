// CRC-32C (Castagnoli), the checksum of exchange chunks and checkpoints.
// Uses the SSE4.2 crc32 instruction when the CPU has it (checked once at
// run time; three interleaved streams over long inputs) and a table-driven
// plain loop otherwise; both give identical results. Pure functions:
// thread-safe.
#ifndef GASLOC_COMMON_CRC32C_H_
#define GASLOC_COMMON_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace gasloc {

// With SSE4.2, each whole multiple of this many bytes is checksummed as
// three interleaved streams (about 3x one stream); a caller that feeds
// blocks (the fused decode of exchange chunks) sizes them to a multiple.
inline constexpr size_t kCrc32cParallelBytes = 3 * 4096;

// Extends `crc` (the value returned for the preceding bytes, 0 to start)
// over `data[0, size)`.
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);

inline uint32_t Crc32c(const void* data, size_t size) {
  return Crc32cExtend(0, data, size);
}

// The plain-loop reference (bitwise, no tables), for tests.
uint32_t Crc32cReference(const void* data, size_t size);

}  // namespace gasloc

#endif  // GASLOC_COMMON_CRC32C_H_
