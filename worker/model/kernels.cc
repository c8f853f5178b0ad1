#include "worker/model/kernels.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "worker/model/bf16_widening.h"
#include "worker/model/elementwise_loops.h"
#include "worker/model/vector_math.h"

namespace gasloc::kernels {
namespace {

using tag = dnnl::memory::format_tag;

dnnl::memory Mem(const dnnl::memory::desc& md, DnnlEnv* env, const void* p) {
  return dnnl::memory(md, env->engine, const_cast<void*>(p));
}

}  // namespace

size_t DtSize(dt type) { return type == dt::bf16 ? 2 : 4; }

uint16_t FloatToBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu) != 0) {
    return static_cast<uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  }
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float Bf16ToFloat(uint16_t x) {
  const uint32_t bits = static_cast<uint32_t>(x) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

dnnl::memory::desc StridedMd(const Dims& dims, dt type, const Dims& strides) {
  return dnnl::memory::desc(dims, type, strides);
}

dnnl::memory::desc PlainMd(const Dims& dims, dt type) {
  Dims strides(dims.size(), 1);
  for (int i = static_cast<int>(dims.size()) - 2; i >= 0; --i) {
    strides[i] = strides[i + 1] * dims[i + 1];
  }
  return dnnl::memory::desc(dims, type, strides);
}

// ---------------------------------------------------------------- Matmul

// bf16 operands on a CPU whose oneDNN has no bf16 matmul (Bf16Compute::
// kWidened): each bf16 operand with a fixed layout, the binary post-op's
// included (an f32 matmul with a bf16 post-op operand falls back to
// oneDNN's reference kernel), gets an f32 twin in scratch memory
// (bf16_widening.h); a bf16 `any` weight becomes an f32 `any` one.
struct Matmul::Widening {
  std::optional<WidenedOperand> a, b, c, add;
  // The twins' offsets in the scratch, in floats (64-byte aligned).
  size_t a_at = 0, b_at = 0, c_at = 0, add_at = 0, floats = 0;
  size_t pad_bytes = 0;  // the largest reorder scratchpad (user mode)
};

namespace {

bool IsBf16(const dnnl::memory::desc& md) { return md.data_type() == dt::bf16; }
bool IsAny(const dnnl::memory::desc& md) {
  return md.data.format_kind == dnnl_format_kind_any;
}

// Can oneDNN build a bf16 matmul on this CPU (after ONEDNN_MAX_CPU_ISA)?
bool OneDnnHasBf16Matmul() {
  try {
    dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    const dnnl::memory::desc md = PlainMd({16, 16}, dt::bf16);
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), engine);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

}  // namespace

void RoundToBf16InPlace(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = Bf16ToFloat(FloatToBf16(x[i]));
}

Bf16Compute Bf16ComputeMode() {
  static const Bf16Compute mode =
      OneDnnHasBf16Matmul() ? Bf16Compute::kNative : Bf16Compute::kWidened;
  return mode;
}

const char* Bf16ComputeName(Bf16Compute mode) {
  return mode == Bf16Compute::kNative ? "native" : "emulated";
}

std::string OneDnnIsaName() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "other";
  }
}

std::string ComputeSummary() {
  const Bf16Compute mode = Bf16ComputeMode();
  return std::string("oneDNN isa ") + OneDnnIsaName() + ", element loops " +
         ActiveElementwiseLoops().isa + ", bf16 " + Bf16ComputeName(mode) +
         (mode == Bf16Compute::kNative
              ? " (oneDNN bf16 matmuls)"
              : " (bf16 storage and rounding, f32 matmul arithmetic)");
}

absl::Status OneDnnStatus(std::string_view operation, dt precision,
                          const dnnl::error& error) {
  std::string message(operation);
  message += precision == dt::bf16 ? " in bf16" : " in fp32";
  message += " on this CPU (oneDNN isa " + OneDnnIsaName() + ", bf16 " +
             Bf16ComputeName(Bf16ComputeMode()) + "): " + error.what();
  return absl::InternalError(message);
}

