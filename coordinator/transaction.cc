#include "coordinator/transaction.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"

namespace gasloc::coordinator {

Transaction::Transaction(Store* store) : store_(store) {
  if (store_ == nullptr) return;
  error_ = store_->Begin();
  open_ = error_.ok();
}

Transaction::~Transaction() {
  if (open_) store_->Rollback();
}

void Transaction::Write(absl::FunctionRef<absl::Status(Store&)> write) {
  if (!open_ || !error_.ok()) return;
  error_ = write(*store_);
}

void Transaction::OnCommit(std::function<void()> action) {
  on_commit_.push_back(std::move(action));
}

absl::Status Transaction::Commit() {
  if (finished_)
    return absl::FailedPreconditionError("transaction already finished");
  finished_ = true;
  if (open_ && error_.ok()) error_ = store_->Commit();
  if (!error_.ok()) {
    // Also after a failed COMMIT, which leaves the transaction open.
    if (open_) store_->Rollback();
    open_ = false;
    on_commit_.clear();
    GASLOC_LOG(ERROR) << "database write failed: " << error_;
    return absl::UnavailableError(absl::StrCat(
        "coordinator database write failed: ", error_.message()));
  }
  open_ = false;
  for (auto& action : on_commit_) action();
  on_commit_.clear();
  return absl::OkStatus();
}

}  // namespace gasloc::coordinator
