#include "worker/train/checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/crc32c.h"
#include "common/job_spec.h"
#include "common/status_macros.h"

namespace gasloc {
namespace {

constexpr char kMagic[8] = {'G', 'A', 'S', 'L', 'O', 'C', 'K', 'P'};
// magic, version, reserved, file_bytes, 4 x int32 config, fingerprint,
// total_floats, step, data_cursor, adam_step.
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 16 + 8 + 8 + 8 + 8 + 8;
constexpr size_t kTrailerBytes = 4;  // CRC-32C

// Byte sink used twice: once to count the file's length, once to write.
class Sink {
 public:
  explicit Sink(std::FILE* file) : file_(file) {}
  void Write(const void* data, size_t size) {
    if (file_ != nullptr && ok_ && size > 0) {
      ok_ = std::fwrite(data, 1, size, file_) == size;
    }
    crc_ = file_ != nullptr ? Crc32cExtend(crc_, data, size) : crc_;
    bytes_ += size;
  }
  template <typename T>
  void Put(T value) {
    Write(&value, sizeof(value));
  }
  uint64_t bytes() const { return bytes_; }
  uint32_t crc() const { return crc_; }
  bool ok() const { return ok_; }

 private:
  std::FILE* file_;
  bool ok_ = true;
  uint32_t crc_ = 0;
  uint64_t bytes_ = 0;
};

void Serialize(const CheckpointView& view, uint64_t file_bytes, Sink* sink) {
  sink->Write(kMagic, sizeof(kMagic));
  sink->Put<uint32_t>(kCheckpointVersion);
  sink->Put<uint32_t>(0);
  sink->Put<uint64_t>(file_bytes);
  sink->Put<int32_t>(view.config.layers);
  sink->Put<int32_t>(view.config.d_model);
  sink->Put<int32_t>(view.config.heads);
  sink->Put<int32_t>(view.config.context);
  sink->Put<uint64_t>(view.params->layout().fingerprint());
  sink->Put<uint64_t>(view.params->size());
  sink->Put<uint64_t>(view.step);
  sink->Put<uint64_t>(view.data_cursor);
  sink->Put<uint64_t>(view.adam_step);
  for (const FloatArena* arena : {view.params, view.adam_m, view.adam_v}) {
    sink->Write(arena->data(), arena->size() * sizeof(float));
  }
  static const CheckpointExtras kNone;
  const CheckpointExtras& extras =
      view.extras != nullptr ? *view.extras : kNone;
  sink->Put<uint32_t>(static_cast<uint32_t>(extras.buffers.size()));
  for (const auto& [name, values] : extras.buffers) {
    sink->Put<uint32_t>(static_cast<uint32_t>(name.size()));
    sink->Write(name.data(), name.size());
    sink->Put<uint64_t>(values.size());
    sink->Write(values.data(), values.size() * sizeof(float));
  }
  sink->Put<uint32_t>(static_cast<uint32_t>(extras.values.size()));
  for (const auto& [key, value] : extras.values) {
    sink->Put<uint32_t>(static_cast<uint32_t>(key.size()));
    sink->Write(key.data(), key.size());
    sink->Put<uint64_t>(value.size());
    sink->Write(value.data(), value.size());
  }
}

absl::Status IoError(absl::string_view what, const std::string& path) {
  return absl::InternalError(
      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// Bounds-checked reader over the mapped file.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool Read(void* out, size_t bytes) {
    if (bytes > size_ - pos_) return false;
    // memcpy's pointers must be valid even for zero bytes, and an empty
    // vector's data() may be null (UBSan: "null pointer passed as argument").
    if (bytes == 0) return true;
    std::memcpy(out, data_ + pos_, bytes);
    pos_ += bytes;
    return true;
  }
  template <typename T>
  bool Get(T* value) {
    return Read(value, sizeof(T));
  }
  bool Skip(size_t bytes) {
    if (bytes > size_ - pos_) return false;
    pos_ += bytes;
    return true;
  }
  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// A read-only mapping of a whole file, unmapped on destruction.
class MappedFile {
 public:
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(
      const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      const std::string message = absl::StrCat(
          "cannot open checkpoint ", path, ": ", std::strerror(errno));
      return errno == ENOENT ? absl::NotFoundError(message)
                             : absl::InternalError(message);
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      return IoError("cannot stat checkpoint", path);
    }
    auto file = std::unique_ptr<MappedFile>(new MappedFile());
    file->size_ = static_cast<size_t>(st.st_size);
    if (file->size_ > 0) {
      void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        return IoError("cannot mmap checkpoint", path);
      }
      file->data_ = static_cast<const uint8_t*>(p);
    }
    ::close(fd);
    return file;
  }
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_);
  }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  MappedFile() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