Matmul::Matmul(DnnlEnv* env, const Desc& desc) : env_(env), desc_(desc) {
  // The descriptors the primitive runs with: f32 in place of bf16 when
  // this CPU has no bf16 matmul.
  dnnl::memory::desc a = desc.a, b = desc.b, c = desc.c, add = desc.add_md;
  std::shared_ptr<Widening> w;
  if ((IsBf16(a) || IsBf16(b) || IsBf16(c)) &&
      Bf16ComputeMode() == Bf16Compute::kWidened) {
    w = std::make_shared<Widening>();
    auto place = [&](dnnl::memory::desc& md, std::optional<WidenedOperand>* op,
                     size_t* at) {
      if (!IsBf16(md)) return;
      if (IsAny(md)) {
        md = dnnl::memory::desc(md.dims(), dt::f32,
                                dnnl::memory::format_tag::any);
        return;
      }
      op->emplace(env, md, desc.user_scratchpad);
      md = (*op)->f32_md();
      *at = w->floats;
      w->floats += ((*op)->floats() + 15) / 16 * 16;
      w->pad_bytes = std::max(w->pad_bytes, (*op)->pad_bytes());
    };
    place(a, &w->a, &w->a_at);
    place(b, &w->b, &w->b_at);
    place(c, &w->c, &w->c_at);
    if (desc.add) place(add, &w->add, &w->add_at);
  }
  dnnl::primitive_attr attr;
  if (desc.user_scratchpad) attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (desc.scale != 1.0f) attr.set_output_scales(0, {desc.scale});
  if (desc.add || desc.accumulate) {
    dnnl::post_ops ops;
    if (desc.accumulate) ops.append_sum(1.0f);
    if (desc.add) ops.append_binary(desc.add_alg, add);
    attr.set_post_ops(ops);
  }
  const Dims c_dims = desc.c.dims();
  if (desc.bias) {
    Dims bias_dims(c_dims.size(), 1);
    bias_dims.back() = c_dims.back();
    bias_md_ = PlainMd(bias_dims, dt::f32);
    pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, bias_md_, c),
                                       attr, env->engine);
  } else {
    pd_ = dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr,
                                       env->engine);
  }
  prim_ = dnnl::matmul(pd_);
  weights_md_ = pd_.weights_desc();
  if (w != nullptr) {
    // A bf16 `any` weight now runs as f32: the caller writes that layout.
    if (!w->b && IsBf16(desc.b)) weights_md_ = pd_.weights_desc();
    scratch_.resize(desc.user_scratchpad ? 0 : w->floats);
    widening_ = std::move(w);
  }
}

void Matmul::Execute(dnnl::stream& stream, const dnnl::memory& a,
                     const dnnl::memory& b, const dnnl::memory& c,
                     const std::unordered_map<int, dnnl::memory>& args,
                     const dnnl::memory* pad) const {
  if (widening_ == nullptr) {
    prim_.execute(stream, args);
    return;
  }
  const Widening& w = *widening_;
  if (w.a) w.a->Widen(stream, a, args.at(DNNL_ARG_SRC), pad);
  if (w.b) w.b->Widen(stream, b, args.at(DNNL_ARG_WEIGHTS), pad);
  if (w.c && desc_.accumulate) {
    w.c->Widen(stream, c, args.at(DNNL_ARG_DST), pad);
  }
  prim_.execute(stream, args);
  if (w.c) w.c->Narrow(stream, args.at(DNNL_ARG_DST), c, pad);
}

dnnl::memory Matmul::RunMemory(const std::optional<WidenedOperand>& twin,
                               size_t at, const dnnl::memory& caller,
                               const dnnl::engine& engine, float* scratch) {
  if (!twin.has_value()) return caller;
  return dnnl::memory(twin->f32_md(), engine, scratch + at);
}

