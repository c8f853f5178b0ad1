#include "coordinator/group_sync.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace gasloc::coordinator {

GroupSync::GroupSync(std::function<absl::Status()> sync)
    : sync_(std::move(sync)) {}

void GroupSync::Committed() {
  absl::MutexLock lock(&mu_);
  ++committed_;
}

absl::Status GroupSync::AwaitDurable() {
  absl::MutexLock lock(&mu_);
  const uint64_t wanted = committed_;
  while (durable_ < wanted && failed_.ok()) {
    if (syncing_) {
      // The running sync may have started before our commits: wait for it,
      // then look again (the next one, ours or another caller's, covers
      // them).
      mu_.Await(absl::Condition(
          +[](bool* syncing) { return !*syncing; }, &syncing_));
      continue;
    }
    syncing_ = true;
    const uint64_t covering = committed_;
    mu_.Unlock();
    absl::Status synced = sync_();
    mu_.Lock();
    syncing_ = false;
    ++syncs_;
    if (synced.ok()) {
      durable_ = covering;
    } else {
      failed_ = absl::UnavailableError(absl::StrCat(
          "the coordinator's database log could not be made durable (",
          synced.message(),
          "); changes since may be lost: restart the coordinator"));
      GASLOC_LOG(ERROR) << failed_;
    }
  }
  return failed_;
}

uint64_t GroupSync::syncs() const {
  absl::MutexLock lock(&mu_);
  return syncs_;
}

}  // namespace gasloc::coordinator
