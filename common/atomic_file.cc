#include "common/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>

#include "absl/strings/str_cat.h"

namespace gasloc {
namespace {

absl::Status IoError(absl::string_view what, const std::string& path) {
  return absl::InternalError(
      absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::FunctionRef<bool(std::FILE*)> write,
                                 mode_t mode) {
  std::random_device random;
  const std::string tmp = absl::StrCat(
      path, ".tmp.",
      absl::Hex((uint64_t{random()} << 32) | random(), absl::kZeroPad16));
  const int fd = ::open(tmp.c_str(),
                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                        mode);
  if (fd < 0) return IoError("cannot create", tmp);
  std::FILE* file = ::fdopen(fd, "wb");
  if (file == nullptr) {
    absl::Status s = IoError("cannot open", tmp);
    ::close(fd);
    std::remove(tmp.c_str());
    return s;
  }
  const bool wrote = write(file) && std::fflush(file) == 0 &&
                     ::fsync(::fileno(file)) == 0;
  const int saved_errno = errno;
  if (std::fclose(file) != 0 || !wrote) {
    errno = saved_errno;
    absl::Status s = IoError("cannot write", tmp);
    std::remove(tmp.c_str());
    return s;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status s = IoError(absl::StrCat("cannot rename ", tmp, " to"), path);
    std::remove(tmp.c_str());
    return s;
  }
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = std::filesystem::current_path();
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return IoError("cannot open directory", dir.string());
  const int synced = ::fsync(dir_fd);
  ::close(dir_fd);
  if (synced != 0) return IoError("cannot fsync directory", dir.string());
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view content, mode_t mode) {
  return WriteFileAtomically(
      path,
      [&](std::FILE* file) {
        return std::fwrite(content.data(), 1, content.size(), file) ==
               content.size();
      },
      mode);
}

}  // namespace gasloc