void Matmul::Run(const void* a, const void* b, void* c, const float* bias,
                 const void* add) {
  const dnnl::memory a_mem = Mem(desc_.a, env_, a);
  const dnnl::memory b_mem = Mem(widening_ && widening_->b ? desc_.b
                                                           : weights_md_,
                                 env_, b);
  const dnnl::memory c_mem = Mem(desc_.c, env_, c);
  const Widening none;
  const Widening& w = widening_ ? *widening_ : none;
  std::unordered_map<int, dnnl::memory> args = {
      {DNNL_ARG_SRC, RunMemory(w.a, w.a_at, a_mem, env_->engine,
                               scratch_.data())},
      {DNNL_ARG_WEIGHTS, RunMemory(w.b, w.b_at, b_mem, env_->engine,
                                   scratch_.data())},
      {DNNL_ARG_DST, RunMemory(w.c, w.c_at, c_mem, env_->engine,
                               scratch_.data())}};
  if (desc_.bias) args.emplace(DNNL_ARG_BIAS, Mem(bias_md_, env_, bias));
  if (desc_.add) {
    const dnnl::memory add_mem = Mem(desc_.add_md, env_, add);
    const dnnl::memory run_add = RunMemory(w.add, w.add_at,
                                           add_mem, env_->engine,
                                           scratch_.data());
    if (w.add) w.add->Widen(env_->stream, add_mem, run_add, nullptr);
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(desc_.accumulate ? 1 : 0) |
                     DNNL_ARG_SRC_1,
                 run_add);
  }
  Execute(env_->stream, a_mem, b_mem, c_mem, args, nullptr);
  env_->stream.wait();
}

Matmul::Bound::Bound(const Matmul& matmul, const dnnl::engine& engine,
                     void* scratchpad)
    : matmul_(&matmul),
      a_(matmul.desc_.a, engine, nullptr),
      b_(matmul.widening_ && matmul.widening_->b ? matmul.desc_.b
                                                 : matmul.weights_md_,
         engine, nullptr),
      c_(matmul.desc_.c, engine, nullptr) {
  const Widening none;
  const Widening& w = matmul.widening_ ? *matmul.widening_ : none;
  scratch_.resize(w.floats);
  args_ = {{DNNL_ARG_SRC, matmul.RunMemory(w.a, w.a_at, a_,
                                           engine, scratch_.data())},
           {DNNL_ARG_WEIGHTS, matmul.RunMemory(w.b, w.b_at,
                                               b_, engine, scratch_.data())},
           {DNNL_ARG_DST, matmul.RunMemory(w.c, w.c_at, c_,
                                           engine, scratch_.data())}};
  if (matmul.desc_.user_scratchpad) {
    if (w.pad_bytes > 0) {  // the widening reorders' share of the pad
      pad_ = std::make_unique<dnnl::memory>(
          dnnl::memory::desc({static_cast<int64_t>(w.pad_bytes)}, dt::u8,
                             dnnl::memory::format_tag::a),
          engine, scratchpad);
    }
    args_.emplace(DNNL_ARG_SCRATCHPAD,
                  dnnl::memory(matmul.pd_.scratchpad_desc(), engine, scratchpad));
  }
}

void Matmul::Bound::Run(dnnl::stream& stream, const void* a, const void* b,
                        void* c) {
  a_.set_data_handle(const_cast<void*>(a));
  b_.set_data_handle(const_cast<void*>(b));
  c_.set_data_handle(c);
  matmul_->Execute(stream, a_, b_, c_, args_, pad_.get());
}

size_t Matmul::scratchpad_bytes() const {
  const size_t own = pd_.scratchpad_desc().get_size();
  return widening_ ? std::max(own, widening_->pad_bytes) : own;
}

std::string Matmul::impl() const {
  return pd_.impl_info_str() +
         (widening_ ? std::string(" (bf16 widened to f32)") : std::string());
}

// ---------------------------------------------------------------- Linear

namespace {

Matmul::Desc LinearFwdDesc(const Linear::Options& o) {
  Matmul::Desc d;
  d.a = PlainMd({o.M, o.K}, o.cdt);
  d.b = o.blocked_weights
            ? dnnl::memory::desc({o.K, o.N}, o.cdt, tag::any)
            : StridedMd({o.K, o.N}, o.cdt, {1, o.K});  // W^T view of (N, K)
  d.c = PlainMd({o.M, o.N}, o.y_type);
  d.bias = o.bias;
  d.add = o.residual;
  if (o.residual) d.add_md = PlainMd({o.M, o.N}, dt::f32);
  return d;
}

Matmul::Desc LinearBwdDataDesc(const Linear::Options& o) {
  Matmul::Desc d;
  d.a = PlainMd({o.M, o.N}, o.cdt);
  d.b = o.blocked_weights ? dnnl::memory::desc({o.N, o.K}, o.cdt, tag::any)
                         : PlainMd({o.N, o.K}, o.cdt);
  d.c = PlainMd({o.M, o.K}, o.dx_type);
  d.add = o.bwd_data_mul;
  if (o.bwd_data_mul) {
    d.add_md = PlainMd({o.M, o.K}, o.dx_type);
    d.add_alg = dnnl::algorithm::binary_mul;
  }
  return d;
}

Matmul::Desc LinearBwdWeightsDesc(const Linear::Options& o) {
  Matmul::Desc d;
  d.a = StridedMd({o.N, o.M}, o.cdt, {1, o.N});  // dy^T view of (M, N)
  d.b = PlainMd({o.M, o.K}, o.cdt);
  d.c = PlainMd({o.N, o.K}, dt::f32);
  return d;
}

}  // namespace

