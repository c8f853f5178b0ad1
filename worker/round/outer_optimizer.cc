#include "worker/round/outer_optimizer.h"

#include <cmath>
#include <cstddef>

#include "worker/exchange/wire_codec.h"

namespace gasloc {

void PostLocalIterate(std::span<const float> theta_start,
                      std::span<const float> theta_local, float eta,
                      std::span<float> y) {
  const size_t n = y.size();
  for (size_t i = 0; i < n; ++i)
    y[i] = theta_start[i] + eta * (theta_local[i] - theta_start[i]);
}

void AddLocalChange(std::span<const float> mixed, std::span<const float> base,
                    std::span<float> params) {
  const size_t n = params.size();
  for (size_t i = 0; i < n; ++i) params[i] = mixed[i] + (params[i] - base[i]);
}

void MergeWithGlobal(std::span<const float> global, float alpha,
                     std::span<float> params) {
  const float beta = 1.0f - alpha;
  const size_t n = params.size();
  for (size_t i = 0; i < n; ++i)
    params[i] = alpha * params[i] + beta * global[i];
}

void PseudoGradient(std::span<const float> theta_start,
                    std::span<const float> theta_local, std::span<float> g) {
  const size_t n = g.size();
  for (size_t i = 0; i < n; ++i) g[i] = theta_local[i] - theta_start[i];
}

void ExtrapolatedPoint(std::span<const float> y, std::span<const float> y_prev,
                       float gamma, std::span<float> z) {
  const size_t n = z.size();
  for (size_t i = 0; i < n; ++i) z[i] = y[i] + gamma * (y[i] - y_prev[i]);
}

void GossipOuterStep(std::span<const float> y,
                     std::span<const GossipNeighbor> neighbors, float alpha,
                     float gamma, std::span<const float> y_prev,
                     std::span<float> theta_next, GossipWire wire) {
  const size_t n = y.size();
  // theta' = y + gamma (y - y_prev) - alpha sum_j w_j (q(sent) - y_j),
  // written as one pass per neighbour so it stays a flat loop.
  for (size_t i = 0; i < n; ++i) {
    const float yi = y[i];
    theta_next[i] = yi + gamma * (yi - y_prev[i]);
  }
  const float* wire_sent = wire.sent.empty() ? y.data() : wire.sent.data();
  for (const GossipNeighbor& neighbor : neighbors) {
    const float step = alpha * neighbor.weight;
    const float* yj = neighbor.y.data();
    const float* sent = neighbor.own.empty() ? wire_sent : neighbor.own.data();
    if (wire.bf16 && neighbor.own.empty()) {
      for (size_t i = 0; i < n; ++i)
        theta_next[i] -= step * (Bf16ToFloat(FloatToBf16(sent[i])) - yj[i]);
    } else {
      for (size_t i = 0; i < n; ++i) theta_next[i] -= step * (sent[i] - yj[i]);
    }
  }
}

void NesterovOuterStep(std::span<const float> theta_start,
                       std::span<const float> mean_pseudo_gradient, float lr,
                       float mu, std::span<const float> momentum,
                       std::span<float> momentum_next,
                       std::span<float> theta_next) {
  const size_t n = theta_next.size();
  for (size_t i = 0; i < n; ++i) {
    const float g = mean_pseudo_gradient[i];
    const float v = mu * momentum[i] + g;
    momentum_next[i] = v;
    theta_next[i] = theta_start[i] + lr * (g + mu * v);
  }
}

void EagerOuterStep(std::span<const float> theta_start,
                    std::span<const float> theta_local,
                    std::span<const float> others, int members, float lr,
                    float mu, std::span<const float> momentum,
                    std::span<float> momentum_next, std::span<float> own_g,
                    std::span<float> theta_next) {
  const size_t n = theta_next.size();
  const float own_share = 1.0f / static_cast<float>(members);
  for (size_t i = 0; i < n; ++i) {
    const float g = theta_local[i] - theta_start[i];
    own_g[i] = g;
    const float ghat = others.empty() ? g * own_share : g * own_share + others[i];
    const float v = mu * momentum[i] + ghat;
    momentum_next[i] = v;
    theta_next[i] = theta_start[i] + lr * (ghat + mu * v);
  }
}

void OthersShare(std::span<const float> mean, std::span<const float> own,
                 int members, std::span<float> others) {
  const size_t n = others.size();
  const float own_share = 1.0f / static_cast<float>(members);
  for (size_t i = 0; i < n; ++i) others[i] = mean[i] - own[i] * own_share;
}

double L2Distance(std::span<const float> a, std::span<const float> b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    sum += d * d;
  }
  return std::sqrt(sum);
}

bool AllFinite(std::span<const float> values) {
  for (float v : values)
    if (!std::isfinite(v)) return false;
  return true;
}

}  // namespace gasloc
