// One bf16 operand of a matmul that runs in f32 because this CPU's oneDNN
// has no bf16 matmul (kernels::Bf16Compute::kWidened: AVX2-only CPUs, or
// ONEDNN_MAX_CPU_ISA capped below AVX-512): the descriptor of its f32 twin
// and the conversions between the two. Matmul (kernels.h) holds one per
// bf16 operand and widens inputs into their twins before the f32 call and
// narrows the output's twin after it.
//
// Most operands are a dense block or a permutation of one (a transposed
// view): the twin then has the same strides, so a conversion is one flat
// loop over the block (widening is exact; narrowing rounds to nearest even
// with the element loops' to_bf16, as every bf16 store of the model does).
// Anything else goes through a oneDNN reorder (oneDNN's generic
// `simple:any` on AVX2: correct, slow).
//
// Thread safety: immutable after construction; Widen / Narrow may run on
// several threads at once on different memory (a reorder then needs the
// user scratchpad each thread passes).
#ifndef GASLOC_WORKER_MODEL_BF16_WIDENING_H_
#define GASLOC_WORKER_MODEL_BF16_WIDENING_H_

#include <cstddef>
#include <cstdint>

#include "worker/model/kernels.h"

namespace gasloc::kernels {

class WidenedOperand {
 public:
  // `given`: the caller's bf16 descriptor (a fixed layout, not `any`).
  // `user_pad`: reorders in user scratchpad mode (pad_bytes() each).
  WidenedOperand(DnnlEnv* env, const dnnl::memory::desc& given,
                 bool user_pad);
  // The f32 twin the primitive runs with, and its size in floats.
  const dnnl::memory::desc& f32_md() const { return f32_md_; }
  size_t floats() const { return f32_md_.get_size() / 4; }
  size_t pad_bytes() const { return pad_bytes_; }
  // True when conversions are flat loops (a dense block or permutation).
  bool flat() const { return flat_; }

  // twin = f32(caller); caller = bf16(twin). `pad`: the user scratchpad,
  // or nullptr in library mode.
  void Widen(dnnl::stream& stream, const dnnl::memory& caller,
             const dnnl::memory& twin, const dnnl::memory* pad) const;
  void Narrow(dnnl::stream& stream, const dnnl::memory& twin,
              const dnnl::memory& caller, const dnnl::memory* pad) const;

 private:
  bool flat_ = false;
  int64_t elements_ = 0;
  dnnl::memory::desc f32_md_;
  dnnl::reorder widen_, narrow_;  // when !flat_
  size_t pad_bytes_ = 0;
};

// out[i] = f32(in[i]) for n bf16 values (exact); OpenMP threads for large
// n outside a parallel region. Reference: Bf16ToFloat.
void WidenBf16(const uint16_t* in, int64_t n, float* out);
// out[i] = bf16(in[i]) for n values, round to nearest even (the element
// loops' to_bf16); OpenMP threads for large n. Reference: FloatToBf16.
void NarrowToBf16(const float* in, int64_t n, uint16_t* out);

}  // namespace gasloc::kernels

#endif  // GASLOC_WORKER_MODEL_BF16_WIDENING_H_
