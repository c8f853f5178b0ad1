#include "common/malloc_tuning.h"

#include <malloc.h>

#include <algorithm>

namespace gasloc {

std::string TuneMallocForStreaming(int compute_threads) {
  constexpr int kMmapThresholdBytes = 32 << 20;  // glibc's largest allowed
  constexpr int kTrimThresholdBytes = 1 << 30;
  std::string refused;
  if (mallopt(M_MMAP_THRESHOLD, kMmapThresholdBytes) != 1)
    refused += "M_MMAP_THRESHOLD ";
  if (mallopt(M_TRIM_THRESHOLD, kTrimThresholdBytes) != 1)
    refused += "M_TRIM_THRESHOLD ";
  if (mallopt(M_ARENA_MAX, std::max(2, compute_threads)) != 1)
    refused += "M_ARENA_MAX ";
  return refused;
}

}  // namespace gasloc
