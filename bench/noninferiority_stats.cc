#include "bench/noninferiority_stats.h"

#include <cmath>

namespace gasloc::bench {

double StudentT95(int dof) {
  static constexpr double kTable[30] = {
      6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812,
      1.796, 1.782, 1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725,
      1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697};
  if (dof < 1) return NAN;
  if (dof <= 30) return kTable[dof - 1];
  return 1.645 + 2.4 / dof;
}

NonInferiority TestNonInferiority(const std::vector<double>& gaps,
                                  double margin) {
  NonInferiority r;
  r.n = static_cast<int>(gaps.size());
  if (r.n < 2) return r;
  for (double d : gaps) r.mean_gap += d;
  r.mean_gap /= r.n;
  double ss = 0;
  for (double d : gaps) ss += (d - r.mean_gap) * (d - r.mean_gap);
  r.sd_gap = std::sqrt(ss / (r.n - 1));
  r.upper_bound = r.mean_gap + StudentT95(r.n - 1) * r.sd_gap / std::sqrt(r.n);
  r.pass = r.upper_bound < margin;
  return r;
}

}  // namespace gasloc::bench