Linear::Linear(DnnlEnv* env, const Options& options)
    : options_(options),
      fwd_(env, LinearFwdDesc(options)),
      bwd_data_(env, LinearBwdDataDesc(options)),
      bwd_weights_(env, LinearBwdWeightsDesc(options)),
      env_(env),
      w_t_f32_(StridedMd({options.K, options.N}, dt::f32, {1, options.K})),
      w_f32_(PlainMd({options.N, options.K}, dt::f32)) {
  if (options.blocked_weights) {
    to_fwd_ = dnnl::reorder(dnnl::reorder::primitive_desc(
        env->engine, w_t_f32_, env->engine, fwd_.weights_md()));
    to_bwd_ = dnnl::reorder(dnnl::reorder::primitive_desc(
        env->engine, w_f32_, env->engine, bwd_data_.weights_md()));
  }
}

void Linear::PrepareWeights(const float* w, void* fwd, void* bwd,
                            dnnl::stream* stream) {
  dnnl::stream& on = stream != nullptr ? *stream : env_->stream;
  dnnl::memory src_t = Mem(w_t_f32_, env_, w);
  dnnl::memory src = Mem(w_f32_, env_, w);
  dnnl::memory dst_fwd = Mem(fwd_.weights_md(), env_, fwd);
  dnnl::memory dst_bwd = Mem(bwd_data_.weights_md(), env_, bwd);
  to_fwd_.execute(on, src_t, dst_fwd);
  to_bwd_.execute(on, src, dst_bwd);
  on.wait();
  // Widened bf16: the copies are f32, holding what a bf16 copy would.
  if (options_.cdt == dt::bf16 && fwd_.widened()) {
    RoundToBf16InPlace(static_cast<float*>(fwd), fwd_weights_bytes() / 4);
  }
  if (options_.cdt == dt::bf16 && bwd_data_.widened()) {
    RoundToBf16InPlace(static_cast<float*>(bwd), bwd_weights_bytes() / 4);
  }
}

size_t Linear::fwd_weights_bytes() const {
  return fwd_.weights_md().get_size();
}

size_t Linear::bwd_weights_bytes() const {
  return bwd_data_.weights_md().get_size();
}

void Linear::Forward(const void* x, const void* w, const float* b,
                     const float* residual, void* y) {
  fwd_.Run(x, w, y, b, residual);
}

void Linear::BackwardData(const void* dy, const void* w, void* dx,
                          const void* mul) {
  bwd_data_.Run(dy, w, dx, nullptr, mul);
}

void Linear::BackwardWeights(const void* x, const void* dy, float* dw,
                             float* db) {
  bwd_weights_.Run(dy, x, dw);
  if (db != nullptr) ColumnSum(dy, options_.cdt, options_.M, options_.N, db);
}

std::string Linear::impl() const {
  return "fwd " + fwd_.impl() + ", bwd_data " + bwd_data_.impl() +
         ", bwd_weights " + bwd_weights_.impl();
}

// ---------------------------------------------------------------- LayerNorm

namespace {

// Writes n floats as `type` (f32 or bf16, round to nearest even).
inline void StoreRow(const float* in, int64_t n, dt type, void* out) {
  if (type == dt::bf16) {
    ActiveElementwiseLoops().to_bf16(in, n, static_cast<uint16_t*>(out));
  } else {
    std::memcpy(out, in, sizeof(float) * n);
  }
}

}  // namespace

