// Plain-loop reference kernels of the transformer (docs/model.md), the
// ground truth the oneDNN fast path (worker/model/kernels.h) is tested
// against, and the building blocks of the double-precision reference model
// (worker/model/reference_model.h). Templated on the scalar type: tests use
// float to check kernels and double to check gradients against finite
// differences. Deliberately simple: no blocking, no threads.
//
// Conventions (as in the fast path): row-major; a linear layer's weight is
// (out, in) and y = x W^T + b; every backward overwrites its outputs.
//
// Thread safety: free functions on caller-owned buffers; reentrant.
#ifndef GASLOC_WORKER_MODEL_REFERENCE_KERNELS_H_
#define GASLOC_WORKER_MODEL_REFERENCE_KERNELS_H_

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace gasloc::ref {

// y (M, N) = x (M, K) W^T + b; W (N, K); b (N) or nullptr.
template <typename F>
void LinearForward(const F* x, const F* w, const F* b, int M, int K, int N,
                   F* y) {
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < N; ++n) {
      F acc = b != nullptr ? b[n] : F(0);
      for (int k = 0; k < K; ++k) acc += x[m * K + k] * w[n * K + k];
      y[m * N + n] = acc;
    }
  }
}

// dx (M, K) = dy W; dW (N, K) = dy^T x; db (N) = column sums of dy.
// Any output may be nullptr (not computed).
template <typename F>
void LinearBackward(const F* x, const F* w, const F* dy, int M, int K, int N,
                    F* dx, F* dw, F* db) {
  if (dx != nullptr) {
    for (int m = 0; m < M; ++m) {
      for (int k = 0; k < K; ++k) {
        F acc = 0;
        for (int n = 0; n < N; ++n) acc += dy[m * N + n] * w[n * K + k];
        dx[m * K + k] = acc;
      }
    }
  }
  if (dw != nullptr) {
    for (int n = 0; n < N; ++n) {
      for (int k = 0; k < K; ++k) {
        F acc = 0;
        for (int m = 0; m < M; ++m) acc += dy[m * N + n] * x[m * K + k];
        dw[n * K + k] = acc;
      }
    }
  }
  if (db != nullptr) {
    for (int n = 0; n < N; ++n) {
      F acc = 0;
      for (int m = 0; m < M; ++m) acc += dy[m * N + n];
      db[n] = acc;
    }
  }
}

// Row-wise LayerNorm over C: y = (x - mean) / sqrt(var + eps) * g + b with
// the biased variance. Saves mean and var (M) for the backward.
template <typename F>
void LayerNormForward(const F* x, const F* g, const F* b, int M, int C,
                      F eps, F* y, F* mean, F* var) {
  for (int m = 0; m < M; ++m) {
    const F* row = x + m * C;
    F mu = 0;
    for (int c = 0; c < C; ++c) mu += row[c];
    mu /= C;
    F v = 0;
    for (int c = 0; c < C; ++c) v += (row[c] - mu) * (row[c] - mu);
    v /= C;
    const F rstd = F(1) / std::sqrt(v + eps);
    for (int c = 0; c < C; ++c) y[m * C + c] = (row[c] - mu) * rstd * g[c] + b[c];
    mean[m] = mu;
    var[m] = v;
  }
}

// dx (M, C), dg (C), db (C) from dy, given the forward's x, g, mean, var.
template <typename F>
void LayerNormBackward(const F* x, const F* g, const F* mean, const F* var,
                       const F* dy, int M, int C, F eps, F* dx, F* dg, F* db) {
  for (int c = 0; c < C; ++c) dg[c] = db[c] = 0;
  for (int m = 0; m < M; ++m) {
    const F rstd = F(1) / std::sqrt(var[m] + eps);
    F sum_dxhat = 0, sum_dxhat_xhat = 0;
    for (int c = 0; c < C; ++c) {
      const F xhat = (x[m * C + c] - mean[m]) * rstd;
      const F dxhat = dy[m * C + c] * g[c];
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * xhat;
      dg[c] += dy[m * C + c] * xhat;
      db[c] += dy[m * C + c];
    }
    for (int c = 0; c < C; ++c) {
      const F xhat = (x[m * C + c] - mean[m]) * rstd;
      const F dxhat = dy[m * C + c] * g[c];
      dx[m * C + c] =
          rstd * (dxhat - sum_dxhat / C - xhat * sum_dxhat_xhat / C);
    }
  }
}

