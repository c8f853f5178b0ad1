#include "common/arena.h"

#include <cstdint>

#include "gtest/gtest.h"

namespace gasloc {
namespace {

std::shared_ptr<const ArenaLayout> TwoTensors() {
  return std::make_shared<ArenaLayout>(std::vector<TensorSpec>{
      {"w", {3, 5}, true}, {"b", {7}, false}});
}

TEST(Arena, LaysOutAlignedTensorsInOrder) {
  auto layout = TwoTensors();
  ASSERT_EQ(layout->entries().size(), 2u);
  EXPECT_EQ(layout->entries()[0].offset, 0u);
  EXPECT_EQ(layout->entries()[0].size, 15u);
  EXPECT_EQ(layout->entries()[1].offset, 16u);
  EXPECT_EQ(layout->total_floats(), 32u);
  EXPECT_EQ(layout->parameter_count(), 22u);
  auto b = layout->Find("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->offset, 16u);
  EXPECT_EQ(layout->Find("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST(Arena, BuffersAreAlignedZeroedAndCopyable) {
  FloatArena a(TwoTensors());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
  for (float x : a.flat()) EXPECT_EQ(x, 0.0f);
  a.view(1)[3] = 2.5f;
  EXPECT_EQ(a.data()[16 + 3], 2.5f);
  FloatArena b = a;
  EXPECT_EQ(b.data()[19], 2.5f);
  EXPECT_NE(b.data(), a.data());
}

TEST(Arena, FingerprintChangesWithShapes) {
  ArenaLayout x({{"w", {3, 5}, true}});
  ArenaLayout y({{"w", {5, 3}, true}});
  ArenaLayout z({{"w", {3, 5}, true}});
  EXPECT_NE(x.fingerprint(), y.fingerprint());
  EXPECT_EQ(x.fingerprint(), z.fingerprint());
}

}  // namespace
}  // namespace gasloc
