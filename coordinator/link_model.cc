#include "coordinator/link_model.h"

#include <algorithm>

#include "coordinator/budget.h"

namespace gasloc::coordinator {
namespace {

// The median of the measured links (upper median); 0 when none.
double MedianKnown(const std::vector<double>& bytes_per_second) {
  std::vector<double> known;
  for (double b : bytes_per_second)
    if (b > 0) known.push_back(b);
  if (known.empty()) return 0;
  auto mid = known.begin() + known.size() / 2;
  std::nth_element(known.begin(), mid, known.end());
  return *mid;
}

// Every member bounded by the slowest link: c = volume / min_j b_j.
std::vector<ExpectedExchange> BoundedBySlowest(const std::vector<double>& b,
                                               double bytes) {
  const auto slowest = std::min_element(b.begin(), b.end());
  const ExpectedExchange e{
      .seconds = bytes / *slowest,
      .bound_index = slowest - b.begin(),
      .bound_bytes_per_second = *slowest};
  return std::vector<ExpectedExchange>(b.size(), e);
}

}  // namespace

std::vector<ExpectedExchange> ExpectedExchanges(
    const RoundSchedule& schedule, const ExchangeVolume& volume,
    const std::vector<double>& bytes_per_second) {
  const uint32_t n = schedule.n;
  std::vector<ExpectedExchange> out(n);
  const double typical = MedianKnown(bytes_per_second);
  if (n == 0 || bytes_per_second.size() != n || !(typical > 0) ||
      !(volume.model_bytes > 0))
    return out;  // unknown
  std::vector<double> b(bytes_per_second);
  for (double& v : b)
    if (!(v > 0)) v = typical;
  const double m = volume.model_bytes;
  if (volume.kind == ExchangeVolume::Kind::kRingAllReduce) {
    if (n < 2) return std::vector<ExpectedExchange>(n, {.seconds = 0});
    return BoundedBySlowest(b, m * 2.0 * (n - 1) / n);
  }
  if (schedule.complete) {
    if (n < 2) return std::vector<ExpectedExchange>(n, {.seconds = 0});
    return BoundedBySlowest(b, m * (n - 1));
  }
  for (uint32_t i = 0; i < n; ++i) {
    ExpectedExchange& e = out[i];
    e.seconds = 0;
    const double own = schedule.Degree(i) * m / b[i];
    // The row of i in the compressed adjacency (no copy: 10,000 members).
    for (uint32_t k = schedule.offsets[i]; k < schedule.offsets[i + 1]; ++k) {
      const uint32_t j = schedule.peers[k];
      const double theirs = schedule.Degree(j) * m / b[j];
      const double t = std::max(own, theirs);
      if (t > e.seconds || e.bound_index < 0) {
        e.seconds = t;
        e.bound_index = j;
        e.bound_bytes_per_second = std::min(b[i], b[j]);
      }
    }
  }
  return out;
}

double BoundedEma(double old_value, double sample, double weight,
                  double max_factor) {
  const double ema = UpdateEma(old_value, sample, weight);
  if (!(old_value > 0) || !(max_factor > 1)) return ema;
  return std::clamp(ema, old_value / max_factor, old_value * max_factor);
}

namespace {

// The EMA weight of a round of `seconds` against a nominal round at the
// estimate `current` (> 0): `weight` scaled by its length, at most 1.
double RoundWeight(double current, double seconds, double nominal_steps,
                   double weight) {
  return weight * std::min(1.0, seconds / (nominal_steps / current));
}

}  // namespace

double UpdateStepRate(double current, double steps, double seconds,
                      double nominal_steps, double weight, double max_factor) {
  if (!(steps > 0) || !(seconds > 0)) return current;
  const double sample = steps / seconds;
  if (!(current > 0) || !(nominal_steps > 0)) return sample;
  return BoundedEma(current, sample,
                    RoundWeight(current, seconds, nominal_steps, weight),
                    max_factor);
}

double UpdateStepRateVariance(double current, double estimate, double steps,
                              double seconds, double nominal_steps,
                              double weight) {
  if (!(steps > 0) || !(seconds > 0) || !(estimate > 0)) return current;
  const double deviation = steps / seconds / estimate - 1;
  const double sample = deviation * deviation;
  if (current < 0 || !(nominal_steps > 0)) return sample;
  const double w = RoundWeight(estimate, seconds, nominal_steps, weight);
  return (1 - w) * current + w * sample;
}

double UpdateStepRateEstimateShare(double current, double estimate,
                                   double steps, double seconds,
                                   double nominal_steps, double weight) {
  if (!(steps > 0) || !(seconds > 0)) return current;
  if (!(estimate > 0) || !(nominal_steps > 0)) return 1;
  const double w = RoundWeight(estimate, seconds, nominal_steps, weight);
  return (1 - w) * (1 - w) * current + w * w;
}

double UpdateLinkEstimate(double current,
                          const std::vector<LinkObservation>& samples,
                          double ema_weight, double max_factor) {
  const LinkObservation* best = nullptr;
  for (const LinkObservation& s : samples)
    if (s.bytes_per_second > 0 &&
        (best == nullptr || s.bytes_per_second > best->bytes_per_second))
      best = &s;
  if (best == nullptr) return current;
  const double rate = best->bytes_per_second;
  // A sample is min(b_i, b_j): a lower bound on b_i, taken at once (the
  // worker no longer measures receives whose bytes were buffered while it
  // was late, the one way a sample read faster than the link).
  if (rate >= current) return rate;
  const bool explained_by_peer =
      best->peer_estimate > 0 && best->peer_estimate <= rate * kExplainedBy;
  // Below the estimate and the peer's own link explains it: says nothing
  // about ours.
  if (explained_by_peer) return current;
  // Below the estimate and the peer is faster: our own link is slow (EMA,
  // by at most max_factor per report).
  return BoundedEma(current, rate, ema_weight, max_factor);
}

}  // namespace gasloc::coordinator