struct Header {
  ModelConfig config;
  uint64_t fingerprint = 0, total_floats = 0, step = 0, data_cursor = 0,
           adam_step = 0;
};

// Checks magic, version, length and checksum; parses the header.
absl::StatusOr<Header> CheckFile(const std::string& path,
                                 const MappedFile& file, Reader* reader) {
  const auto damaged = [&path](absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat("checkpoint ", path, " is damaged: ", why));
  };
  if (file.size() < kHeaderBytes + kTrailerBytes) {
    return damaged(absl::StrCat("only ", file.size(),
                                " bytes, shorter than the header"));
  }
  char magic[8];
  uint32_t version = 0, reserved = 0;
  uint64_t file_bytes = 0;
  reader->Read(magic, sizeof(magic));
  reader->Get(&version);
  reader->Get(&reserved);
  reader->Get(&file_bytes);
  if (std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    return damaged("bad magic (not a gasloc checkpoint)");
  }
  if (version != kCheckpointVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", path, " has format version ", version,
        "; this build reads version ", kCheckpointVersion));
  }
  if (file_bytes != file.size()) {
    return damaged(absl::StrCat("the header says ", file_bytes,
                                " bytes but the file has ", file.size(),
                                file.size() < file_bytes ? " (truncated)"
                                                         : " (extended)"));
  }
  const size_t body = file.size() - kTrailerBytes;
  uint32_t stored_crc = 0;
  std::memcpy(&stored_crc, file.data() + body, sizeof(stored_crc));
  const uint32_t actual_crc = Crc32c(file.data(), body);
  if (stored_crc != actual_crc) {
    return damaged(absl::StrCat("CRC-32C mismatch (stored ", stored_crc,
                                ", computed ", actual_crc, ")"));
  }
  Header h;
  int32_t dims[4];
  reader->Read(dims, sizeof(dims));
  h.config.layers = dims[0];
  h.config.d_model = dims[1];
  h.config.heads = dims[2];
  h.config.context = dims[3];
  // The dimensions size what a caller allocates (MakeModelLayout): within
  // the JobSpec caps or the file is refused.
  // (0 = no transformer: a test's or a tool's plain arenas.)
  if (dims[0] < 0 || dims[0] > static_cast<int32_t>(kMaxLayers) ||
      dims[1] < 0 || dims[1] > static_cast<int32_t>(kMaxDModel) ||
      dims[2] < 0 || dims[2] > static_cast<int32_t>(kMaxDModel) ||
      dims[3] < 0 || dims[3] > static_cast<int32_t>(kMaxContext))
    return damaged(absl::StrCat("model dimensions out of range (layers ",
                                dims[0], ", d_model ", dims[1], ", heads ",
                                dims[2], ", context ", dims[3], ")"));
  reader->Get(&h.fingerprint);
  reader->Get(&h.total_floats);
  reader->Get(&h.step);
  reader->Get(&h.data_cursor);
  reader->Get(&h.adam_step);
  return h;
}

// A checkpoint is loaded only if every value is finite (a NaN written by a
// diverged run must not be resumed from).
absl::Status CheckFinite(const std::string& path, absl::string_view what,
                         const float* values, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(values[i]))
      return absl::DataLossError(absl::StrCat(
          "checkpoint ", path, " holds a non-finite value in ", what,
          " (element ", i, ")"));
  }
  return absl::OkStatus();
}

