// The statistics of the non-inferiority test (algorithms.md section 6):
// per-seed relative gaps d_s = (bpb_local - bpb_global) / bpb_global, their
// mean, the one-sided 95% upper confidence bound mean + t_{0.95, n-1} *
// sd / sqrt(n) (Student t, sample standard deviation), and the verdict
// PASS iff the bound is below the margin.
//
// Thread safety: pure functions.
#ifndef GASLOC_BENCH_NONINFERIORITY_STATS_H_
#define GASLOC_BENCH_NONINFERIORITY_STATS_H_

#include <vector>

namespace gasloc::bench {

// t_{0.95, dof}: the one-sided 95% quantile of Student's t (dof >= 1;
// tabulated to 30, then the normal 1.645 approached as 1.645 + 2.4 / dof).
double StudentT95(int dof);

struct NonInferiority {
  int n = 0;
  double mean_gap = 0;      // mean of d_s
  double sd_gap = 0;        // sample standard deviation (n - 1)
  double upper_bound = 0;   // one-sided 95% upper confidence bound
  bool pass = false;        // upper_bound < margin
};

// gaps: d_s per seed (n >= 2).
NonInferiority TestNonInferiority(const std::vector<double>& gaps,
                                  double margin);

}  // namespace gasloc::bench

#endif  // GASLOC_BENCH_NONINFERIORITY_STATS_H_
