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

// What a non-regular, non-directory path is, for the error message.
const char* KindOfSpecialFile(mode_t mode) {
  if (S_ISFIFO(mode)) return "a named pipe";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

absl::Status NotRegularError(const std::string& path, mode_t mode) {
  return absl::InvalidArgumentError(absl::StrCat(
      "corpus path \"", path, "\" is ", KindOfSpecialFile(mode),
      ", not a regular file or a directory of regular files"));
}

absl::StatusOr<Mapping> MapFile(const std::string& path) {
  // O_NONBLOCK: a named pipe swapped in after the caller's stat must not
  // block the open (the fstat below then refuses it).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return ErrnoError("cannot open corpus file", path);
  Mapping mapping;
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    absl::Status s = ErrnoError("cannot stat corpus file", path);
    ::close(fd);
    return s;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return NotRegularError(path, st.st_mode);
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

// The regular files of a corpus directory (symbolic links followed, not
// recursive), sorted by name; an error names the directory.
absl::StatusOr<std::vector<std::string>> ListCorpusFiles(
    const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> files;
  std::filesystem::directory_iterator it(dir, ec);
  for (; !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    std::error_code kind_ec;
    if (it->is_regular_file(kind_ec)) files.push_back(it->path().string());
  }
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot list corpus directory \"", dir, "\": ", ec.message()));
  }
  if (files.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "corpus directory \"", dir, "\" holds no regular files"));
  }
  std::sort(files.begin(), files.end());
  return files;
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
  if (options.path.empty()) {
    return absl::InvalidArgumentError("corpus path is empty");
  }
  std::unique_ptr<Corpus> corpus(new Corpus());
  corpus->path_ = options.path;
  struct stat st;
  if (::stat(options.path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) {
      return absl::NotFoundError(
          absl::StrCat("corpus path \"", options.path, "\" does not exist"));
    }
    return ErrnoError("cannot stat corpus path", options.path);
  }
  if (S_ISDIR(st.st_mode)) {
    ASSIGN_OR_RETURN(std::vector<std::string> files,
                     ListCorpusFiles(options.path));
    for (const std::string& file : files) {
      ASSIGN_OR_RETURN(Mapping mapping, MapFile(file));
      if (mapping.data == nullptr) continue;
      const auto* begin = static_cast<const uint8_t*>(mapping.data);
      corpus->owned_.insert(corpus->owned_.end(), begin, begin + mapping.bytes);
      ::munmap(mapping.data, mapping.bytes);
    }
    corpus->data_ = corpus->owned_.data();
    corpus->size_ = corpus->owned_.size();
  } else if (S_ISREG(st.st_mode)) {
    ASSIGN_OR_RETURN(Mapping mapping, MapFile(options.path));
    corpus->mapping_ = mapping.data;
    corpus->mapping_bytes_ = mapping.bytes;
    corpus->data_ = static_cast<const uint8_t*>(mapping.data);
    corpus->size_ = mapping.bytes;
  } else {
    return NotRegularError(options.path, st.st_mode);
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