LayerNorm::LayerNorm(int M, int C, float eps, dt out_type)
    : M_(M), C_(C), eps_(eps), out_type_(out_type) {}

void LayerNorm::Forward(const float* x, const float* gain, const float* bias,
                        void* y, float* mean, float* var) {
  const int C = C_;
  const size_t osize = DtSize(out_type_);
#pragma omp parallel
  {
    std::vector<float> row_out(C);
#pragma omp for schedule(static)
    for (int m = 0; m < M_; ++m) {
      const float* row = x + int64_t{m} * C;
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int c = 0; c < C; ++c) sum += row[c];
      const float mu = sum / C;
      float sq = 0;
#pragma omp simd reduction(+ : sq)
      for (int c = 0; c < C; ++c) sq += (row[c] - mu) * (row[c] - mu);
      const float v = sq / C;
      const float rstd = 1.0f / std::sqrt(v + eps_);
      float* o = row_out.data();
#pragma omp simd
      for (int c = 0; c < C; ++c) o[c] = (row[c] - mu) * rstd * gain[c] + bias[c];
      StoreRow(o, C, out_type_,
               static_cast<char*>(y) + static_cast<size_t>(m) * C * osize);
      mean[m] = mu;
      var[m] = v;
    }
  }
}

void LayerNorm::Backward(const float* x, const float* gain, const float* mean,
                         const float* var, const float* dy,
                         const float* residual, float* dx, void* dx_copy,
                         float* dgain, float* dbias) {
  const int C = C_;
  const size_t osize = DtSize(out_type_);
  const int nthreads = omp_get_max_threads();
  partial_.assign(static_cast<size_t>(nthreads) * 2 * C, 0.0f);
#pragma omp parallel num_threads(nthreads)
  {
    const int id = omp_get_thread_num(), nt = omp_get_num_threads();
    float* pg = partial_.data() + static_cast<size_t>(id) * 2 * C;
    float* pb = pg + C;
    const int m0 = static_cast<int>(int64_t{M_} * id / nt);
    const int m1 = static_cast<int>(int64_t{M_} * (id + 1) / nt);
    for (int m = m0; m < m1; ++m) {
      const float* xr = x + int64_t{m} * C;
      const float* dyr = dy + int64_t{m} * C;
      float* dxr = dx + int64_t{m} * C;
      const float mu = mean[m];
      const float rstd = 1.0f / std::sqrt(var[m] + eps_);
      float s1 = 0, s2 = 0;
#pragma omp simd reduction(+ : s1, s2)
      for (int c = 0; c < C; ++c) {
        const float xhat = (xr[c] - mu) * rstd;
        const float dxhat = dyr[c] * gain[c];
        s1 += dxhat;
        s2 += dxhat * xhat;
        pg[c] += dyr[c] * xhat;
        pb[c] += dyr[c];
      }
      const float a = s1 / C, b = s2 / C;
      if (residual != nullptr) {
        const float* rr = residual + int64_t{m} * C;
#pragma omp simd
        for (int c = 0; c < C; ++c) {
          const float xhat = (xr[c] - mu) * rstd;
          dxr[c] = rstd * (dyr[c] * gain[c] - a - xhat * b) + rr[c];
        }
      } else {
#pragma omp simd
        for (int c = 0; c < C; ++c) {
          const float xhat = (xr[c] - mu) * rstd;
          dxr[c] = rstd * (dyr[c] * gain[c] - a - xhat * b);
        }
      }
      if (dx_copy != nullptr) {
        StoreRow(dxr, C, out_type_,
                 static_cast<char*>(dx_copy) + static_cast<size_t>(m) * C * osize);
      }
    }
  }
  for (int c = 0; c < C; ++c) dgain[c] = dbias[c] = 0.0f;
  for (int t = 0; t < nthreads; ++t) {
    const float* pg = partial_.data() + static_cast<size_t>(t) * 2 * C;
    for (int c = 0; c < C; ++c) {
      dgain[c] += pg[c];
      dbias[c] += pg[C + c];
    }
  }
}

// ---------------------------------------------------------------- Gelu

