// The activation buffers of TransformerModel (docs/model.md, "Memory
// layout"): one 64-byte aligned allocation, sized once for M = max_batch *
// context rows, carved into the named views below.
//
// Shapes are those of a call at (B, T) with B * T <= M (the first B * T
// rows are used), row-major in token order. C = d_model, H = heads,
// hd = C / H, V = 256 (bytes). "cdt" is the compute type: f32, or bf16 in
// bf16 mode.
//
// Thread safety: plain data, used by the one thread that runs the model
// (the compute threads inside a kernel write disjoint rows).
#ifndef GASLOC_WORKER_MODEL_TRANSFORMER_WORKSPACE_H_
#define GASLOC_WORKER_MODEL_TRANSFORMER_WORKSPACE_H_

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "worker/model/kernels.h"
#include "worker/model/model.h"

namespace gasloc {

struct TransformerWorkspace {
  // What block l's forward saves for its backward.
  struct Block {
    float* ln1_mean = nullptr;  // (B, T) f32
    float* ln1_var = nullptr;   // (B, T) f32
    void* ln1_out = nullptr;    // (B, T, C) cdt: qkv's input
    void* qkv_heads = nullptr;  // (B, 3, H, T, hd) cdt: q, k, v head-major
    float* attn_lse = nullptr;  // (B, H, T) f32: softmax log-sum-exp
    void* attn_out = nullptr;   // (B, T, C) cdt: heads joined, proj's input
    float* x_mid = nullptr;     // (B, T, C) f32: x + attention (1st residual)
    float* ln2_mean = nullptr;  // (B, T) f32
    float* ln2_var = nullptr;   // (B, T) f32
    void* ln2_out = nullptr;    // (B, T, C) cdt: fc's input
    // (B, T, 4C) cdt: what GELU's backward needs. fp32: the fc output h
    // (GELU's input); bf16: GELU'(h), applied by fc2's backward-data matmul.
    void* gelu_saved = nullptr;
    void* gelu_out = nullptr;   // (B, T, 4C) cdt: fc2's input
  };

  // Carves the buffers for blocks [first_block, end_block) of `config`;
  // RESOURCE_EXHAUSTED when the allocation fails.
  absl::Status Allocate(const ModelConfig& config, int max_batch,
                        kernels::dt cdt, int first_block, int end_block);
  size_t bytes() const { return bytes_; }

  // ---- residual stream and saved activations
  // x[l] (B, T, C) f32: block l's input; x[L] the decoder's input. Only
  // x[first_block] .. x[end_block] are allocated.
  std::vector<float*> x;
  std::vector<Block> blocks;  // [l]; only [first_block, end_block)

  // ---- decoder
  float* lnf_mean = nullptr;  // (B, T) f32
  float* lnf_var = nullptr;   // (B, T) f32
  void* lnf_out = nullptr;    // (B, T, C) cdt: the head's input
  // (B, T, V) f32: the logits, overwritten with d loss / d logits by a
  // DecoderForward that wants the gradient.
  float* logits = nullptr;
  void* dlogits_bf16 = nullptr;  // (B, T, V) bf16; bf16 mode only

  // ---- backward scratch, shared by all blocks
  // (B, T, C) f32: residual-stream gradients, two for a ping-pong
  // (TransformerModel::dx(i)).
  float* dx[2] = {nullptr, nullptr};
  // (B, T, C) bf16, bf16 mode only: the bf16 copy of the residual-stream
  // gradient that the latest LayerNorm backward wrote (the next matmuls'
  // input).
  void* dx_bf16 = nullptr;
  float* dx_mid = nullptr;   // (B, T, C) f32: d loss / d x_mid
  float* dln_out = nullptr;  // (B, T, C) f32: d loss / d (a LayerNorm's output)
  // (B, T, 4C) cdt: d loss / d gelu_out (fp32). In the bf16 forward, the
  // fc output h before GELU (consumed at once by GeluWithDerivative).
  void* dgelu_out = nullptr;
  void* dfc_out = nullptr;     // (B, T, 4C) cdt: d loss / d h (fc's output)
  void* dqkv = nullptr;        // (B, T, 3C) cdt
  void* dattn_out = nullptr;   // (B, T, C) cdt
  void* dattn_heads = nullptr; // (B, H, T, hd) cdt: dattn_out head-major
  void* dqkv_heads = nullptr;  // (B, 3, H, T, hd) cdt

  // ---- forward scratch
  void* qkv_out = nullptr;     // (B, T, 3C) cdt: qkv before the permutation
  void* attn_heads = nullptr;  // (B, H, T, hd) cdt: attention output

 private:
  std::unique_ptr<char, decltype(&std::free)> memory_{nullptr, &std::free};
  size_t bytes_ = 0;
};

}  // namespace gasloc

#endif  // GASLOC_WORKER_MODEL_TRANSFORMER_WORKSPACE_H_
