// A test fixture: a coordinator (real clock) on a database file whose
// store operations ("Begin", "Commit", "SyncLog", the writes) are
// recorded in order and can be failed one name at a time, for tests of
// when the coordinator writes, syncs and re-checks.
//
// Thread safety: the recorded operations and the failure are guarded (the
// store is used from the coordinator's callers' threads).
#ifndef GASLOC_TESTS_COORDINATOR_RECORDING_COORDINATOR_H_
#define GASLOC_TESTS_COORDINATOR_RECORDING_COORDINATOR_H_

#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/clock.h"
#include "coordinator/coordinator.h"
#include "gtest/gtest.h"
#include "tests/coordinator/store_faults.h"

namespace gasloc::coordinator {

class RecordingCoordinatorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = absl::StrCat(::testing::TempDir(), "/recording-", getpid(), "-",
                         ::testing::UnitTest::GetInstance()
                             ->current_test_info()
                             ->name(),
                         ".sqlite");
    RemoveFiles();
    auto store = Store::Open(path_, Faults([this](absl::string_view op) {
      absl::MutexLock lock(&mu_);
      ops_.emplace_back(op);
      if (fail_ == op)
        return absl::InternalError(absl::StrCat("injected failure of ", op));
      return absl::OkStatus();
    }));
    ASSERT_TRUE(store.ok()) << store.status();
    auto created = Coordinator::Create(CoordinatorOptions(),
                                       std::move(*store), &RealClock::Get());
    ASSERT_TRUE(created.ok()) << created.status();
    coord_ = std::move(*created);
  }
  void TearDown() override {
    coord_.reset();
    RemoveFiles();
  }

  absl::StatusOr<v1::RegisterWorkerResponse> Register() {
    v1::RegisterWorkerRequest request;
    request.mutable_info()->set_address("10.0.0.1:7000");
    request.mutable_info()->set_cores(4);
    return coord_->RegisterWorker(request);
  }
  // The operations recorded since the last call.
  std::vector<std::string> TakeOps() {
    absl::MutexLock lock(&mu_);
    return std::exchange(ops_, {});
  }
  // Fails every later operation named `op` ("" = none).
  void Fail(const std::string& op) {
    absl::MutexLock lock(&mu_);
    fail_ = op;
  }

  std::unique_ptr<Coordinator> coord_;

 private:
  void RemoveFiles() {
    for (const char* suffix : {"", "-wal", "-shm"})
      std::remove((path_ + suffix).c_str());
  }

  std::string path_;
  absl::Mutex mu_;
  std::vector<std::string> ops_ ABSL_GUARDED_BY(mu_);
  std::string fail_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gasloc::coordinator

#endif  // GASLOC_TESTS_COORDINATOR_RECORDING_COORDINATOR_H_
