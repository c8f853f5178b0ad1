#include "worker/train/data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace gasloc {
namespace {

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  const int err = errno;
  const std::string message =
      absl::StrCat(what, " ", path, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(message);
  return absl::InvalidArgumentError(message);
}

// A read-only mmap of a whole regular file (nullptr for an empty file).
struct Mapping {
  void* data = nullptr;
  size_t bytes = 0;
};

absl::StatusOr<Mapping> MapFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open corpus file", path);
  Mapping mapping;
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    absl::Status s = ErrnoError("cannot stat corpus file", path);
    ::close(fd);
    return s;
  }
  mapping.bytes = static_cast<size_t>(st.st_size);
  if (mapping.bytes > 0) {
    mapping.data = ::mmap(nullptr, mapping.bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapping.data == MAP_FAILED) {
      absl::Status s = ErrnoError("cannot mmap corpus file", path);
      ::close(fd);
      return s;
    }
  }
  ::close(fd);
  return mapping;
}

}  // namespace

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

absl::StatusOr<std::unique_ptr<Corpus>> Corpus::Open(
    const CorpusOptions& options) {
  if (!(options.train_fraction > 0.0 && options.train_fraction < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "corpus train_fraction must be in (0, 1), got ",
        options.train_fraction));
  }
  std::unique_ptr<Corpus> corpus(new Corpus());
  corpus->path_ = options.path;
  std::error_code ec;
  const auto status = std::filesystem::status(options.path, ec);
  if (options.path.empty() || !std::filesystem::exists(status)) {
    return absl::NotFoundError(
        absl::StrCat("corpus path \"", options.path, "\" does not exist"));
  }
  if (std::filesystem::is_directory(status)) {
    std::vector<std::string> files;
    for (const auto& entry :
         std::filesystem::directory_iterator(options.path, ec)) {
      if (entry.is_regular_file()) files.push_back(entry.path().string());
    }
    if (ec) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot list corpus directory ", options.path, ": ", ec.message()));
    }
    std::sort(files.begin(), files.end());
    for (const std::string& file : files) {
      ASSIGN_OR_RETURN(Mapping mapping, MapFile(file));
      if (mapping.data == nullptr) continue;
      const auto* begin = static_cast<const uint8_t*>(mapping.data);
      corpus->owned_.insert(corpus->owned_.end(), begin, begin + mapping.bytes);
      ::munmap(mapping.data, mapping.bytes);
    }
    corpus->data_ = corpus->owned_.data();
    corpus->size_ = corpus->owned_.size();
  } else {
    ASSIGN_OR_RETURN(Mapping mapping, MapFile(options.path));
    corpus->mapping_ = mapping.data;
    corpus->mapping_bytes_ = mapping.bytes;
    corpus->data_ = static_cast<const uint8_t*>(mapping.data);
    corpus->size_ = mapping.bytes;
  }
  if (corpus->size_ == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("corpus \"", options.path, "\" is empty"));
  }
  corpus->split_ = static_cast<size_t>(
      std::floor(options.train_fraction * static_cast<double>(corpus->size_)));
  const size_t train = corpus->split_, val = corpus->size_ - corpus->split_;
  if (train < options.min_part_bytes || val < options.min_part_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "corpus \"", options.path, "\" is too small: ", corpus->size_,
        " bytes split into ", train, " training and ", val,
        " validation bytes, but each part needs at least ",
        options.min_part_bytes, " bytes (one window of context + 1)"));
  }
  return corpus;
}

Corpus::~Corpus() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
}

absl::StatusOr<WindowSampler> WindowSampler::Create(
    std::span<const uint8_t> data, const SamplerOptions& options) {
  if (options.window < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler window must be >= 2 bytes, got ", options.window));
  }
  if (options.num_workers < 1 || options.rank < 0 ||
      options.rank >= options.num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampler rank must be in [0, num_workers = ",
                     options.num_workers, "), got ", options.rank));
  }
  if (data.size() < static_cast<size_t>(options.window)) {
    return absl::InvalidArgumentError(
        absl::StrCat("training data has ", data.size(),
                     " bytes, fewer than one window of ", options.window));
  }
  return WindowSampler(data, options);
}

WindowSampler::WindowSampler(std::span<const uint8_t> data,
                             const SamplerOptions& options)
    : data_(data), options_(options) {
  slots_ = data.size() / static_cast<size_t>(options.window);
  half_bits_ = 1;
  while ((uint64_t{1} << (2 * half_bits_)) < slots_) ++half_bits_;
}

uint64_t WindowSampler::PermuteSlot(uint64_t epoch, uint64_t index) const {
  // A bijection on [0, 4^half_bits) from a 4-round Feistel network, walked
  // until it lands in [0, slots): a permutation of [0, slots).
  const uint64_t mask = (uint64_t{1} << half_bits_) - 1;
  const uint64_t key = SplitMix64(options_.seed ^ SplitMix64(epoch + 0x51ed));
  uint64_t x = index;
  do {
    uint64_t left = x >> half_bits_, right = x & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      const uint64_t f = SplitMix64(key + round * 0x1000193 + right) & mask;
      const uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    x = (left << half_bits_) | right;
  } while (x >= slots_);
  return x;
}

size_t WindowSampler::WindowStart(uint64_t draw) const {
  const uint64_t global = draw * static_cast<uint64_t>(options_.num_workers) +
                          static_cast<uint64_t>(options_.rank);
  const uint64_t epoch = global / slots_, index = global % slots_;
  const size_t window = static_cast<size_t>(options_.window);
  const size_t slack = data_.size() - slots_ * window;
  const size_t shift =
      slack == 0 ? 0
                 : static_cast<size_t>(
                       SplitMix64(options_.seed * 31 + epoch + 0xa5a5) %
                       (slack + 1));
  return shift + static_cast<size_t>(PermuteSlot(epoch, index)) * window;
}

void WindowSampler::NextBatch(int batch, uint8_t* out) {
  const size_t window = static_cast<size_t>(options_.window);
  for (int row = 0; row < batch; ++row) {
    const size_t start = WindowStart(cursor_++);
    std::memcpy(out + static_cast<size_t>(row) * window, data_.data() + start,
                window);
  }
}

absl::StatusOr<std::vector<size_t>> EvalWindowStarts(size_t data_bytes,
                                                     int window, int count) {
  if (count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("evaluation needs at least 1 window, got ", count));
  }
  if (window < 2 || data_bytes < static_cast<size_t>(window)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "validation data has ", data_bytes, " bytes, fewer than one window of ",
        window));
  }
  const size_t last = data_bytes - static_cast<size_t>(window);
  std::vector<size_t> starts(static_cast<size_t>(count));
  for (int k = 0; k < count; ++k) {
    starts[static_cast<size_t>(k)] =
        count == 1 ? 0
                   : static_cast<size_t>(static_cast<unsigned __int128>(last) *
                                         static_cast<unsigned>(k) /
                                         static_cast<unsigned>(count - 1));
  }
  return starts;
}

}  // namespace gasloc
