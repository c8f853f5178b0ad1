// Server-side limits on inbound peer streams (issue 17 item 2): how many
// Exchange streams and FetchModel calls one peer (its host) may hold open
// at once, and how long a stream may stay silent (idle deadline) or open
// at all (total deadline) before the server cancels it. A stream that
// sends nothing no longer holds a server thread forever, and one host
// cannot take every thread of the pool.
//
// Transport-agnostic: the Peer service admits each call with a cancel
// callback (gRPC's TryCancel), touches its ticket on every chunk, marks it
// busy while the mailbox legitimately waits (an early chunk waiting for
// its registration), and a watchdog calls CancelExpired() periodically.
// Decisions read the injected Clock, so tests move a FakeClock.
//
// Thread safety: thread-safe; tickets may be used and destroyed on any
// thread (each by one thread at a time).
#ifndef GASLOC_WORKER_EXCHANGE_INBOUND_LIMITS_H_
#define GASLOC_WORKER_EXCHANGE_INBOUND_LIMITS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace gasloc {

struct InboundLimitsOptions {
  // A stream with no chunk for this long (and not waiting in the mailbox)
  // is cancelled.
  absl::Duration idle_timeout = absl::Seconds(60);
  // No Exchange stream lives longer (the longest exchange deadline a job
  // may set is 1 hour).
  absl::Duration exchange_total_timeout = absl::Hours(2);
  // No FetchModel call lives longer.
  absl::Duration fetch_total_timeout = absl::Minutes(10);
  // Open Exchange streams / FetchModel calls per peer host.
  int max_streams_per_peer = 32;
  int max_fetches_per_peer = 2;
  const Clock* clock = &RealClock::Get();
};

enum class InboundKind { kExchange, kFetch };

class InboundLimits {
 public:
  // One admitted call; releases its slot when destroyed.
  class Ticket {
   public:
    ~Ticket();
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    // A chunk arrived (resets the idle deadline).
    void Touch();
    // While busy the idle deadline does not run (the total one does).
    void SetBusy(bool busy);
    // Why the watchdog cancelled this call; empty if it did not.
    std::string cancelled_because() const;

   private:
    friend class InboundLimits;
    Ticket(InboundLimits* limits, uint64_t id) : limits_(limits), id_(id) {}
    InboundLimits* limits_;
    uint64_t id_;
  };

  explicit InboundLimits(InboundLimitsOptions options = {});

  // Admits a call from `peer` (a host) or returns RESOURCE_EXHAUSTED
  // naming the peer and the limit. `cancel` is called once, when a
  // deadline passes, under this object's lock (so never after the ticket
  // is gone): it must not block or call back into this object.
  absl::StatusOr<std::unique_ptr<Ticket>> Admit(const std::string& peer,
                                                InboundKind kind,
                                                std::function<void()> cancel);
  // Cancels every call past its idle or total deadline; returns how many.
  int CancelExpired();
  // Open calls of `peer` of `kind`.
  int open(const std::string& peer, InboundKind kind) const;

 private:
  struct Entry {
    std::string peer;
    InboundKind kind;
    std::function<void()> cancel;
    absl::Time opened, last_activity;
    bool busy = false;
    std::string cancelled_because;
  };
  const InboundLimitsOptions options_;
  mutable absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::map<uint64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_EXCHANGE_INBOUND_LIMITS_H_