// Exact GELU: y = x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2))).
template <typename F>
void GeluForward(const F* x, int64_t n, F* y) {
  for (int64_t i = 0; i < n; ++i) {
    y[i] = F(0.5) * x[i] * (F(1) + std::erf(x[i] / std::sqrt(F(2))));
  }
}

// dx = dy * (Phi(x) + x phi(x)).
template <typename F>
void GeluBackward(const F* x, const F* dy, int64_t n, F* dx) {
  const F inv_sqrt_2pi = F(1) / std::sqrt(F(2) * F(M_PI));
  for (int64_t i = 0; i < n; ++i) {
    const F cdf = F(0.5) * (F(1) + std::erf(x[i] / std::sqrt(F(2))));
    const F pdf = inv_sqrt_2pi * std::exp(F(-0.5) * x[i] * x[i]);
    dx[i] = dy[i] * (cdf + x[i] * pdf);
  }
}

// Causal softmax of a row block (the kernel CausalSoftmax): row i of s
// (rows_total rows of length n) is query r0 + i % rows and keeps keys
// [0, query]; p gets zeros after them.
template <typename F>
void CausalSoftmax(const F* s, int rows_total, int rows, int n, int r0, F* p) {
  for (int i = 0; i < rows_total; ++i) {
    const int kept = r0 + i % rows + 1;
    const F* row = s + int64_t{i} * n;
    F* out = p + int64_t{i} * n;
    F mx = row[0];
    for (int j = 1; j < kept; ++j) mx = std::max(mx, row[j]);
    F sum = 0;
    for (int j = 0; j < kept; ++j) sum += std::exp(row[j] - mx);
    for (int j = 0; j < n; ++j) out[j] = j < kept ? std::exp(row[j] - mx) / sum : F(0);
  }
}

// Its backward: ds_j = p_j (dp_j - sum_k p_k dp_k) on the kept keys.
template <typename F>
void CausalSoftmaxBackward(const F* p, const F* dp, int rows_total, int rows,
                           int n, int r0, F* ds) {
  for (int i = 0; i < rows_total; ++i) {
    const int kept = r0 + i % rows + 1;
    const F* pr = p + int64_t{i} * n;
    const F* dpr = dp + int64_t{i} * n;
    F dot = 0;
    for (int j = 0; j < kept; ++j) dot += pr[j] * dpr[j];
    for (int j = 0; j < n; ++j) {
      ds[int64_t{i} * n + j] = j < kept ? pr[j] * (dpr[j] - dot) : F(0);
    }
  }
}

// p[0..t] = softmax over s <= t of q_t . k_s / sqrt(hd), for sequence b,
// head h (the causal attention row of query t).
template <typename F>
void AttentionRow(const F* qkv, int b, int t, int h, int T, int C, int hd,
                  F* p) {
  const F scale = F(1) / std::sqrt(F(hd));
  const F* q = qkv + (b * T + t) * 3 * C + h * hd;
  F mx = -std::numeric_limits<F>::infinity();
  for (int s = 0; s <= t; ++s) {
    const F* k = qkv + (b * T + s) * 3 * C + C + h * hd;
    F dot = 0;
    for (int i = 0; i < hd; ++i) dot += q[i] * k[i];
    p[s] = dot * scale;
    if (p[s] > mx) mx = p[s];
  }
  F sum = 0;
  for (int s = 0; s <= t; ++s) {
    p[s] = std::exp(p[s] - mx);
    sum += p[s];
  }
  for (int s = 0; s <= t; ++s) p[s] /= sum;
}

// Causal multi-head self-attention of one batch: qkv (B, T, 3C) holds
// [q | k | v], each C = H * hd wide with head h at columns [h hd, (h+1) hd);
// out (B, T, C). Scores scaled by 1/sqrt(hd); position t attends to <= t.
template <typename F>
void AttentionForward(const F* qkv, int B, int T, int C, int H, F* out) {
  const int hd = C / H;
  std::vector<F> p(T);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      for (int t = 0; t < T; ++t) {
        AttentionRow(qkv, b, t, h, T, C, hd, p.data());
        F* o = out + (b * T + t) * C + h * hd;
        for (int i = 0; i < hd; ++i) o[i] = 0;
        for (int s = 0; s <= t; ++s) {
          const F* v = qkv + (b * T + s) * 3 * C + 2 * C + h * hd;
          for (int i = 0; i < hd; ++i) o[i] += p[s] * v[i];
        }
      }
    }
  }
}