// The caller's buffers and values, after the arenas; checks every buffer
// value is finite.
absl::Status ReadExtras(const std::string& path, Reader& reader,
                        uint64_t file_size, CheckpointExtras* extras) {
  const auto malformed = [&path, &reader](absl::string_view what) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path,
                                            " is malformed: ", what,
                                            " at byte ", reader.pos()));
  };
  uint32_t count = 0;
  if (!reader.Get(&count)) return malformed("missing buffer count");
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t name_len = 0;
    uint64_t floats = 0;
    std::string name;
    if (!reader.Get(&name_len)) return malformed("missing buffer name");
    // Every length is checked against what is left before anything is
    // allocated for it (a forged 4 GiB length is an error, not a resize).
    if (name_len > kMaxCheckpointNameBytes || name_len > reader.remaining())
      return malformed(absl::StrCat("buffer name length ", name_len,
                                    " exceeds the limit or the file"));
    name.resize(name_len);
    if (!reader.Read(name.data(), name_len) || !reader.Get(&floats))
      return malformed("bad buffer entry");
    if (floats > reader.remaining() / sizeof(float))
      return malformed(absl::StrCat("buffer \"", name, "\" length ", floats,
                                    " floats exceeds the file"));
    std::vector<float> values(floats);
    if (!reader.Read(values.data(), floats * sizeof(float))) {
      return malformed(absl::StrCat("buffer \"", name, "\" runs past the end"));
    }
    extras->buffers[name] = std::move(values);
  }
  if (!reader.Get(&count)) return malformed("missing value count");
  for (uint32_t i = 0; i < count; ++i) {
    uint32_t key_len = 0;
    uint64_t value_len = 0;
    std::string key, value;
    if (!reader.Get(&key_len)) return malformed("missing key");
    if (key_len > kMaxCheckpointNameBytes || key_len > reader.remaining())
      return malformed(absl::StrCat("key length ", key_len,
                                    " exceeds the limit or the file"));
    key.resize(key_len);
    if (!reader.Read(key.data(), key_len) || !reader.Get(&value_len))
      return malformed("bad key/value entry");
    if (value_len > reader.remaining())
      return malformed(absl::StrCat("value of \"", key, "\" length ",
                                    value_len, " exceeds the file"));
    value.resize(value_len);
    if (!reader.Read(value.data(), value_len)) {
      return malformed(absl::StrCat("value of \"", key, "\" runs past the end"));
    }
    extras->values[key] = std::move(value);
  }
  if (reader.pos() != file_size - kTrailerBytes) {
    return malformed("trailing bytes before the checksum");
  }
  for (const auto& [name, values] : extras->buffers)
    RETURN_IF_ERROR(CheckFinite(path, name, values.data(), values.size()));
  return absl::OkStatus();
}

// Removes `<path>.tmp.<16 hex digits>` files that an earlier write of the
// same path left when its process was killed before the rename (a worker
// SIGKILLed mid-checkpoint; each would otherwise stay forever and a
// checkpoint folder on a small disk fills up). Only names of exactly that
// form are touched, and a symbolic link is unlinked itself, never
// followed. Errors are ignored: a temporary left is only wasted space.
void RemoveStaleTemporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const std::string prefix = target.filename().string() + ".tmp.";
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end;
       it.increment(error)) {
    const std::string name = it->path().filename().string();
    if (name.size() != prefix.size() + 16 ||
        name.compare(0, prefix.size(), prefix) != 0 ||
        name.find_first_not_of("0123456789abcdef", prefix.size()) !=
            std::string::npos)
      continue;
    const fs::file_status status = it->symlink_status(error);
    if (error) break;
    if (fs::is_regular_file(status) || fs::is_symlink(status)) {
      std::error_code ignored;
      fs::remove(it->path(), ignored);  // unlinks; never follows a link
    }
  }
}

}  // namespace

