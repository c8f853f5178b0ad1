// Error feedback for the all-reduce algorithms' INT8 exchange
// (algorithms.md section 3, "INT8 with error feedback"; Seide et al. 2014,
// Karimireddy et al. 2019): the residual e_i, what this worker's roundings
// lost in its last completed ring all-reduce, is added to the next
// round's contribution before it is rounded, so what the rounding drops
// in one round is sent in the next instead of lost.
//
// The residual belongs to this worker alone (the replicas' models stay
// bit-identical whatever it holds: it only changes what this worker
// contributes to a mean every member applies alike). It starts at zero
// and is zeroed after a failed ring (whether the others applied a mean
// with this worker's contribution is not known: zero never applies a loss
// twice, and forgets at most one round's rounding). It is not
// checkpointed and not fetched: a joining, restarted or resumed worker
// starts at zero.
//
// Thread safety: none; the algorithm that owns it uses it from one
// exchange at a time.
#ifndef GASLOC_WORKER_ROUND_ERROR_FEEDBACK_H_
#define GASLOC_WORKER_ROUND_ERROR_FEEDBACK_H_

#include <memory>
#include <span>

#include "common/arena.h"
#include "gasloc/v1/job.pb.h"

namespace gasloc {

class ErrorFeedback {
 public:
  // Active (a residual buffer with the layout of `layout`) for INT8 only;
  // FP32 and BF16 all-reduces keep their rounding as before.
  ErrorFeedback(const FloatArena& layout, v1::WireEncoding encoding);

  bool active() const { return residual_ != nullptr; }
  // data += residual: the contribution this round's ring carries. The
  // residual is then the ring's to rewrite (RingAllReduceMean's
  // `residual`); empty when not active.
  std::span<float> FoldInto(std::span<float> data);
  // Zero, after a failed ring.
  void Reset();
  std::span<const float> residual() const;

 private:
  std::unique_ptr<FloatArena> residual_;
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_ROUND_ERROR_FEEDBACK_H_
