#include "worker/model/bf16_widening.h"

#include <omp.h>

#include <algorithm>
#include <unordered_map>

#include "worker/model/elementwise_loops.h"

namespace gasloc::kernels {
namespace {

// Conversions this long or longer use the OpenMP threads (when not already
// inside a parallel region, as the attention's per-thread calls are).
constexpr int64_t kParallelElements = 1 << 16;

// True when `md` is a plain strided layout covering exactly its elements:
// a dense block or a permutation of one (no gaps, no inner blocking).
bool DensePermutation(const dnnl::memory::desc& md) {
  if (md.data.format_kind != dnnl_blocked) return false;
  if (md.data.format_desc.blocking.inner_nblks != 0) return false;
  int64_t elements = 1;
  for (int64_t d : md.dims()) elements *= d;
  return md.get_size() ==
         static_cast<size_t>(elements) * (md.data_type() == dt::bf16 ? 2 : 4);
}

dnnl::memory::desc WithType(const dnnl::memory::desc& md, dt type) {
  const int n = md.data.ndims;
  const auto& strides = md.data.format_desc.blocking.strides;
  return dnnl::memory::desc(md.dims(), type, Dims(strides, strides + n));
}

dnnl::reorder MakeReorder(DnnlEnv* env, const dnnl::memory::desc& from,
                          const dnnl::memory::desc& to, bool user_pad,
                          size_t* pad_bytes) {
  dnnl::primitive_attr attr;
  if (user_pad) attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::reorder::primitive_desc pd(env->engine, from, env->engine, to, attr);
  *pad_bytes = std::max(*pad_bytes, pd.scratchpad_desc().get_size());
  return dnnl::reorder(pd);
}

void RunReorder(const dnnl::reorder& r, dnnl::stream& stream,
                const dnnl::memory& from, const dnnl::memory& to,
                const dnnl::memory* pad) {
  std::unordered_map<int, dnnl::memory> args = {{DNNL_ARG_FROM, from},
                                                {DNNL_ARG_TO, to}};
  if (pad != nullptr) args.emplace(DNNL_ARG_SCRATCHPAD, *pad);
  r.execute(stream, args);
}

}  // namespace

void WidenBf16(const uint16_t* in, int64_t n, float* out) {
#pragma omp parallel for schedule(static) if (n >= kParallelElements && !omp_in_parallel())
  for (int64_t i = 0; i < n; ++i) out[i] = Bf16ToFloat(in[i]);
}

void NarrowToBf16(const float* in, int64_t n, uint16_t* out) {
  const auto to_bf16 = ActiveElementwiseLoops().to_bf16;
  if (n < kParallelElements || omp_in_parallel()) {
    to_bf16(in, n, out);
    return;
  }
#pragma omp parallel
  {
    const int64_t id = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t i0 = n * id / nt, i1 = n * (id + 1) / nt;
    to_bf16(in + i0, i1 - i0, out + i0);
  }
}

WidenedOperand::WidenedOperand(DnnlEnv* env, const dnnl::memory::desc& given,
                               bool user_pad)
    : flat_(DensePermutation(given)) {
  elements_ = 1;
  for (int64_t d : given.dims()) elements_ *= d;
  if (flat_) {
    f32_md_ = WithType(given, dt::f32);
    return;
  }
  f32_md_ = PlainMd(given.dims(), dt::f32);
  widen_ = MakeReorder(env, given, f32_md_, user_pad, &pad_bytes_);
  narrow_ = MakeReorder(env, f32_md_, given, user_pad, &pad_bytes_);
}

void WidenedOperand::Widen(dnnl::stream& stream, const dnnl::memory& caller,
                           const dnnl::memory& twin,
                           const dnnl::memory* pad) const {
  if (!flat_) {
    RunReorder(widen_, stream, caller, twin, pad);
    return;
  }
  WidenBf16(static_cast<const uint16_t*>(caller.get_data_handle()), elements_,
            static_cast<float*>(twin.get_data_handle()));
}

void WidenedOperand::Narrow(dnnl::stream& stream, const dnnl::memory& twin,
                            const dnnl::memory& caller,
                            const dnnl::memory* pad) const {
  if (!flat_) {
    RunReorder(narrow_, stream, twin, caller, pad);
    return;
  }
  NarrowToBf16(static_cast<const float*>(twin.get_data_handle()), elements_,
               static_cast<uint16_t*>(caller.get_data_handle()));
}

}  // namespace gasloc::kernels
