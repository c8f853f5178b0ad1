#include "worker/round/outer_optimizer.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace gasloc {
namespace {

using Vec = std::vector<float>;

Vec RandomVec(std::mt19937& rng, size_t n, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  Vec v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// One DiLoCo outer step on the mean of `g`, and each worker's post-local
// iterate y_i = theta_i + eta g_i (the inner phase drifted by g_i).
void DiLoCoStepAndPostLocal(const std::vector<Vec>& g, float lr, float mu,
                            Vec& diloco, Vec& momentum,
                            const std::vector<Vec>& theta,
                            std::vector<Vec>& y) {
  const size_t n = g.size(), dim = diloco.size();
  Vec gbar(dim, 0.0f);
  for (size_t i = 0; i < n; ++i)
    for (size_t k = 0; k < dim; ++k) gbar[k] += g[i][k];
  for (float& x : gbar) x /= static_cast<float>(n);
  NesterovOuterStep(diloco, gbar, lr, mu, momentum, momentum, diloco);
  for (size_t i = 0; i < n; ++i) {
    Vec local(dim);
    for (size_t k = 0; k < dim; ++k) local[k] = theta[i][k] + g[i][k];
    PostLocalIterate(theta[i], local, lr, y[i]);
  }
}

TEST(OuterOptimizer, AddLocalChangeAddsWhatTheStepsMoved) {
  const Vec mixed = {1, 2, 3}, base = {0.5f, -1, 4};
  Vec params = {1.5f, -1, 2};  // base + {1, 0, -2}
  AddLocalChange(mixed, base, params);
  EXPECT_EQ(params, (Vec{2, 2, 1}));
}

TEST(OuterOptimizer, OnePeerHalfAlphaIsExactPairwiseAveraging) {
  const Vec y1 = {1, 2, 3}, y2 = {3, 6, -1};
  Vec prev1 = y1, theta1(3);
  GossipNeighbor n2{y2, 1.0f, {}};
  GossipOuterStep(y1, {&n2, 1}, 0.5f, 0.0f, prev1, theta1);
  EXPECT_EQ(theta1, (Vec{2, 4, 1}));
}

TEST(OuterOptimizer, NoPeerKeepsMomentumOnly) {
  const Vec y = {1, 1}, prev_in = {0, 2};
  Vec prev = prev_in, theta(2);
  GossipOuterStep(y, {}, 0.5f, 0.5f, prev, theta);
  EXPECT_EQ(theta, (Vec{1.5f, 0.5f}));  // y + 0.5 (y - y_prev)
}

TEST(OuterOptimizer, NesterovMatchesTheFormula) {
  const Vec theta = {1, -1}, g = {0.5f, 0.25f};
  Vec v = {0.1f, 0.2f}, next(2);
  NesterovOuterStep(theta, g, 0.7f, 0.9f, v, v, next);
  for (int i = 0; i < 2; ++i) {
    const float vi = 0.9f * (i == 0 ? 0.1f : 0.2f) + g[i];
    EXPECT_FLOAT_EQ(v[i], vi);
    EXPECT_FLOAT_EQ(next[i], theta[i] + 0.7f * (g[i] + 0.9f * vi));
  }
}

// DiLoCo's eager updates (algorithms.md section 5; Kale et al. 2025): one
// step against the formula in fp32, the first round (no others' share)
// included. The pseudo-gradient is exact; the rest to 1e-6 (the values
// are O(1)), not to the bit: whether a * b + c is fused into one FMA
// differs between builds, and the sanitizer build's results differed from
// this file's formula by 1 and then 8 ulps (ghat + mu v cancels).
TEST(OuterOptimizer, EagerStepMatchesTheFormula) {
  std::mt19937 rng(5);
  const size_t dim = 37;
  const int members = 3;
  const float lr = 0.7f, mu = 0.9f;
  const Vec start = RandomVec(rng, dim, 1.0f), local = RandomVec(rng, dim, 1.0f);
  const Vec others = RandomVec(rng, dim, 0.3f), v = RandomVec(rng, dim, 0.2f);
  for (bool first_round : {true, false}) {
    SCOPED_TRACE(first_round);
    Vec v_next(dim), g(dim), next = local;
    EagerOuterStep(start, next, first_round ? Vec() : others, members, lr, mu,
                   v, v_next, g, next);  // theta_next aliases theta_local
    for (size_t i = 0; i < dim; ++i) {
      const float gi = local[i] - start[i];
      const float own = gi * (1.0f / members);
      const float ghat = first_round ? own : own + others[i];
      const float vi = mu * v[i] + ghat;
      ASSERT_EQ(g[i], gi) << i;
      ASSERT_NEAR(v_next[i], vi, 1e-6f) << i;
      ASSERT_NEAR(next[i], start[i] + lr * (ghat + mu * vi), 1e-6f) << i;
    }
  }
}

// Several rounds of three workers against a plain double-precision loop of
// the rule in the paper's form: worker i steps with
// ghat_t^i = (1/n) g_t^i + (1/n) sum_{j != i} g_{t-1}^j from its own round
// start and momentum. The code keeps (mean - own / n) of the previous round
// (OthersShare, written in place of the own pseudo-gradient).
TEST(OuterOptimizer, EagerRoundsMatchAPlainLoopOfTheRule) {
  const int n = 3, dim = 65, rounds = 6;
  const float lr = 0.7f, mu = 0.9f;
  std::mt19937 rng(17);
  std::vector<Vec> theta(n, RandomVec(rng, dim, 1.0f)), v(n, Vec(dim, 0.0f));
  std::vector<Vec> share(n, Vec(dim));  // the code's others' share
  std::vector<std::vector<double>> ref_theta(n), ref_v(n, std::vector<double>(dim));
  for (int i = 0; i < n; ++i) ref_theta[i].assign(theta[i].begin(), theta[i].end());
  std::vector<Vec> g_prev;  // the reference's g_{t-1}^j
  for (int t = 0; t < rounds; ++t) {
    SCOPED_TRACE(t);
    std::vector<Vec> g(n);
    for (int i = 0; i < n; ++i) g[i] = RandomVec(rng, dim, 0.1f);  // H_i steps
    // The code: eager step, then the all-reduced mean, then the share.
    std::vector<Vec> own(n, Vec(dim));
    for (int i = 0; i < n; ++i) {
      Vec local(dim), v_next(dim);
      for (int k = 0; k < dim; ++k) local[k] = theta[i][k] + g[i][k];
      EagerOuterStep(theta[i], local, t == 0 ? Vec() : share[i], n, lr, mu,
                     v[i], v_next, own[i], theta[i]);
      v[i] = v_next;
    }
    Vec mean(dim, 0.0f);
    for (int k = 0; k < dim; ++k) {
      for (int i = 0; i < n; ++i) mean[k] += own[i][k];
      mean[k] *= 1.0f / n;
    }
    for (int i = 0; i < n; ++i) OthersShare(mean, own[i], n, share[i]);
    // The reference, from the same local points.
    for (int i = 0; i < n; ++i) {
      for (int k = 0; k < dim; ++k) {
        double ghat = static_cast<double>(own[i][k]) / n;
        if (t > 0)
          for (int j = 0; j < n; ++j)
            if (j != i) ghat += static_cast<double>(g_prev[j][k]) / n;
        ref_v[i][k] = mu * ref_v[i][k] + ghat;
        ref_theta[i][k] += lr * (ghat + mu * ref_v[i][k]);
        ASSERT_NEAR(theta[i][k], ref_theta[i][k], 2e-5) << i << " " << k;
        ASSERT_NEAR(v[i][k], ref_v[i][k], 2e-5) << i << " " << k;
      }
    }
    g_prev = own;
  }
  // The rule parts the workers: each holds its own model.
  EXPECT_NE(theta[0], theta[1]);
}

// algorithms.md section 3: GASLoC on the complete graph with full averaging
// (alpha * lambda = 1/n), eta = lr, gamma = mu, y_{-1} = theta_0 gives the
// DiLoCo theta sequence. The recursion u_t - mu u_{t-1} = lr((1+mu) gbar_t -
// mu gbar_{t-1}) is about the workers' AVERAGE: each GASLoC worker also
// carries gamma (y_i - y_prev_i), whose mean over workers is the shared term.
// So (a) the mean of the GASLoC workers equals DiLoCo's theta for any
// pseudo-gradients, and (b) when every worker's pseudo-gradient is the same,
// every worker equals it. docs/outer_algorithms.md states this.
class CompleteGraphIdentity : public ::testing::TestWithParam<bool> {};

TEST_P(CompleteGraphIdentity, GasLocEqualsDiLoCoOverRounds) {
  const bool same_gradients = GetParam();
  const int n = 4, dim = 257, rounds = 8;
  const float lr = 0.7f, mu = 0.9f;
  std::mt19937 rng(11);
  const Vec theta0 = RandomVec(rng, dim, 1.0f);

  // DiLoCo state.
  Vec diloco = theta0, momentum(dim, 0.0f);
  // GASLoC state per worker.
  std::vector<Vec> theta(n, theta0), y_prev(n, theta0), y(n, Vec(dim));

  for (int t = 0; t < rounds; ++t) {
    // Pseudo-gradients g_i (the inner phase's drift), given.
    std::vector<Vec> g(n);
    const Vec shared = RandomVec(rng, dim, 0.1f);
    for (int i = 0; i < n; ++i) g[i] = same_gradients ? shared : RandomVec(rng, dim, 0.1f);

    // DiLoCo: gbar = mean g; Nesterov. GASLoC: y_i = theta_i + eta g_i.
    DiLoCoStepAndPostLocal(g, lr, mu, diloco, momentum, theta, y);
    for (int i = 0; i < n; ++i) {
      std::vector<GossipNeighbor> neighbors;
      for (int j = 0; j < n; ++j)
        if (j != i) neighbors.push_back({y[j], 1.0f, {}});
      GossipOuterStep(y[i], neighbors, 1.0f / n, mu, y_prev[i], theta[i]);
    }
    y_prev = y;

    for (int k = 0; k < dim; ++k) {
      double mean = 0;
      for (int i = 0; i < n; ++i) mean += theta[i][k];
      mean /= n;
      const double tol = 1e-5 * (1.0 + std::abs(diloco[k]));
      ASSERT_NEAR(mean, diloco[k], tol) << "round " << t << " element " << k;
      if (same_gradients) {
        for (int i = 0; i < n; ++i)
          ASSERT_NEAR(theta[i][k], diloco[k], tol)
              << "worker " << i << " round " << t << " element " << k;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Gradients, CompleteGraphIdentity,
                         ::testing::Values(false, true));

// MIXED placement gossips z_i = y_i + gamma (y_i - y_prev_i): on the
// complete graph with full averaging every worker gets mean_j z_j, which
// is DiLoCo's theta on EVERY worker, even with different pseudo-gradients
// (the LOCAL form matches only the average, above).
TEST(OuterOptimizer, MixedPlacementIsDiLoCoOnEveryWorker) {
  const int n = 4, dim = 257, rounds = 8;
  const float lr = 0.7f, mu = 0.9f;
  std::mt19937 rng(12);
  const Vec theta0 = RandomVec(rng, dim, 1.0f);
  Vec diloco = theta0, momentum(dim, 0.0f);
  std::vector<Vec> theta(n, theta0), y_prev(n, theta0), y(n, Vec(dim)),
      z(n, Vec(dim));
  for (int t = 0; t < rounds; ++t) {
    std::vector<Vec> g(n);
    for (int i = 0; i < n; ++i) g[i] = RandomVec(rng, dim, 0.1f);
    DiLoCoStepAndPostLocal(g, lr, mu, diloco, momentum, theta, y);
    for (int i = 0; i < n; ++i) ExtrapolatedPoint(y[i], y_prev[i], mu, z[i]);
    for (int i = 0; i < n; ++i) {
      std::vector<GossipNeighbor> neighbors;
      for (int j = 0; j < n; ++j)
        if (j != i) neighbors.push_back({z[j], 1.0f, {}});
      GossipOuterStep(y[i], neighbors, 1.0f / n, mu, y_prev[i], theta[i],
                      {.sent = z[i], .bf16 = false});
    }
    y_prev = y;
    for (int i = 0; i < n; ++i)
      for (int k = 0; k < dim; ++k)
        ASSERT_NEAR(theta[i][k], diloco[k], 1e-5 * (1.0 + std::abs(diloco[k])))
            << "worker " << i << " round " << t << " element " << k;
  }
}

TEST(OuterOptimizer, DistanceAndFiniteness) {
  const Vec a = {0, 3}, b = {4, 0};
  EXPECT_DOUBLE_EQ(L2Distance(a, b), 5.0);
  EXPECT_TRUE(AllFinite(a));
  const Vec bad = {1, std::nanf("")};
  EXPECT_FALSE(AllFinite(bad));
}

}  // namespace
}  // namespace gasloc
