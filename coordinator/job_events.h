// A job's event log for WatchJob: the last `kept` events of the job, each
// with a sequence number that is global to the coordinator (so a watcher
// continues with after_seq), plus the SNAPSHOT event a watch starts with.
// The Coordinator appends to it when a change commits and waits on its
// own condition variable for new ones (Coordinator::WaitJobEvents).
//
// Thread safety: not thread-safe; the Coordinator calls it under its mutex.
#ifndef GASLOC_COORDINATOR_JOB_EVENTS_H_
#define GASLOC_COORDINATOR_JOB_EVENTS_H_

#include <cstdint>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "gasloc/v1/coordinator.pb.h"

namespace gasloc::coordinator {

// A batch of events for a watcher.
struct JobEvents {
  std::vector<v1::JobEvent> events;
  // Pass as after_seq next time.
  uint64_t next_seq = 0;
  // The job is in a final state.
  bool ended = false;
};

// An event of `kind` at `now` carrying the job's status.
v1::JobEvent MakeJobEvent(v1::JobEventKind kind, std::string description,
                          v1::JobStatus status, absl::Time now);

class JobEventLog {
 public:
  // Appends `event` as number `seq` (greater than every earlier one) and
  // drops the oldest beyond `kept`.
  void Append(uint64_t seq, v1::JobEvent event, size_t kept);
  // The events after `after_seq`, oldest first; next_seq is the last one's
  // number (after_seq when there is none). `ended` is left false.
  JobEvents After(uint64_t after_seq) const;
  // Forgets the events numbered above `seq` (those of a rolled-back call).
  void DropAfter(uint64_t seq);

 private:
  std::deque<std::pair<uint64_t, v1::JobEvent>> events_;
};

}  // namespace gasloc::coordinator

#endif  // GASLOC_COORDINATOR_JOB_EVENTS_H_
