#include "worker/exchange/inbound_limits.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace gasloc {

InboundLimits::InboundLimits(InboundLimitsOptions options)
    : options_(std::move(options)) {}

InboundLimits::Ticket::~Ticket() {
  absl::MutexLock lock(&limits_->mu_);
  limits_->entries_.erase(id_);
}

void InboundLimits::Ticket::Touch() {
  const absl::Time now = limits_->options_.clock->Now();
  absl::MutexLock lock(&limits_->mu_);
  auto it = limits_->entries_.find(id_);
  if (it != limits_->entries_.end()) it->second.last_activity = now;
}

void InboundLimits::Ticket::SetBusy(bool busy) {
  const absl::Time now = limits_->options_.clock->Now();
  absl::MutexLock lock(&limits_->mu_);
  auto it = limits_->entries_.find(id_);
  if (it == limits_->entries_.end()) return;
  it->second.busy = busy;
  it->second.last_activity = now;
}

std::string InboundLimits::Ticket::cancelled_because() const {
  absl::MutexLock lock(&limits_->mu_);
  auto it = limits_->entries_.find(id_);
  return it == limits_->entries_.end() ? "" : it->second.cancelled_because;
}

int InboundLimits::open(const std::string& peer, InboundKind kind) const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [id, e] : entries_)
    if (e.peer == peer && e.kind == kind) ++n;
  return n;
}

absl::StatusOr<std::unique_ptr<InboundLimits::Ticket>> InboundLimits::Admit(
    const std::string& peer, InboundKind kind, std::function<void()> cancel) {
  const absl::Time now = options_.clock->Now();
  const bool fetch = kind == InboundKind::kFetch;
  const int limit =
      fetch ? options_.max_fetches_per_peer : options_.max_streams_per_peer;
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [id, e] : entries_)
    if (e.peer == peer && e.kind == kind) ++n;
  if (n >= limit)
    return absl::ResourceExhaustedError(absl::StrCat(
        "peer ", peer, " already has ", n, fetch ? " FetchModel calls" :
        " Exchange streams", " open, the limit per peer"));
  const uint64_t id = next_id_++;
  entries_[id] = Entry{.peer = peer,
                       .kind = kind,
                       .cancel = std::move(cancel),
                       .opened = now,
                       .last_activity = now,
                       .busy = false,
                       .cancelled_because = ""};
  return std::unique_ptr<Ticket>(new Ticket(this, id));
}

int InboundLimits::CancelExpired() {
  const absl::Time now = options_.clock->Now();
  int cancelled = 0;
  // Cancel under the lock: a ticket is destroyed (its call returns and
  // whatever `cancel` refers to goes away) only after taking it.
  absl::MutexLock lock(&mu_);
  for (auto& [id, e] : entries_) {
    if (!e.cancelled_because.empty()) continue;
    const absl::Duration total = e.kind == InboundKind::kFetch
                                     ? options_.fetch_total_timeout
                                     : options_.exchange_total_timeout;
    if (now - e.opened >= total) {
      e.cancelled_because = absl::StrCat(
          "open longer than the server's total deadline of ",
          absl::FormatDuration(total));
    } else if (!e.busy && now - e.last_activity >= options_.idle_timeout) {
      e.cancelled_because = absl::StrCat(
          "nothing received for ", absl::FormatDuration(options_.idle_timeout),
          " (the server's idle deadline)");
    } else {
      continue;
    }
    if (e.cancel) e.cancel();
    ++cancelled;
  }
  return cancelled;
}

}  // namespace gasloc