Gelu::Gelu(DnnlEnv* env, int64_t n) : env_(env) {
  md_ = PlainMd({n}, dt::f32);
  fwd_pd_ = dnnl::eltwise_forward::primitive_desc(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training,
                                  dnnl::algorithm::eltwise_gelu_erf, md_),
      env->engine);
  fwd_ = dnnl::eltwise_forward(fwd_pd_);
  bwd_pd_ = dnnl::eltwise_backward::primitive_desc(
      dnnl::eltwise_backward::desc(dnnl::algorithm::eltwise_gelu_erf, md_,
                                   md_),
      env->engine, fwd_pd_);
  bwd_ = dnnl::eltwise_backward(bwd_pd_);
}

void Gelu::Forward(const void* x, void* y) {
  fwd_.execute(env_->stream, {{DNNL_ARG_SRC, Mem(md_, env_, x)},
                              {DNNL_ARG_DST, Mem(md_, env_, y)}});
  env_->stream.wait();
}

void Gelu::Backward(const void* x, const void* dy, void* dx) {
  bwd_.execute(env_->stream, {{DNNL_ARG_SRC, Mem(md_, env_, x)},
                              {DNNL_ARG_DIFF_DST, Mem(md_, env_, dy)},
                              {DNNL_ARG_DIFF_SRC, Mem(md_, env_, dx)}});
  env_->stream.wait();
}

// ---------------------------------------------------------------- GELU

// The loop lives in elementwise_loops_inl.h (one build per instruction set).
void GeluWithDerivative(const void* h, dt type, int64_t n, void* g,
                        void* gd) {
  ActiveElementwiseLoops().gelu_with_derivative(h, type, n, g, gd);
}

// ---------------------------------------------------------------- Convert

Convert::Convert(DnnlEnv* env, int64_t n, dt from, dt to)
    : env_(env),
      n_(n),
      from_(from),
      to_(to),
      own_loop_(from != to && (from == dt::bf16 || to == dt::bf16) &&
                Bf16ComputeMode() == Bf16Compute::kWidened),
      src_md_(PlainMd({n}, from)),
      dst_md_(PlainMd({n}, to)) {
  if (own_loop_) return;
  prim_ = dnnl::reorder(
      dnnl::reorder::primitive_desc(env->engine, src_md_, env->engine, dst_md_));
}

void Convert::Run(const void* src, void* dst) {
  if (own_loop_) {
    if (to_ == dt::bf16) {
      NarrowToBf16(static_cast<const float*>(src), n_,
                   static_cast<uint16_t*>(dst));
    } else {
      WidenBf16(static_cast<const uint16_t*>(src), n_,
                static_cast<float*>(dst));
    }
    return;
  }
  dnnl::memory src_mem = Mem(src_md_, env_, src);
  dnnl::memory dst_mem = Mem(dst_md_, env_, dst);
  prim_.execute(env_->stream, src_mem, dst_mem);
  env_->stream.wait();
}

// ---------------------------------------------------------------- loops

using vmath::Load8;
using vmath::Store8;

double FusedCrossEntropy(float* logits, const uint8_t* targets,
                         int target_stride, int B, int T, int V,
                         bool want_grad) {
  const int64_t M = int64_t{B} * T;
  const float inv_m = 1.0f / static_cast<float>(M);
  double total = 0;
#pragma omp parallel for reduction(+ : total) schedule(static)
  for (int64_t m = 0; m < M; ++m) {
    float* row = logits + m * V;
    const int target = targets[(m / T) * target_stride + m % T];
    // 8 lanes with the polynomial exp (libm's scalar expf was most of this
    // loop's time), then the tail; a NaN logit makes the loss NaN.
    const int v8 = V / 8 * 8;
    __m256 vmax = _mm256_set1_ps(row[0]);
    for (int v = 0; v < v8; v += 8) vmax = _mm256_max_ps(vmax, Load8(row + v));
    float mx = vmath::HorizontalMax8(vmax);
    for (int v = v8; v < V; ++v) mx = std::max(mx, row[v]);
    const __m256 mx8 = _mm256_set1_ps(mx);
    __m256 vsum = _mm256_setzero_ps();
    for (int v = 0; v < v8; v += 8) {
      vsum = _mm256_add_ps(
          vsum, vmath::Exp8NonPositive<>(_mm256_sub_ps(Load8(row + v), mx8)));
    }
    float sum = vmath::HorizontalSum8(vsum);
    for (int v = v8; v < V; ++v) sum += vmath::ExpNonPositive(row[v] - mx);
    const float lse = mx + std::log(sum);
    total += static_cast<double>(lse - row[target]);
    if (want_grad) {
      const __m256 lse8 = _mm256_set1_ps(lse);
      const __m256 inv_m8 = _mm256_set1_ps(inv_m);
      for (int v = 0; v < v8; v += 8) {
        const __m256 p =
            vmath::Exp8NonPositive<>(_mm256_sub_ps(Load8(row + v), lse8));
        Store8(_mm256_mul_ps(p, inv_m8), row + v);
      }
      for (int v = v8; v < V; ++v) {
        row[v] = vmath::ExpNonPositive(row[v] - lse) * inv_m;
      }
      row[target] -= inv_m;
    }
  }
  return total / static_cast<double>(M);
}

