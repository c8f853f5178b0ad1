#include "worker/model/reference_model.h"

#include "worker/model/reference_kernels.h"

namespace gasloc::ref {

double ModelForwardBackward(const ModelConfig& config,
                            const std::vector<double>& params,
                            const uint8_t* tokens, int batch, int length,
                            std::vector<double>* grads) {
  using Vec = std::vector<double>;
  const int B = batch, T = length, C = config.d_model, H = config.heads;
  const int L = config.layers, M = B * T, V = kVocabSize;
  const double eps = 1e-5;
  const auto layout = MakeModelLayout(config);
  const ModelTensorIndex ix = TensorIndex(config);
  auto p = [&](int entry) { return params.data() + layout->entries()[entry].offset; };

  struct Acts {
    Vec x_in, ln1, mean1, var1, qkv, att, x_mid, ln2, mean2, var2, h, g;
  };
  std::vector<Acts> acts(L);
  Vec x(static_cast<size_t>(M) * C);
  EmbeddingForward(tokens, T + 1, p(ix.tok_emb), p(ix.pos_emb), B, T, C,
                   x.data());
  for (int l = 0; l < L; ++l) {
    const BlockTensorIndex& w = ix.blocks[l];
    Acts& a = acts[l];
    a.x_in = x;
    a.ln1.resize(M * C); a.mean1.resize(M); a.var1.resize(M);
    LayerNormForward(x.data(), p(w.ln1_w), p(w.ln1_b), M, C, eps,
                     a.ln1.data(), a.mean1.data(), a.var1.data());
    a.qkv.resize(M * 3 * C);
    LinearForward(a.ln1.data(), p(w.qkv_w), p(w.qkv_b), M, C, 3 * C,
                  a.qkv.data());
    a.att.resize(M * C);
    AttentionForward(a.qkv.data(), B, T, C, H, a.att.data());
    a.x_mid.resize(M * C);
    LinearForward(a.att.data(), p(w.proj_w), p(w.proj_b), M, C, C,
                  a.x_mid.data());
    for (int i = 0; i < M * C; ++i) a.x_mid[i] += x[i];
    a.ln2.resize(M * C); a.mean2.resize(M); a.var2.resize(M);
    LayerNormForward(a.x_mid.data(), p(w.ln2_w), p(w.ln2_b), M, C, eps,
                     a.ln2.data(), a.mean2.data(), a.var2.data());
    a.h.resize(M * 4 * C);
    LinearForward(a.ln2.data(), p(w.fc_w), p(w.fc_b), M, C, 4 * C,
                  a.h.data());
    a.g.resize(M * 4 * C);
    GeluForward(a.h.data(), M * 4 * C, a.g.data());
    LinearForward(a.g.data(), p(w.fc2_w), p(w.fc2_b), M, 4 * C, C, x.data());
    for (int i = 0; i < M * C; ++i) x[i] += a.x_mid[i];
  }
  Vec lnf(M * C), meanf(M), varf(M), logits(M * V), dlogits(M * V);
  LayerNormForward(x.data(), p(ix.lnf_w), p(ix.lnf_b), M, C, eps, lnf.data(),
                   meanf.data(), varf.data());
  LinearForward<double>(lnf.data(), p(ix.head_w), nullptr, M, C, V,
                        logits.data());
  std::vector<uint8_t> targets(M);
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) targets[b * T + t] = tokens[b * (T + 1) + t + 1];
  }
  const double loss = CrossEntropy(logits.data(), targets.data(), M, V,
                                   grads != nullptr ? dlogits.data() : nullptr);
  if (grads == nullptr) return loss;

  grads->assign(params.size(), 0.0);
  auto g = [&](int entry) { return grads->data() + layout->entries()[entry].offset; };
  Vec dln(M * C), dx(M * C);
  LinearBackward<double>(lnf.data(), p(ix.head_w), dlogits.data(), M, C, V,
                         dln.data(), g(ix.head_w), nullptr);
  LayerNormBackward(x.data(), p(ix.lnf_w), meanf.data(), varf.data(),
                    dln.data(), M, C, eps, dx.data(), g(ix.lnf_w),
                    g(ix.lnf_b));
  Vec dg(M * 4 * C), dh(M * 4 * C), dmid(M * C), datt(M * C),
      dqkv(M * 3 * C);
  for (int l = L - 1; l >= 0; --l) {
    const BlockTensorIndex& w = ix.blocks[l];
    Acts& a = acts[l];
    LinearBackward(a.g.data(), p(w.fc2_w), dx.data(), M, 4 * C, C, dg.data(),
                   g(w.fc2_w), g(w.fc2_b));
    GeluBackward(a.h.data(), dg.data(), M * 4 * C, dh.data());
    LinearBackward(a.ln2.data(), p(w.fc_w), dh.data(), M, C, 4 * C,
                   dln.data(), g(w.fc_w), g(w.fc_b));
    LayerNormBackward(a.x_mid.data(), p(w.ln2_w), a.mean2.data(),
                      a.var2.data(), dln.data(), M, C, eps, dmid.data(),
                      g(w.ln2_w), g(w.ln2_b));
    for (int i = 0; i < M * C; ++i) dmid[i] += dx[i];
    LinearBackward(a.att.data(), p(w.proj_w), dmid.data(), M, C, C,
                   datt.data(), g(w.proj_w), g(w.proj_b));
    AttentionBackward(a.qkv.data(), datt.data(), B, T, C, H, dqkv.data());
    LinearBackward(a.ln1.data(), p(w.qkv_w), dqkv.data(), M, C, 3 * C,
                   dln.data(), g(w.qkv_w), g(w.qkv_b));
    LayerNormBackward(a.x_in.data(), p(w.ln1_w), a.mean1.data(),
                      a.var1.data(), dln.data(), M, C, eps, dx.data(),
                      g(w.ln1_w), g(w.ln1_b));
    for (int i = 0; i < M * C; ++i) dx[i] += dmid[i];
  }
  EmbeddingBackward(tokens, T + 1, dx.data(), B, T, C, V, config.context,
                    g(ix.tok_emb), g(ix.pos_emb));
  return loss;
}

}  // namespace gasloc::ref
