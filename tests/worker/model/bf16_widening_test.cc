// bf16 widening (worker/model/bf16_widening.h), on every CPU: the flat
// conversion loops against FloatToBf16 / Bf16ToFloat, and a WidenedOperand
// of each kind (a dense block, a transposed view, a view with gaps that
// needs a reorder) round-tripping through its f32 twin.
#include "worker/model/bf16_widening.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace gasloc::kernels {
namespace {

std::vector<float> Values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

TEST(Bf16WideningTest, LoopsMatchTheScalarConversions) {
  // Long enough for the threaded path, plus specials.
  std::vector<float> in = Values(200003, 1);
  in[0] = std::numeric_limits<float>::infinity();
  in[1] = -0.0f;
  in[2] = 1.0f + 1.0f / 256;  // a tie: rounds to even
  in[3] = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint16_t> narrow(in.size());
  NarrowToBf16(in.data(), static_cast<int64_t>(in.size()), narrow.data());
  std::vector<float> wide(in.size());
  WidenBf16(narrow.data(), static_cast<int64_t>(in.size()), wide.data());
  for (size_t i = 0; i < in.size(); ++i) {
    if (std::isnan(in[i])) {
      EXPECT_TRUE(std::isnan(wide[i])) << i;
      continue;
    }
    ASSERT_EQ(narrow[i], FloatToBf16(in[i])) << i << " " << in[i];
    ASSERT_EQ(wide[i], Bf16ToFloat(narrow[i])) << i;
  }
}

// Widen then narrow through the twin gives back the bf16 values, and the
// twin holds them in the caller's index order.
void ExpectRoundTrip(const dnnl::memory::desc& md, bool flat) {
  DnnlEnv env;
  WidenedOperand op(&env, md, /*user_pad=*/false);
  EXPECT_EQ(op.flat(), flat);
  const Dims dims = md.dims();
  std::vector<uint16_t> caller(md.get_size() / 2, 0);
  const std::vector<float> v = Values(caller.size(), 2);
  for (size_t i = 0; i < caller.size(); ++i) caller[i] = FloatToBf16(v[i]);
  std::vector<float> twin(op.floats(), 0.0f);
  dnnl::memory caller_mem(md, env.engine, caller.data());
  dnnl::memory twin_mem(op.f32_md(), env.engine, twin.data());
  op.Widen(env.stream, caller_mem, twin_mem, nullptr);
  env.stream.wait();
  // Element (i, j) of the view in both.
  const auto& cs = md.data.format_desc.blocking.strides;
  const auto& ts = op.f32_md().data.format_desc.blocking.strides;
  for (int64_t i = 0; i < dims[0]; ++i)
    for (int64_t j = 0; j < dims[1]; ++j)
      ASSERT_EQ(twin[i * ts[0] + j * ts[1]],
                Bf16ToFloat(caller[i * cs[0] + j * cs[1]]))
          << i << "," << j;
  std::vector<uint16_t> back(caller.size(), 0);
  dnnl::memory back_mem(md, env.engine, back.data());
  op.Narrow(env.stream, twin_mem, back_mem, nullptr);
  env.stream.wait();
  for (int64_t i = 0; i < dims[0]; ++i)
    for (int64_t j = 0; j < dims[1]; ++j)
      ASSERT_EQ(back[i * cs[0] + j * cs[1]], caller[i * cs[0] + j * cs[1]]);
}

TEST(Bf16WideningTest, DenseBlockIsFlat) {
  ExpectRoundTrip(PlainMd({7, 13}, dt::bf16), /*flat=*/true);
}

TEST(Bf16WideningTest, TransposedViewIsFlat) {
  ExpectRoundTrip(StridedMd({13, 7}, dt::bf16, {1, 13}), /*flat=*/true);
}

TEST(Bf16WideningTest, ViewWithGapsGoesThroughAReorder) {
  // Rows of 5 out of 8: not a permutation of a dense block.
  ExpectRoundTrip(StridedMd({6, 5}, dt::bf16, {8, 1}), /*flat=*/false);
}

}  // namespace
}  // namespace gasloc::kernels
