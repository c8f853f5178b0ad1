#include "worker/model/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "worker/model/elementwise_loops.h"

namespace gasloc::kernels {

// ---------------------------------------------------------------- layouts

Permute::Permute(const Dims& dims, const Dims& src_strides,
                 const Dims& dst_strides, dt type)
    : dims_(dims),
      src_strides_(src_strides),
      dst_strides_(dst_strides),
      esize_(DtSize(type)) {
  if (dims.size() < 2 || dims.size() > kMaxDims ||
      src_strides.size() != dims.size() ||
      dst_strides.size() != dims.size() || src_strides.back() != 1 ||
      dst_strides.back() != 1) {
    throw std::invalid_argument(
        "Permute: needs 2 to 8 dimensions, a stride per dimension and the "
        "last dimension contiguous on both sides");
  }
}

void Permute::Run(const void* src, void* dst) const {
  const int nd = static_cast<int>(dims_.size());
  const size_t row = static_cast<size_t>(dims_.back()) * esize_;
  // The dimensions between the first and the last, walked as an odometer
  // inside each index of the first (and, for 3 or more dimensions, the
  // second: the parallel loop covers dims[0] x dims[1]).
  const int split = nd >= 3 ? 2 : 1;
  int64_t outer = 1;
  for (int d = 0; d < split; ++d) outer *= dims_[d];
  const char* in = static_cast<const char*>(src);
  char* out = static_cast<char*>(dst);
#pragma omp parallel for schedule(static)
  for (int64_t o = 0; o < outer; ++o) {
    int64_t s_off = 0, d_off = 0, rest = o;
    for (int d = split - 1; d >= 0; --d) {
      const int64_t i = rest % dims_[d];
      rest /= dims_[d];
      s_off += i * src_strides_[d];
      d_off += i * dst_strides_[d];
    }
    int64_t idx[kMaxDims] = {};  // of dims [split, nd - 1)
    while (true) {
      std::memcpy(out + d_off * esize_, in + s_off * esize_, row);
      int d = nd - 2;
      for (; d >= split; --d) {
        s_off += src_strides_[d];
        d_off += dst_strides_[d];
        if (++idx[d - split] < dims_[d]) break;
        s_off -= dims_[d] * src_strides_[d];
        d_off -= dims_[d] * dst_strides_[d];
        idx[d - split] = 0;
      }
      if (d < split) break;
    }
  }
}

namespace {

// Strides (in elements) of (B, T, 3, H, hd) index order for both layouts.
Dims RowMajorQkv(int T, int C, int H) {
  const int64_t hd = C / H;
  return {int64_t{T} * 3 * C, 3 * C, C, hd, 1};
}
Dims HeadMajorQkv(int T, int C, int H) {
  const int64_t hd = C / H;
  return {int64_t{T} * 3 * C, hd, int64_t{T} * C, int64_t{T} * hd, 1};
}
// Strides of (B, T, H, hd) index order.
Dims RowMajorOut(int T, int C, int H) {
  const int64_t hd = C / H;
  return {int64_t{T} * C, C, hd, 1};
}
Dims HeadMajorOut(int T, int C, int H) {
  const int64_t hd = C / H;
  return {int64_t{T} * C, hd, int64_t{T} * hd, 1};
}

}  // namespace

HeadLayout::HeadLayout(int B, int T, int C, int H, dt cdt)
    : qkv_to_heads({B, T, 3, H, C / H}, RowMajorQkv(T, C, H),
                   HeadMajorQkv(T, C, H), cdt),
      out_from_heads({B, T, H, C / H}, HeadMajorOut(T, C, H),
                     RowMajorOut(T, C, H), cdt),
      dout_to_heads({B, T, H, C / H}, RowMajorOut(T, C, H),
                    HeadMajorOut(T, C, H), cdt),
      dqkv_from_heads({B, T, 3, H, C / H}, HeadMajorQkv(T, C, H),
                      RowMajorQkv(T, C, H), cdt) {}

// ---------------------------------------------------------------- attention

namespace {

Matmul::Desc AttnDesc(dnnl::memory::desc a, dnnl::memory::desc b,
                      dnnl::memory::desc c, float scale,
                      bool accumulate = false) {
  Matmul::Desc d;
  d.a = a;
  d.b = b;
  d.c = c;
  d.scale = scale;
  d.user_scratchpad = true;
  d.accumulate = accumulate;
  return d;
}

// One head's (rows, cols) dense block, and the transpose view (cols, rows)
// of a dense (rows, cols) block. oneDNN's brgemm kernels take only dense
// operands (a strided batch falls back to a slower gemm), so the row
// blocks run one head at a time: a prefix of a head's rows is dense.
dnnl::memory::desc Block(int rows, int cols, dt type) {
  return PlainMd({rows, cols}, type);
}
dnnl::memory::desc BlockT(int rows, int cols, dt type) {
  return StridedMd({cols, rows}, type, {1, cols});
}

}  // namespace

// The primitives of one row block, per head: query rows [r0, r0 + rows)
// against keys [0, n), n = r0 + rows.
struct CausalAttention::RowBlock {
  RowBlock(DnnlEnv* env, int H, int hd, dt cdt, int r0_, int rows_,
           bool accumulate)
      : r0(r0_),
        rows(rows_),
        n(r0_ + rows_),
        // S = scale Q_i K^T
        qk(env, AttnDesc(Block(rows, hd, cdt), BlockT(n, hd, cdt),
                         Block(rows, n, dt::f32),
                         1.0f / std::sqrt(static_cast<float>(hd)))),
        // O_i = P V
        pv(env, AttnDesc(Block(rows, n, cdt), Block(n, hd, cdt),
                         Block(rows, hd, cdt), 1.0f)),
        // dP = dO_i V^T
        dp(env, AttnDesc(Block(rows, hd, cdt), BlockT(n, hd, cdt),
                         Block(rows, n, cdt), 1.0f)),
        // dV[0, n) (+)= P^T dO_i, f32
        dv(env, AttnDesc(BlockT(rows, n, cdt), Block(rows, hd, cdt),
                         Block(n, hd, dt::f32), 1.0f, accumulate)),
        // dQ_i = scale dS K
        dq(env, AttnDesc(Block(rows, n, cdt), Block(n, hd, cdt),
                         Block(rows, hd, cdt),
                         1.0f / std::sqrt(static_cast<float>(hd)))),
        // dK[0, n) (+)= scale dS^T Q_i, f32
        dk(env, AttnDesc(BlockT(rows, n, cdt), Block(rows, hd, cdt),
                         Block(n, hd, dt::f32),
                         1.0f / std::sqrt(static_cast<float>(hd)),
                         accumulate)) {}
  size_t scratchpad_bytes() const {
    size_t bytes = 0;
    for (size_t b : {qk.scratchpad_bytes(), pv.scratchpad_bytes(),
                     dp.scratchpad_bytes(), dv.scratchpad_bytes(),
                     dq.scratchpad_bytes(), dk.scratchpad_bytes()}) {
      bytes = std::max(bytes, b);
    }
    return bytes;
  }
  int r0, rows, n;
  Matmul qk, pv, dp, dv, dq, dk;
};

// One thread's buffers: its stream, one row block's scores, the f32 dK, dV
// accumulators (bf16 only), oneDNN scratchpad, and each block's matmuls
// bound to this thread's memory objects.
struct CausalAttention::ThreadScratch {
  struct BlockCalls {
    BlockCalls(const RowBlock& b, const dnnl::engine& engine, void* pad)
        : qk(b.qk, engine, pad),
          pv(b.pv, engine, pad),
          dp(b.dp, engine, pad),
          dv(b.dv, engine, pad),
          dq(b.dq, engine, pad),
          dk(b.dk, engine, pad) {}
    Matmul::Bound qk, pv, dp, dv, dq, dk;
  };
  explicit ThreadScratch(const dnnl::engine& engine, size_t bytes)
      : stream(engine), buffer(bytes + 64) {}
  dnnl::stream stream;
  std::vector<char> buffer;
  float* s = nullptr;    // (H, block_rows, T) f32 scores
  void* p = nullptr;     // (H, block_rows, T) cdt probabilities
  void* dp = nullptr;    // (H, block_rows, T) cdt
  void* ds = nullptr;    // (H, block_rows, T) cdt
  float* acc = nullptr;  // (2, H, T, hd) f32: dK, dV (bf16 only)
  void* scratchpad = nullptr;
  std::vector<std::unique_ptr<BlockCalls>> calls;  // one per row block
};

namespace {
size_t Aligned(size_t bytes) { return (bytes + 63) / 64 * 64; }
}  // namespace

CausalAttention::CausalAttention(DnnlEnv* env, int T, int C, int H, dt cdt,
                                 int block_rows)
    : env_(env),
      T_(T),
      C_(C),
      H_(H),
      cdt_(cdt),
      esize_(DtSize(cdt)),
      row_bytes_(static_cast<size_t>(C / H) * DtSize(cdt)),
      head_stride_(static_cast<size_t>(T) * row_bytes_),
      head_bytes_(static_cast<size_t>(T) * C * DtSize(cdt)),
      qkv_seq_(3 * head_bytes_) {
  const int rows = std::max(1, std::min(block_rows, T));
  const int nb = (T + rows - 1) / rows;
  for (int i = 0; i < nb; ++i) {
    // The backward visits the last block first: it writes dK, dV; the
    // others add to them.
    blocks_.push_back(std::make_unique<RowBlock>(
        env, H, C / H, cdt, i * rows, std::min(rows, T - i * rows),
        /*accumulate=*/i != nb - 1));
    scratchpad_bytes_ =
        std::max(scratchpad_bytes_, blocks_.back()->scratchpad_bytes());
  }
  const size_t n = static_cast<size_t>(H) * rows * T;
  per_thread_bytes_ = Aligned(n * 4) + 3 * Aligned(n * esize_);
  if (cdt != dt::f32) per_thread_bytes_ += Aligned(size_t{2} * T * C * 4);
}

std::string CausalAttention::impl() const {
  const RowBlock& b = *blocks_.front();
  return std::to_string(blocks_.size()) + " row blocks; qk " + b.qk.impl() +
         ", pv " + b.pv.impl() + ", dp " + b.dp.impl() + ", dv " +
         b.dv.impl() + ", dq " + b.dq.impl() + ", dk " + b.dk.impl() +
         "; causal softmax: own loops";
}

CausalAttention::~CausalAttention() = default;

void CausalAttention::Scores(int block, ThreadScratch& ts,
                             const char* qkv_b) {
  const RowBlock& blk = *blocks_[block];
  Matmul::Bound& qk = ts.calls[block]->qk;
  const int64_t tile = int64_t{blk.rows} * blk.n;
  for (int h = 0; h < H_; ++h) {
    qk.Run(ts.stream, qkv_b + h * head_stride_ + blk.r0 * row_bytes_,
           qkv_b + head_bytes_ + h * head_stride_, ts.s + h * tile);
  }
}

void CausalAttention::Forward(const void* qkv, int B, void* out,
                              float* lse) {
  const int nthreads = std::min(B, omp_get_max_threads());
  EnsureThreads(nthreads);
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1)
  for (int b = 0; b < B; ++b) {
    ThreadScratch& ts = *threads_[omp_get_thread_num()];
    const char* qkv_b = static_cast<const char*>(qkv) + b * qkv_seq_;
    char* out_b = static_cast<char*>(out) + b * head_bytes_;
    for (int i = 0; i < blocks(); ++i) {
      const RowBlock& blk = *blocks_[i];
      Scores(i, ts, qkv_b);
      // lse (H, T) of sequence b: this block's rows start at r0.
      CausalSoftmax(ts.s, H_, blk.rows, blk.n, blk.r0, cdt_, ts.p,
                    lse + int64_t{b} * H_ * T_ + blk.r0, T_);
      const size_t p_tile = size_t{1} * blk.rows * blk.n * esize_;
      for (int h = 0; h < H_; ++h) {
        ts.calls[i]->pv.Run(ts.stream, static_cast<char*>(ts.p) + h * p_tile,
                            qkv_b + 2 * head_bytes_ + h * head_stride_,
                            out_b + h * head_stride_ + blk.r0 * row_bytes_);
      }
    }
  }
}

