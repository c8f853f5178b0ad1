// The tests' StoreFaults (coordinator/store.h): a store that fails on
// demand, answering each operation with a function the test gives.
//
// Thread safety: as the function given (the store calls it under the
// coordinator's mutex, and for "SyncLog" on a replying call's thread).
#ifndef GASLOC_TESTS_COORDINATOR_STORE_FAULTS_H_
#define GASLOC_TESTS_COORDINATOR_STORE_FAULTS_H_

#include <functional>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "coordinator/store.h"

namespace gasloc::coordinator {

class FunctionFaults final : public StoreFaults {
 public:
  using Hook = std::function<absl::Status(absl::string_view op)>;
  explicit FunctionFaults(Hook hook) : hook_(std::move(hook)) {}
  absl::Status Before(absl::string_view op) override { return hook_(op); }

 private:
  Hook hook_;
};

// Faults answered by `hook`, for Store::Open.
inline std::shared_ptr<StoreFaults> Faults(FunctionFaults::Hook hook) {
  return std::make_shared<FunctionFaults>(std::move(hook));
}

}  // namespace gasloc::coordinator

#endif  // GASLOC_TESTS_COORDINATOR_STORE_FAULTS_H_
