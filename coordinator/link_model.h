// The budget planner's model of the links (algorithms.md section 5): how
// long each member's exchange of a round is expected to take with the
// round's actual peers, and how a member's link estimate b_i is updated
// from the wire-time samples of its reports.
//
//   gossip (one model each way per peer; a member with d peers carries d
//   models over its link in each direction, full duplex):
//     t_ij = max(d_i M / b_i, d_j M / b_j)      (the slower end of the edge)
//     c_i  = max over this round's peers j of t_ij   (0 with no peer)
//   complete-graph gossip is the same with d = n - 1 for everyone:
//     c_i  = (n - 1) M / min_j b_j
//   ring all-reduce (every step waits for the ring's slowest link):
//     c_i  = 2 (n - 1) / n  M / min_j b_j
//
// A member whose link is not measured yet stands in with the median of the
// measured ones; with none measured every c_i is unknown.
//
// Link samples: a receive from peer j measured over its wire time alone
// crosses both links, so it is min(b_i, b_j) (roughly), not b_i. The best
// sample of a report is a lower bound on b_i: above the estimate it is
// taken at once (a worker first paired with a slow peer is not held at
// that peer's rate for rounds). Below the estimate it lowers b_i only when
// the peer's own estimate cannot explain it (the peer is more than
// kExplainedBy times faster), and then by an EMA that moves at most a
// factor `max_factor` per report (the oscillation guard on the inputs; the
// dead band on H_i is in budget.h). Receives whose bytes were buffered
// while the receiver was late are not measured by the worker at all
// (worker/exchange/mailbox.cc), so no sample reads faster than the link.
//
// Thread safety: pure functions; safe from any thread.
#ifndef GASLOC_COORDINATOR_LINK_MODEL_H_
#define GASLOC_COORDINATOR_LINK_MODEL_H_

#include <cstdint>
#include <vector>

#include "coordinator/schedule.h"

namespace gasloc::coordinator {

// What one round moves: gossip (a model each way per peer) or a ring
// all-reduce, and the wire size of one model.
struct ExchangeVolume {
  enum class Kind : uint8_t { kGossip, kRingAllReduce };
  Kind kind = Kind::kGossip;
  double model_bytes = 0;
};

// One member's expected exchange of a round.
struct ExpectedExchange {
  // c_i in seconds; < 0 = unknown (no link measured in the round).
  double seconds = -1;
  // The member index at the other end of the edge that bounds c_i (the
  // slowest member for an all-reduce or complete graph); -1 = none.
  int64_t bound_index = -1;
  // Its worker id (the caller maps bound_index; 0 = none).
  uint64_t bound_peer = 0;
  // The slower of the two links of that edge, bytes/s.
  double bound_bytes_per_second = 0;
};

// c_i for every member of `schedule` (member order), from each member's
// link estimate (bytes/s; <= 0 = not measured).
std::vector<ExpectedExchange> ExpectedExchanges(
    const RoundSchedule& schedule, const ExchangeVolume& volume,
    const std::vector<double>& bytes_per_second);

// One wire-time sample of a report: the pair rate with one peer and that
// peer's current estimate (<= 0 = not measured).
struct LinkObservation {
  double bytes_per_second = 0;
  double peer_estimate = 0;
};

// The most a report moves an estimate (s_i or b_i), as a factor.
inline constexpr double kMaxEstimateFactor = 1.5;

// A sample is explained by the peer when the peer's estimate is at most
// this factor above it.
inline constexpr double kExplainedBy = 1.25;

// The new b_i from `current` (<= 0 = none yet) and a report's samples
// (see the header comment); `current` unchanged when there are none.
double UpdateLinkEstimate(double current,
                          const std::vector<LinkObservation>& samples,
                          double ema_weight, double max_factor);

// UpdateEma, then kept within [old / max_factor, old * max_factor] (the
// first sample, old <= 0, is taken as is).
double BoundedEma(double old_value, double sample, double weight,
                  double max_factor);

// The new s_i (steps per second) after a round of `steps` inner steps in
// `seconds`: a BoundedEma whose weight is scaled by the round's length
// against a nominal round (`nominal_steps` at the current estimate), capped
// at `weight`. A short round says little about the sustained rate: a CPU
// quota (cgroup CFS, whose first slice of each period runs unthrottled) or
// turbo runs it faster, and the worker paired with a slow link runs H_min
// steps in a third of its rounds. Weighted by rounds, those rounds pulled
// s_i 20-50% above the rate of a long round, and the long rounds planned
// from it overran T (issue 16's sweep: fast workers waiting 15-24%).
double UpdateStepRate(double current, double steps, double seconds,
                      double nominal_steps, double weight, double max_factor);

// The relative variance of a round's step rate about s_i, updated with
// that round's sample before s_i takes it (`estimate` = s_i then): an EMA
// of (sample / estimate - 1)^2, the first deviation taken as is, its weight
// scaled by the round's length as in UpdateStepRate. `current` < 0 = no
// deviation measured yet; `estimate` <= 0 (the first sample) leaves it so.
// The budget planner's noise band is sized from it (budget.h).
double UpdateStepRateVariance(double current, double estimate, double steps,
                              double seconds, double nominal_steps,
                              double weight);

// How much of one round's rate noise s_i still carries: Var(s_i) / Var(a
// round's rate), updated with a round as UpdateStepRate takes it
// (`estimate` = s_i before it, `current` the share before it). The first
// sample is taken as is (share 1); each later round of weight w (the
// EMA weight scaled by the round's length) makes it (1 - w)^2 share + w^2,
// which falls towards w / (2 - w): 0.18 at the weight 0.3, an estimate
// that averages about six rounds. A round without steps or time leaves it.
// The budget planner's noise band compares estimates, so it is sized from
// spread * sqrt(share), not from one round's spread (budget.h).
double UpdateStepRateEstimateShare(double current, double estimate,
                                   double steps, double seconds,
                                   double nominal_steps, double weight);

}  // namespace gasloc::coordinator

#endif  // GASLOC_COORDINATOR_LINK_MODEL_H_