absl::Status WriteCheckpoint(const std::string& path,
                             const CheckpointView& view) {
  if (view.params == nullptr || view.adam_m == nullptr ||
      view.adam_v == nullptr) {
    return absl::InvalidArgumentError(
        "WriteCheckpoint: params, adam_m and adam_v are required");
  }
  const uint64_t fp = view.params->layout().fingerprint();
  if (view.adam_m->layout().fingerprint() != fp ||
      view.adam_v->layout().fingerprint() != fp) {
    return absl::InvalidArgumentError(
        "WriteCheckpoint: optimizer moments use another layout than params");
  }
  Sink counter(nullptr);
  Serialize(view, 0, &counter);
  const uint64_t file_bytes = counter.bytes() + kTrailerBytes;

  RemoveStaleTemporaries(path);
  // common/atomic_file.h: a fresh temporary, fsynced, renamed over `path`,
  // the folder fsynced.
  return WriteFileAtomically(path, [&](std::FILE* file) {
    Sink sink(file);
    Serialize(view, file_bytes, &sink);
    const uint32_t crc = sink.crc();
    return sink.ok() && std::fwrite(&crc, 1, 4, file) == 4;
  });
}

absl::StatusOr<ModelConfig> ReadCheckpointConfig(const std::string& path) {
  ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  Reader reader(file->data(), file->size());
  ASSIGN_OR_RETURN(Header header, CheckFile(path, *file, &reader));
  return header.config;
}

absl::StatusOr<CheckpointExtras> ReadCheckpointExtras(const std::string& path) {
  ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  Reader reader(file->data(), file->size() - kTrailerBytes);
  ASSIGN_OR_RETURN(Header header, CheckFile(path, *file, &reader));
  const uint64_t arena_bytes = 3 * header.total_floats * sizeof(float);
  if (arena_bytes > file->size() - kTrailerBytes - reader.pos() ||
      !reader.Skip(arena_bytes))
    return absl::DataLossError(absl::StrCat(
        "checkpoint ", path, " is malformed: arenas run past the end"));
  CheckpointExtras extras;
  RETURN_IF_ERROR(ReadExtras(path, reader, file->size(), &extras));
  return extras;
}

absl::StatusOr<std::unique_ptr<CheckpointState>> ReadCheckpoint(
    const std::string& path, std::shared_ptr<const ArenaLayout> layout) {
  ASSIGN_OR_RETURN(auto file, MappedFile::Open(path));
  Reader reader(file->data(), file->size() - kTrailerBytes);
  ASSIGN_OR_RETURN(Header header, CheckFile(path, *file, &reader));
  if (header.fingerprint != layout->fingerprint() ||
      header.total_floats != layout->total_floats()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", path, " holds a model of another layout (layers ",
        header.config.layers, ", d_model ", header.config.d_model, ", heads ",
        header.config.heads, ", context ", header.config.context, "; ",
        header.total_floats, " floats, fingerprint ", header.fingerprint,
        ") than this model's (", layout->total_floats(), " floats, fingerprint ",
        layout->fingerprint(), ")"));
  }
  auto state = std::make_unique<CheckpointState>(layout);
  state->config = header.config;
  state->step = header.step;
  state->data_cursor = header.data_cursor;
  state->adam_step = header.adam_step;
  const auto malformed = [&path, &reader](absl::string_view what) {
    return absl::DataLossError(absl::StrCat("checkpoint ", path,
                                            " is malformed: ", what,
                                            " at byte ", reader.pos()));
  };
  for (FloatArena* arena : {&state->params, &state->adam_m, &state->adam_v}) {
    if (!reader.Read(arena->data(), arena->size() * sizeof(float))) {
      return malformed("arena runs past the end");
    }
  }
  const char* names[] = {"params", "adam_m", "adam_v"};
  int k = 0;
  for (const FloatArena* arena : {&state->params, &state->adam_m, &state->adam_v})
    RETURN_IF_ERROR(CheckFinite(path, names[k++], arena->data(), arena->size()));
  RETURN_IF_ERROR(ReadExtras(path, reader, file->size(), &state->extras));
  return state;
}

}  // namespace gasloc
