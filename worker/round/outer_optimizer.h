// The outer updates of every algorithm (algorithms.md sections 2-4), as
// loops over flat arena-shaped buffers. Sign convention: the pseudo-gradient
// g = theta_local - theta_start is a descent direction and every update ADDS
// it.
//
//   GASLoC / D-PSGD:  y = theta + eta * g
//                     theta' = y - alpha * sum_j lambda_ij (y - y_j)
//                               + gamma * (y - y_prev)        (LOCAL)
//                     theta' = z - alpha * sum_j lambda_ij (z - z_j),
//                     z = y + gamma * (y - y_prev)             (MIXED)
//                     theta' = z - alpha * sum_j lambda_ij (z - z_j),
//                     v' = gamma v + g, z = theta + eta (g + gamma v')
//                                                   (PSEUDO_GRADIENT)
//   DiLoCo / local SGD (after an all-reduce gives gbar):
//                     v' = mu * v + gbar
//                     theta' = theta + lr * (gbar + mu * v')
//
// The outer state (y_prev, v) is an INPUT: the new value goes to a
// separate output (or, for y_prev, is y itself), so the caller commits it
// only once the new parameters are known to be finite (a non-finite round
// must leave every outer buffer as it was; round_runner.cc).
//
// Pure functions on caller-owned buffers; thread-safe as long as callers
// do not share output buffers.
#ifndef GASLOC_WORKER_ROUND_OUTER_OPTIMIZER_H_
#define GASLOC_WORKER_ROUND_OUTER_OPTIMIZER_H_

#include <span>
#include <vector>

namespace gasloc {

// y = theta_start + eta * (theta_local - theta_start).
void PostLocalIterate(std::span<const float> theta_start,
                      std::span<const float> theta_local, float eta,
                      std::span<float> y);

// params = mixed + (params - base): the change that inner steps taken
// during an exchange (from base, theta at H_i) made, added to the model
// the exchange produced from base (outer.overlap_exchange).
void AddLocalChange(std::span<const float> mixed, std::span<const float> base,
                    std::span<float> params);

// params = alpha * params + (1 - alpha) * global: Streaming DiLoCo's
// merge of the live model with the all-reduce's result
// (outer.overlap_update MERGE, algorithms.md section 5).
void MergeWithGlobal(std::span<const float> global, float alpha,
                     std::span<float> params);

// g = theta_local - theta_start.
void PseudoGradient(std::span<const float> theta_start,
                    std::span<const float> theta_local, std::span<float> g);

struct GossipNeighbor {
  std::span<const float> y;  // the neighbour's post-local iterate y_j
  float weight = 1.0f;       // lambda_ij (the same at both ends)
  // Compressed gossip (public_copies.h): this worker's public copy as the
  // neighbour holds it, used in place of the wire's `sent` for this edge
  // (y is then the neighbour's public copy). Empty: GossipWire's rule.
  std::span<const float> own;
};

// z = y + gamma (y - y_prev) = (1 + gamma) y - gamma y_prev: the point the
// MIXED momentum placement gossips (theta' = W z).
void ExtrapolatedPoint(std::span<const float> y, std::span<const float> y_prev,
                       float gamma, std::span<float> z);

// What this worker sent its peers, as they received it. The gossip term
// uses this worker's own value exactly as its peers saw it:
//   theta' = ... - alpha * sum_j lambda_ij (q(sent_i) - q(sent_j))
// with q the wire's rounding (identity for fp32, round-to-nearest-even
// bf16 for bf16). The term is antisymmetric in (i, j), so an edge moves
// the pair's sum by nothing but fp32 rounding whatever the encoding.
struct GossipWire {
  std::span<const float> sent;  // empty: y itself was sent
  bool bf16 = false;            // the wire rounded `sent` to bf16
};

// The GASLoC outer step for one worker; `y_prev` is y_{t-1} (the caller
// sets y_prev <- y once theta_next is accepted). An empty `neighbors` is
// the no-peer round (the gossip term vanishes, momentum still applies).
// Each neighbour's `y` is what arrived (already wire-rounded).
void GossipOuterStep(std::span<const float> y,
                     std::span<const GossipNeighbor> neighbors, float alpha,
                     float gamma, std::span<const float> y_prev,
                     std::span<float> theta_next, GossipWire wire = {});

// The DiLoCo outer Nesterov step: `momentum` is v_{t-1}, `momentum_next`
// receives v_t (the caller adopts it once theta_next is accepted).
// theta_next may alias theta_start or mean_pseudo_gradient (each element
// is read before it is written); momentum_next must not alias momentum's
// readers other than itself (it may alias momentum). GASLoC's
// PSEUDO_GRADIENT placement runs it on one worker's own pseudo-gradient
// (lr = eta, mu = gamma) to get the point it gossips.
void NesterovOuterStep(std::span<const float> theta_start,
                       std::span<const float> mean_pseudo_gradient, float lr,
                       float mu, std::span<const float> momentum,
                       std::span<float> momentum_next,
                       std::span<float> theta_next);

// DiLoCo's eager outer step (outer.overlap_update OVERLAP_UPDATE_EAGER;
// Kale et al. 2025, arXiv 2502.12996), taken at H_i before the all-reduce
// of the round's pseudo-gradient has ended, with this worker's own fresh
// pseudo-gradient standing in for its share of the missing mean:
//   g    = theta_local - theta_start                  (written to own_g)
//   ghat = g / members + others                       (empty others: 0)
//   v'   = mu * v + ghat;  theta' = theta_start + lr * (ghat + mu * v')
// `others` is the others' share of the previous round's mean
// (OthersShare). theta_next may alias theta_local; momentum_next as in
// NesterovOuterStep.
void EagerOuterStep(std::span<const float> theta_start,
                    std::span<const float> theta_local,
                    std::span<const float> others, int members, float lr,
                    float mu, std::span<const float> momentum,
                    std::span<float> momentum_next, std::span<float> own_g,
                    std::span<float> theta_next);

// others = mean - own / members: what an all-reduced mean of `members`
// pseudo-gradients holds beside this worker's own. `others` may alias
// `own`.
void OthersShare(std::span<const float> mean, std::span<const float> own,
                 int members, std::span<float> others);

// ||a - b||_2, accumulated in double.
double L2Distance(std::span<const float> a, std::span<const float> b);

// True iff every value is finite.
bool AllFinite(std::span<const float> values);

}  // namespace gasloc

#endif  // GASLOC_WORKER_ROUND_OUTER_OPTIMIZER_H_