void CausalAttention::EnsureThreads(int nthreads) {
  const int rows = blocks_.front()->rows;
  const size_t n = static_cast<size_t>(H_) * rows * T_;
  while (static_cast<int>(threads_.size()) < nthreads) {
    auto ts = std::make_unique<ThreadScratch>(
        env_->engine, per_thread_bytes_ + scratchpad_bytes_);
    char* base = ts->buffer.data();
    base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
    ts->s = reinterpret_cast<float*>(base);
    base += Aligned(n * 4);
    ts->p = base;
    base += Aligned(n * esize_);
    ts->dp = base;
    base += Aligned(n * esize_);
    ts->ds = base;
    base += Aligned(n * esize_);
    if (cdt_ != dt::f32) {
      ts->acc = reinterpret_cast<float*>(base);
      base += Aligned(size_t{2} * T_ * C_ * 4);
    }
    ts->scratchpad = base;
    for (const auto& blk : blocks_) {
      ts->calls.push_back(std::make_unique<ThreadScratch::BlockCalls>(
          *blk, env_->engine, ts->scratchpad));
    }
    threads_.push_back(std::move(ts));
  }
}

void CausalAttention::Backward(const void* qkv, const float* lse,
                               const void* dout, int B, void* dqkv) {
  const int64_t head_elems = int64_t{T_} * C_;
  const size_t acc_head = static_cast<size_t>(T_) * (C_ / H_) * 4;  // f32
  const int nthreads = std::min(B, omp_get_max_threads());
  EnsureThreads(nthreads);
#pragma omp parallel for num_threads(nthreads) schedule(dynamic, 1)
  for (int b = 0; b < B; ++b) {
    ThreadScratch& ts = *threads_[omp_get_thread_num()];
    const char* qkv_b = static_cast<const char*>(qkv) + b * qkv_seq_;
    const char* dout_b = static_cast<const char*>(dout) + b * head_bytes_;
    char* dqkv_b = static_cast<char*>(dqkv) + b * qkv_seq_;
    // dK, dV accumulate in f32: in place in f32, else in ts.acc.
    void* dk_acc = cdt_ == dt::f32 ? static_cast<void*>(dqkv_b + head_bytes_)
                                   : static_cast<void*>(ts.acc);
    void* dv_acc = cdt_ == dt::f32
                       ? static_cast<void*>(dqkv_b + 2 * head_bytes_)
                       : static_cast<void*>(ts.acc + head_elems);
    for (int i = blocks() - 1; i >= 0; --i) {
      const RowBlock& blk = *blocks_[i];
      ThreadScratch::BlockCalls& calls = *ts.calls[i];
      const size_t at = blk.r0 * row_bytes_;
      const size_t p_tile = size_t{1} * blk.rows * blk.n * esize_;
      char* p = static_cast<char*>(ts.p);
      char* dp = static_cast<char*>(ts.dp);
      char* ds = static_cast<char*>(ts.ds);
      Scores(i, ts, qkv_b);
      CausalSoftmaxFromLse(ts.s, lse + int64_t{b} * H_ * T_ + blk.r0, T_, H_,
                           blk.rows, blk.n, blk.r0, cdt_, ts.p);
      for (int h = 0; h < H_; ++h) {
        const char* v_h = qkv_b + 2 * head_bytes_ + h * head_stride_;
        calls.dp.Run(ts.stream, dout_b + h * head_stride_ + at, v_h,
                     dp + h * p_tile);
        calls.dv.Run(ts.stream, p + h * p_tile, dout_b + h * head_stride_ + at,
                     static_cast<char*>(dv_acc) + h * acc_head);
      }
      CausalSoftmaxBackward(ts.p, ts.dp, H_, blk.rows, blk.n, blk.r0, cdt_,
                            ts.ds);
      for (int h = 0; h < H_; ++h) {
        calls.dq.Run(ts.stream, ds + h * p_tile,
                     qkv_b + head_bytes_ + h * head_stride_,
                     dqkv_b + h * head_stride_ + at);
        calls.dk.Run(ts.stream, ds + h * p_tile, qkv_b + h * head_stride_ + at,
                     static_cast<char*>(dk_acc) + h * acc_head);
      }
    }
    if (cdt_ != dt::f32) {
      // dK, dV are adjacent in both layouts: one conversion of 2 T C values.
      ActiveElementwiseLoops().to_bf16(
          ts.acc, 2 * head_elems,
          reinterpret_cast<uint16_t*>(dqkv_b + head_bytes_));
    }
  }
}

// ---------------------------------------------------------------- softmax

// The loops live in elementwise_loops_inl.h (one build per instruction set).

void CausalSoftmax(float* s, int H, int rows, int n, int r0, dt cdt, void* p,
                   float* lse, int64_t lse_stride) {
  ActiveElementwiseLoops().causal_softmax(s, H, rows, n, r0, cdt, p, lse,
                                          lse_stride);
}

void CausalSoftmaxFromLse(const float* s, const float* lse, int64_t lse_stride,
                          int H, int rows, int n, int r0, dt cdt, void* p) {
  ActiveElementwiseLoops().causal_softmax_from_lse(s, lse, lse_stride, H, rows,
                                                   n, r0, cdt, p);
}

void CausalSoftmaxBackward(const void* p, const void* dp, int H, int rows,
                           int n, int r0, dt cdt, void* ds) {
  ActiveElementwiseLoops().causal_softmax_backward(p, dp, H, rows, n, r0, cdt,
                                                   ds);
}

}  // namespace gasloc::kernels
