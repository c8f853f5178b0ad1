#include "coordinator/job_events.h"

namespace gasloc::coordinator {

v1::JobEvent MakeJobEvent(v1::JobEventKind kind, std::string description,
                          v1::JobStatus status, absl::Time now) {
  v1::JobEvent event;
  event.set_kind(kind);
  event.set_unix_ms(absl::ToUnixMillis(now));
  *event.mutable_job() = std::move(status);
  event.set_description(std::move(description));
  return event;
}

void JobEventLog::Append(uint64_t seq, v1::JobEvent event, size_t kept) {
  events_.emplace_back(seq, std::move(event));
  while (events_.size() > kept) events_.pop_front();
}

JobEvents JobEventLog::After(uint64_t after_seq) const {
  JobEvents out;
  out.next_seq = after_seq;
  for (const auto& [seq, event] : events_) {
    if (seq <= after_seq) continue;
    out.events.push_back(event);
    out.next_seq = seq;
  }
  return out;
}

void JobEventLog::DropAfter(uint64_t seq) {
  while (!events_.empty() && events_.back().first > seq) events_.pop_back();
}

}  // namespace gasloc::coordinator
