// Training data: a byte corpus read with mmap, split by bytes into a
// training part (the first floor(train_fraction * size) bytes) and a
// validation part (the rest); a deterministic window sampler over the
// training part; and the fixed validation windows that define validation
// bits per byte (docs/training.md, "Data sampling").
//
// Sampling rule (WindowSampler). The training part is cut into
// N = floor(train_bytes / (T + 1)) non-overlapping slots of T + 1 bytes
// (T = window length, i.e. the model's context). Worker `rank` of
// `num_workers` makes its draws j = 0, 1, 2, ... (j = step * batch + row);
// draw j has the global index g = j * num_workers + rank, so the workers
// interleave one global sequence of draws. Global draw g falls in epoch
// e = g / N at position i = g % N and reads slot P_e(i), where P_e is a
// pseudo-random permutation of [0, N) keyed by (seed, e) (a 4-round
// Feistel network with cycle walking), shifted by a per-epoch offset
// s_e in [0, train_bytes - N (T + 1)]. Within an epoch distinct global
// draws read distinct slots, so two workers of one job (same seed and
// num_workers, different ranks) never read the same window in the same
// epoch; reading the same windows takes the same rank on purpose.
//
// Thread safety: Corpus is immutable after Open (share it freely);
// WindowSampler holds a cursor and is used by one thread at a time.
#ifndef GASLOC_WORKER_TRAIN_DATA_H_
#define GASLOC_WORKER_TRAIN_DATA_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace gasloc {

struct CorpusOptions {
  // A file, or a directory whose regular files (sorted by name, not
  // recursive) are concatenated.
  std::string path;
  // Fraction of the bytes (from the start) used for training. (0, 1).
  double train_fraction = 0.9;
  // Each part must hold at least this many bytes (one window: T + 1).
  size_t min_part_bytes = 2;
};

class Corpus {
 public:
  // NOT_FOUND for a missing path; INVALID_ARGUMENT for an empty path, an
  // empty corpus, a path that is neither a regular file nor a directory (a
  // named pipe, a device, a socket: refused before any read, never a
  // hang), a directory with no regular file, an unreadable file, a bad
  // fraction or a part shorter than min_part_bytes. Every message names the
  // path (and the sizes where they matter).
  static absl::StatusOr<std::unique_ptr<Corpus>> Open(
      const CorpusOptions& options);
  ~Corpus();
  Corpus(const Corpus&) = delete;
  Corpus& operator=(const Corpus&) = delete;

  const std::string& path() const { return path_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  std::span<const uint8_t> train() const { return {data_, split_}; }
  std::span<const uint8_t> validation() const {
    return {data_ + split_, size_ - split_};
  }

 private:
  Corpus() = default;
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t split_ = 0;
  void* mapping_ = nullptr;       // mmap of a single file (or nullptr)
  size_t mapping_bytes_ = 0;
  std::vector<uint8_t> owned_;   // concatenation of a directory's files
};

struct SamplerOptions {
  uint64_t seed = 1;
  int rank = 0;         // [0, num_workers)
  int num_workers = 1;  // stride of the global draw sequence
  int window = 257;     // bytes per window: context + 1
};

class WindowSampler {
 public:
  // INVALID_ARGUMENT if the data holds no window or rank is out of range.
  static absl::StatusOr<WindowSampler> Create(std::span<const uint8_t> data,
                                              const SamplerOptions& options);

  // Start offset (into the data) of this worker's draw j. Pure.
  size_t WindowStart(uint64_t draw) const;
  // Copies `batch` windows (batch x window bytes, row-major) for draws
  // cursor .. cursor + batch - 1 into `out` and advances the cursor.
  void NextBatch(int batch, uint8_t* out);

  uint64_t cursor() const { return cursor_; }
  void set_cursor(uint64_t cursor) { cursor_ = cursor; }
  uint64_t slots() const { return slots_; }
  const SamplerOptions& options() const { return options_; }

 private:
  WindowSampler(std::span<const uint8_t> data, const SamplerOptions& options);
  uint64_t PermuteSlot(uint64_t epoch, uint64_t index) const;

  std::span<const uint8_t> data_;
  SamplerOptions options_;
  uint64_t slots_ = 0;
  int half_bits_ = 1;  // Feistel half width: 2 * half_bits_ >= log2(slots)
  uint64_t cursor_ = 0;
};

// Start offsets of `count` fixed evaluation windows of `window` bytes,
// evenly spaced over `data_bytes` bytes (the first at 0, the last ending at
// the end). INVALID_ARGUMENT if data_bytes < window or count < 1.
absl::StatusOr<std::vector<size_t>> EvalWindowStarts(size_t data_bytes,
                                                     int window, int count);

// SplitMix64: the hash behind the sampler, generation and tests.
uint64_t SplitMix64(uint64_t x);

}  // namespace gasloc

#endif  // GASLOC_WORKER_TRAIN_DATA_H_
