#include "worker/train/generate.h"

#include <array>
#include <cmath>
#include <map>

#include "gtest/gtest.h"

namespace gasloc {
namespace {

// A stand-in model whose next-byte logits favour (last byte + 1), so the
// greedy continuation is known; it records the longest prefix it saw.
class CountingModel : public Model {
 public:
  explicit CountingModel(int context)
      : Model({.layers = 1, .d_model = 8, .heads = 1, .context = context},
              std::make_shared<ArenaLayout>(
                  std::vector<TensorSpec>{{"w", {1}, false}})) {}
  absl::StatusOr<float> ForwardBackward(const FloatArena&, const uint8_t*, int,
                                        int, FloatArena*) override {
    return absl::UnimplementedError("generation only");
  }
  absl::StatusOr<float> Forward(const FloatArena&, const uint8_t*, int,
                                int) override {
    return absl::UnimplementedError("generation only");
  }
  absl::Status NextByteLogits(const FloatArena&, const uint8_t* prefix,
                              int length, float* logits) override {
    if (length < 1 || length > config().context)
      return absl::InvalidArgumentError("bad length");
    longest = std::max(longest, length);
    const int next = (prefix[length - 1] + 1) % 256;
    for (int b = 0; b < 256; ++b)
      logits[b] = -0.5f * static_cast<float>(std::abs(b - next));
    return absl::OkStatus();
  }
  double TrainingFlops(int, int) const override { return 0; }
  int longest = 0;
};

TEST(SampleByteTest, GreedyTopKAndTemperature) {
  std::array<float, 256> logits{};
  logits[7] = 3.0f;
  logits[9] = 2.0f;
  logits[200] = 1.0f;
  EXPECT_EQ(SampleByte(logits.data(), 0.0f, 0, 0.99), 7);
  // top_k = 1 is greedy whatever the draw.
  EXPECT_EQ(SampleByte(logits.data(), 1.0f, 1, 0.999), 7);
  // top_k = 2: the weights are e^0 and e^-1; draws split at 1 / (1 + e^-1).
  const double split = 1.0 / (1.0 + std::exp(-1.0));
  EXPECT_EQ(SampleByte(logits.data(), 1.0f, 2, split - 1e-6), 7);
  EXPECT_EQ(SampleByte(logits.data(), 1.0f, 2, split + 1e-6), 9);
  EXPECT_EQ(SampleByte(logits.data(), 1.0f, 2, 0.999999), 9);
  // A high temperature over all bytes reaches the tail.
  std::map<int, int> seen;
  for (int i = 0; i < 100; ++i) ++seen[SampleByte(logits.data(), 100.0f, 0, i / 100.0)];
  EXPECT_GT(seen.size(), 50u);
}

TEST(GenerateTextTest, GreedyContinuationAndContextWindow) {
  CountingModel model(/*context=*/4);
  FloatArena params(model.layout());
  auto text = GenerateText(&model, params, "abcdefgh",
                           {.max_new_bytes = 5, .temperature = 0, .top_k = 0});
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "ijklm");
  EXPECT_EQ(model.longest, 4);  // never more than the context
  auto from_empty = GenerateText(&model, params, "",
                                 {.max_new_bytes = 2, .temperature = 0});
  ASSERT_TRUE(from_empty.ok());
  EXPECT_EQ(*from_empty, "\x0b\x0c");  // starts after "\n"
}

TEST(GenerateTextTest, SeededSamplingIsReproducible) {
  CountingModel model(8);
  FloatArena params(model.layout());
  const GenerateOptions options{.max_new_bytes = 64, .temperature = 2.0f,
                                .top_k = 5, .seed = 11};
  auto a = GenerateText(&model, params, "x", options);
  auto b = GenerateText(&model, params, "x", options);
  GenerateOptions other = options;
  other.seed = 12;
  auto c = GenerateText(&model, params, "x", other);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
  // With top_k = 5 every byte is within 2 of (previous + 1).
  char previous = 'x';
  for (char ch : *a) {
    const int delta = (static_cast<uint8_t>(ch) -
                       (static_cast<uint8_t>(previous) + 1) + 256) % 256;
    EXPECT_TRUE(delta <= 2 || delta >= 254) << delta;
    previous = ch;
  }
}

TEST(GenerateTextTest, RefusesBadOptions) {
  CountingModel model(8);
  FloatArena params(model.layout());
  EXPECT_FALSE(GenerateText(&model, params, "x", {.max_new_bytes = -1}).ok());
  EXPECT_FALSE(GenerateText(&model, params, "x", {.temperature = -1}).ok());
  EXPECT_FALSE(GenerateText(&model, params, "x", {.top_k = 257}).ok());
}

}  // namespace
}  // namespace gasloc
