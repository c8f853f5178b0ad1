#include "worker/daemon/state_directory.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"

namespace gasloc {

absl::StatusOr<std::string> LoadOrCreateWorkerName(
    const std::string& data_dir) {
  namespace fs = std::filesystem;
  const fs::path file = fs::path(data_dir) / "worker_name";
  std::ifstream in(file);
  std::string name;
  if (in && std::getline(in, name) && !name.empty()) return name;
  std::error_code error;
  fs::create_directories(data_dir, error);
  if (error)
    return absl::UnavailableError(absl::StrCat(
        "cannot create the state directory ", data_dir, ": ", error.message()));
  std::random_device random;
  name = absl::StrCat("w-", absl::Hex((uint64_t{random()} << 32) | random(),
                                      absl::kZeroPad16));
  absl::Status written =
      WriteFileAtomically(file.string(), absl::StrCat(name, "\n"), 0644);
  if (!written.ok()) return absl::UnavailableError(written.message());
  return name;
}

absl::StatusOr<std::string> ClaimStateDirectory(const std::string& data_dir) {
  std::error_code ignored;
  std::filesystem::create_directories(data_dir, ignored);
  const int lock = ::open((data_dir + "/worker.lock").c_str(),
                          O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock < 0 || ::flock(lock, LOCK_EX | LOCK_NB) != 0) {
    if (lock >= 0) ::close(lock);
    return absl::UnavailableError("another worker holds " + data_dir +
                                  "/worker.lock");
  }
  return LoadOrCreateWorkerName(data_dir);
}

}  // namespace gasloc
