// The poisoning guard of gossip (issue 17 item 3): a received model whose
// distance to this worker's own is more than `ratio` times the median of
// the recent distances this worker accepted is refused for the round. One
// malicious peer can then no longer overwrite half of a victim's weights
// with, say, the initial weights: the edge is dropped (at both ends, by
// the edge confirmation) and the refusal is counted and reported.
//
// Honest distances move slowly from round to round (the models drift
// apart during the inner steps and gossip pulls them together), so a
// sliding median over the last kWindow accepted distances follows them;
// until kMinSamples distances were accepted, and while the median is 0,
// everything is accepted. Refused distances are not recorded, so a peer
// cannot raise the bar by being refused.
//
// Thread safety: not thread-safe; one RoundRunner (one thread) owns it.
#ifndef GASLOC_WORKER_ROUND_POISON_GUARD_H_
#define GASLOC_WORKER_ROUND_POISON_GUARD_H_

#include <cstddef>
#include <deque>
#include <string>

#include "absl/status/status.h"

namespace gasloc {

class PoisonGuard {
 public:
  static constexpr size_t kWindow = 8;
  static constexpr size_t kMinSamples = 3;

  // `ratio` 0 = off (everything accepted).
  explicit PoisonGuard(double ratio) : ratio_(ratio) {}

  // OK if `distance` is acceptable; else PERMISSION_DENIED saying the
  // distance, the bound and the median it came from. A non-finite distance
  // is refused. Does not record anything.
  absl::Status Check(double distance) const;
  // Records the distances of a round's accepted models (after Check).
  void Accept(double distance);

  double median() const;
  size_t samples() const { return recent_.size(); }

 private:
  double ratio_;
  std::deque<double> recent_;  // newest last, at most kWindow
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_ROUND_POISON_GUARD_H_
