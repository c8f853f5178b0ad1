// Causal multi-head self-attention on oneDNN matmuls and our own causal
// softmax, and the layout permutations around it (row-major qkv <->
// head-major). Reference: worker/model/reference_kernels.h (Attention*);
// tests: tests/worker/model/kernels_test.cc.
//
// Thread safety: as kernels.h (an object is used by one thread at a time;
// each call runs OpenMP threads inside).
#ifndef GASLOC_WORKER_MODEL_ATTENTION_H_
#define GASLOC_WORKER_MODEL_ATTENTION_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "worker/model/kernels.h"

namespace gasloc::kernels {

// A layout permutation of a tensor with `dims` whose last dimension is
// contiguous on both sides: element i of the source (strides src_strides,
// in elements) goes to the same index of the destination (dst_strides), one
// memcpy of dims.back() elements per index of the other dimensions,
// parallel over the first two. Used to move q, k, v between the row-major
// (B, T, 3, H, hd) the qkv projection writes and the head-major
// (B, 3, H, T, hd) attention reads. oneDNN's reorder for these strides
// (jit:uni) moved 6.3 MB in 3.9 ms on one AMX core, about 3 GB/s; the
// rows of hd elements copy at memory speed. Any element type (bf16 and
// f32 alike: bytes). Reference: the index loop in the tests.
class Permute {
 public:
  static constexpr size_t kMaxDims = 8;
  // Fails (std::invalid_argument) unless the last stride is 1 on both
  // sides and every list has 2 to kMaxDims entries.
  Permute(const Dims& dims, const Dims& src_strides, const Dims& dst_strides,
          dt type);
  void Run(const void* src, void* dst) const;

 private:
  Dims dims_, src_strides_, dst_strides_;
  size_t esize_;
};

// The four permutations around attention for (B, T) and C = H hd channels.
struct HeadLayout {
  HeadLayout(int B, int T, int C, int H, dt cdt);
  Permute qkv_to_heads;    // (B, T, 3C) -> (B, 3, H, T, hd)
  Permute out_from_heads;  // (B, H, T, hd) -> (B, T, C)
  Permute dout_to_heads;   // (B, T, C) -> (B, H, T, hd)
  Permute dqkv_from_heads; // (B, 3, H, T, hd) -> (B, T, 3C)
};

// Causal multi-head self-attention over sequences of length T with C = H hd
// channels, on head-major tensors: qkv (B, 3, H, T, hd) -> out (B, H, T, hd),
// in `cdt`, so every head's q, k, v, o is a dense (T, hd) block (oneDNN's
// brgemm kernels take only dense operands). Each thread takes whole
// sequences and walks the query rows in blocks of `block_rows`: block i
// (rows [r0, r1)) only meets keys [0, r1), so the score tiles above the
// diagonal are never computed (1/4 of the T x T work for T = 2 blocks,
// about half for T >> block_rows). The matmuls of a block run one head at
// a time (a key prefix of one head is dense, of all heads it is not); the
// softmax covers all heads of the block. Per block: S = QK^T/sqrt(hd)
// (f32), P = causal softmax(S) (cdt), O = PV. The softmax and its backward
// are our own loops (CausalSoftmax*): they touch only the keys a query
// sees, so the masked half of the diagonal tile costs no exp and needs no
// mask pass (oneDNN's softmax primitive plus a mask loop took about a third
// of the attention's time). The backward recomputes S and P per block and
// accumulates dK, dV over the blocks in f32 (a sum post-op). Scratch: one
// (H, block_rows, T) score block per thread. Each oneDNN call is
// single-threaded inside one parallel loop over sequences, with memory
// objects bound once per thread (Matmul::Bound). Reference:
// ref::AttentionForward / AttentionBackward (row-major; the tests compose
// them with HeadLayout).
class CausalAttention {
 public:
  CausalAttention(DnnlEnv* env, int T, int C, int H, dt cdt,
                  int block_rows = 128);
  ~CausalAttention();
  // lse (B, H, T) f32 receives each query's softmax log-sum-exp.
  void Forward(const void* qkv, int B, void* out, float* lse);
  // dqkv (B, 3, H, T, hd) overwritten; lse as Forward wrote it (the
  // recomputed probabilities are exp(S - lse): one pass, no reductions).
  void Backward(const void* qkv, const float* lse, const void* dout, int B,
                void* dqkv);
  // Bytes of scratch one thread uses (scores f32 + P, dP, dS of one row
  // block; f32 dK, dV accumulators of one sequence in bf16).
  size_t scratch_bytes() const { return per_thread_bytes_; }
  int blocks() const { return static_cast<int>(blocks_.size()); }
  std::string impl() const;

 private:
  struct ThreadScratch;
  struct RowBlock;
  void EnsureThreads(int nthreads);
  // S = QK^T / sqrt(hd) of row block `block` of one sequence into ts.s.
  void Scores(int block, ThreadScratch& ts, const char* qkv_b);
  DnnlEnv* env_;
  int T_, C_, H_;
  dt cdt_;
  size_t esize_;
  // Byte strides of the head-major tensors, in cdt.
  size_t row_bytes_;    // one query row of one head: hd elements
  size_t head_stride_;  // one head of q, k, v or out: T hd elements
  size_t head_bytes_;   // one of q, k, v of one sequence: H T hd elements
  size_t qkv_seq_;      // q, k, v of one sequence: 3 T C elements
  size_t per_thread_bytes_ = 0;
  size_t scratchpad_bytes_ = 0;  // the largest oneDNN scratchpad of a block
  std::vector<std::unique_ptr<RowBlock>> blocks_;
  std::vector<std::unique_ptr<ThreadScratch>> threads_;
};

// The causal softmax of one row block of scores, exposed for its test:
// rows [0, H rows) of s (f32, row length n) are query r0 + (row % rows);
// each keeps keys [0, query] and p (cdt) gets zeros after them. s is
// overwritten (with exp(s - max)); lse (optional) gets each row's
// log-sum-exp, head h's rows at lse + h lse_stride. bf16 uses an exp good
// to 5e-5 (P is stored in bf16), f32 to 2e-7. Reference: ref::CausalSoftmax.
void CausalSoftmax(float* s, int H, int rows, int n, int r0, dt cdt, void* p,
                   float* lse = nullptr, int64_t lse_stride = 0);
// The same probabilities from a known log-sum-exp (laid out as above):
// p = exp(s - lse) on the kept keys, zeros after; s is not modified.
void CausalSoftmaxFromLse(const float* s, const float* lse, int64_t lse_stride,
                          int H, int rows, int n, int r0, dt cdt, void* p);
// ds = p * (dp - sum_j p_j dp_j) on the kept keys, zeros after, all in cdt.
void CausalSoftmaxBackward(const void* p, const void* dp, int H, int rows,
                           int n, int r0, dt cdt, void* ds);

}  // namespace gasloc::kernels

#endif  // GASLOC_WORKER_MODEL_ATTENTION_H_