void EmbeddingForward(const uint8_t* tokens, int token_stride,
                      const float* tok, const float* pos, int B, int T, int C,
                      float* x) {
#pragma omp parallel for schedule(static)
  for (int64_t m = 0; m < int64_t{B} * T; ++m) {
    const int b = static_cast<int>(m / T), t = static_cast<int>(m % T);
    const float* tr = tok + tokens[b * token_stride + t] * C;
    const float* pr = pos + static_cast<int64_t>(t) * C;
    float* xr = x + m * C;
    for (int c = 0; c < C; ++c) xr[c] = tr[c] + pr[c];
  }
}

void EmbeddingBackward(const uint8_t* tokens, int token_stride,
                       const float* dx, int B, int T, int C, int V,
                       int context, float* dtok, float* dpos) {
  std::memset(dtok, 0, sizeof(float) * V * C);
  std::memset(dpos, 0, sizeof(float) * context * C);
  // Columns are independent: split them across threads (no atomics).
#pragma omp parallel
  {
    const int nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int c0 = C * id / nt, c1 = C * (id + 1) / nt;
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        const float* dr = dx + (int64_t{b} * T + t) * C;
        float* tr = dtok + tokens[b * token_stride + t] * C;
        float* pr = dpos + int64_t{t} * C;
        for (int c = c0; c < c1; ++c) {
          tr[c] += dr[c];
          pr[c] += dr[c];
        }
      }
    }
  }
}

void ColumnSum(const void* x, dt type, int64_t M, int64_t N, float* out) {
  // Rows split statically over the threads (each reads contiguous memory);
  // per-thread partial sums are added in thread order: deterministic for a
  // fixed thread count.
  const int nthreads = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>(omp_get_max_threads(), M / 64)));
  std::vector<float> partial(static_cast<size_t>(nthreads) * N, 0.0f);
#pragma omp parallel num_threads(nthreads)
  {
    const int id = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t m0 = M * id / nt, m1 = M * (id + 1) / nt;
    float* acc = partial.data() + static_cast<size_t>(id) * N;
    const int64_t n8 = N / 8 * 8;
    for (int64_t m = m0; m < m1; ++m) {
      if (type == dt::bf16) {
        const auto* row = static_cast<const uint16_t*>(x) + m * N;
        for (int64_t n = 0; n < n8; n += 8) {
          Store8(_mm256_add_ps(Load8(acc + n), Load8(row + n)), acc + n);
        }
        for (int64_t n = n8; n < N; ++n) acc[n] += Bf16ToFloat(row[n]);
      } else {
        const auto* row = static_cast<const float*>(x) + m * N;
        for (int64_t n = 0; n < n8; n += 8) {
          Store8(_mm256_add_ps(Load8(acc + n), Load8(row + n)), acc + n);
        }
        for (int64_t n = n8; n < N; ++n) acc[n] += row[n];
      }
    }
  }
  std::memcpy(out, partial.data(), sizeof(float) * N);
  for (int t = 1; t < nthreads; ++t) {
    const float* acc = partial.data() + static_cast<size_t>(t) * N;
    for (int64_t n = 0; n < N; ++n) out[n] += acc[n];
  }
}

}  // namespace gasloc::kernels
