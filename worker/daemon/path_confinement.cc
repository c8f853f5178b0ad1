#include "worker/daemon/path_confinement.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace gasloc {

absl::StatusOr<std::string> ConfinePath(absl::string_view field,
                                        const std::string& path,
                                        const std::string& root) {
  namespace fs = std::filesystem;
  std::error_code error;
  fs::path full = path;
  fs::path resolved_root;
  if (!root.empty()) {
    resolved_root = fs::weakly_canonical(fs::absolute(root, error), error);
    if (error)
      return absl::InvalidArgumentError(absl::StrCat(
          field, ": cannot resolve the worker's root ", root, ": ",
          error.message()));
    if (full.is_relative()) full = resolved_root / full;
  }
  const fs::path absolute = fs::absolute(full, error);
  if (error)
    return absl::InvalidArgumentError(absl::StrCat(
        field, " ", path, ": cannot resolve: ", error.message()));
  fs::path resolved = fs::weakly_canonical(absolute, error);
  // A prefix this process may not even look into (/root/.ssh): compare the
  // lexical form; it cannot be opened through a link it cannot see.
  if (error) resolved = absolute.lexically_normal();
  if (root.empty()) return resolved.string();
  // Inside = every component of the root is a leading component of the
  // path (so /data/rootx is not inside /data/root).
  auto p = resolved.begin();
  for (auto r = resolved_root.begin(); r != resolved_root.end(); ++r, ++p) {
    if (p == resolved.end() || *p != *r)
      return absl::PermissionDeniedError(absl::StrCat(
          field, " ", path, " (resolved: ", resolved.string(),
          ") is outside the worker's allowed directory ",
          resolved_root.string(), "; put the file there or start the worker "
          "with a root that contains it"));
  }
  return resolved.string();
}

}  // namespace gasloc
