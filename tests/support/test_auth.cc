#include "tests/support/test_auth.h"

#include <sys/wait.h>

#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace gasloc::testing {

const Authenticator& InsecureAuthenticator() {
  static const Authenticator* const authenticator = [] {
    AuthOptions options;
    options.insecure = true;
    return new Authenticator(options);
  }();
  return *authenticator;
}

CredentialsOptions InsecureCredentials() {
  CredentialsOptions options;
  options.insecure = true;
  return options;
}

PeerServiceOptions InsecurePeerServiceOptions() {
  PeerServiceOptions options;
  options.authenticator = &InsecureAuthenticator();
  return options;
}

absl::Status MakeTestCerts(const std::string& dir, int workers) {
  const std::string command =
      absl::StrCat("bash '", GASLOC_SOURCE_DIR, "/scripts/make_test_certs.sh' '",
                   dir, "' ", workers, " > /dev/null");
  const int status = std::system(command.c_str());
  if (status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return absl::InternalError(
        absl::StrCat("`", command, "` failed (status ", status, ")"));
  return absl::OkStatus();
}

std::string WriteTokenFile(const std::string& dir, const std::string& name,
                           const std::string& contents) {
  const std::string path = absl::StrCat(dir, "/", name);
  std::ofstream(path) << contents;
  return path;
}

}  // namespace gasloc::testing