// dqkv (B, T, 3C) from dout (B, T, C), recomputing the probabilities.
template <typename F>
void AttentionBackward(const F* qkv, const F* dout, int B, int T, int C, int H,
                       F* dqkv) {
  const int hd = C / H;
  const F scale = F(1) / std::sqrt(F(hd));
  for (int64_t i = 0; i < int64_t{B} * T * 3 * C; ++i) dqkv[i] = 0;
  std::vector<F> p(T), dp(T);
  for (int b = 0; b < B; ++b) {
    for (int h = 0; h < H; ++h) {
      for (int t = 0; t < T; ++t) {
        const F* q = qkv + (b * T + t) * 3 * C + h * hd;
        F* dq = dqkv + (b * T + t) * 3 * C + h * hd;
        const F* dout_t = dout + (b * T + t) * C + h * hd;
        AttentionRow(qkv, b, t, h, T, C, hd, p.data());
        // dP = dO V^T, dV += P^T dO.
        F dot_pdp = 0;
        for (int s = 0; s <= t; ++s) {
          const F* v = qkv + (b * T + s) * 3 * C + 2 * C + h * hd;
          F* dv = dqkv + (b * T + s) * 3 * C + 2 * C + h * hd;
          F acc = 0;
          for (int i = 0; i < hd; ++i) {
            acc += dout_t[i] * v[i];
            dv[i] += p[s] * dout_t[i];
          }
          dp[s] = acc;
          dot_pdp += p[s] * acc;
        }
        // dS = P (dP - sum P dP); dQ += scale dS K; dK += scale dS^T Q.
        for (int s = 0; s <= t; ++s) {
          const F ds = p[s] * (dp[s] - dot_pdp) * scale;
          const F* k = qkv + (b * T + s) * 3 * C + C + h * hd;
          F* dk = dqkv + (b * T + s) * 3 * C + C + h * hd;
          for (int i = 0; i < hd; ++i) {
            dq[i] += ds * k[i];
            dk[i] += ds * q[i];
          }
        }
      }
    }
  }
}

// Mean cross-entropy (nats) of logits (M, V) against targets (M); writes
// dlogits = (softmax - onehot) / M when dlogits != nullptr.
template <typename F>
F CrossEntropy(const F* logits, const uint8_t* targets, int M, int V,
               F* dlogits) {
  F total = 0;
  for (int m = 0; m < M; ++m) {
    const F* row = logits + m * V;
    F mx = row[0];
    for (int v = 1; v < V; ++v) mx = row[v] > mx ? row[v] : mx;
    F sum = 0;
    for (int v = 0; v < V; ++v) sum += std::exp(row[v] - mx);
    const F lse = mx + std::log(sum);
    total += lse - row[targets[m]];
    if (dlogits != nullptr) {
      for (int v = 0; v < V; ++v) {
        const F prob = std::exp(row[v] - lse);
        dlogits[m * V + v] = (prob - (v == targets[m] ? F(1) : F(0))) / M;
      }
    }
  }
  return total / M;
}

// x (B, T, C) = tok[tokens[b, t]] + pos[t]; tokens has row stride
// `token_stride`.
template <typename F>
void EmbeddingForward(const uint8_t* tokens, int token_stride, const F* tok,
                      const F* pos, int B, int T, int C, F* x) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const int id = tokens[b * token_stride + t];
      for (int c = 0; c < C; ++c) {
        x[(b * T + t) * C + c] = tok[id * C + c] + pos[t * C + c];
      }
    }
  }
}

// dtok (V, C) and dpos (context, C) overwritten (rows never used are zero).
template <typename F>
void EmbeddingBackward(const uint8_t* tokens, int token_stride, const F* dx,
                       int B, int T, int C, int V, int context, F* dtok,
                       F* dpos) {
  for (int64_t i = 0; i < int64_t{V} * C; ++i) dtok[i] = 0;
  for (int64_t i = 0; i < int64_t{context} * C; ++i) dpos[i] = 0;
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const int id = tokens[b * token_stride + t];
      for (int c = 0; c < C; ++c) {
        dtok[id * C + c] += dx[(b * T + t) * C + c];
        dpos[t * C + c] += dx[(b * T + t) * C + c];
      }
    }
  }
}

}  // namespace gasloc::ref

#endif  // GASLOC_WORKER_MODEL_REFERENCE_KERNELS_H_
