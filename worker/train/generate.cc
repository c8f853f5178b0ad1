#include "worker/train/generate.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/train/data.h"

namespace gasloc {

int SampleByte(const float* logits, float temperature, int top_k,
               double uniform) {
  std::array<int, kVocabSize> order;
  std::iota(order.begin(), order.end(), 0);
  // Most likely first; ties broken by the smaller byte value.
  std::stable_sort(order.begin(), order.end(),
                   [logits](int a, int b) { return logits[a] > logits[b]; });
  if (temperature <= 0.0f) return order[0];
  const int k = top_k <= 0 ? kVocabSize : std::min(top_k, kVocabSize);
  std::array<double, kVocabSize> weight;
  const double top = logits[order[0]];
  double total = 0;
  for (int i = 0; i < k; ++i) {
    weight[i] = std::exp((logits[order[i]] - top) / temperature);
    total += weight[i];
  }
  double target = uniform * total;
  for (int i = 0; i < k; ++i) {
    target -= weight[i];
    if (target < 0) return order[i];
  }
  return order[k - 1];
}

absl::StatusOr<std::string> GenerateText(Model* model, const FloatArena& params,
                                         absl::string_view prompt,
                                         const GenerateOptions& options) {
  if (options.max_new_bytes < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "generate: max_new_bytes must be >= 0, got ", options.max_new_bytes));
  }
  if (!(options.temperature >= 0.0f) || !std::isfinite(options.temperature)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "generate: temperature must be >= 0, got ", options.temperature));
  }
  if (options.top_k < 0 || options.top_k > kVocabSize) {
    return absl::InvalidArgumentError(absl::StrCat(
        "generate: top_k must be in [0, 256], got ", options.top_k));
  }
  std::vector<uint8_t> text(prompt.begin(), prompt.end());
  if (text.empty()) text.push_back('\n');
  const size_t context = static_cast<size_t>(model->config().context);
  std::string out;
  std::array<float, kVocabSize> logits;
  uint64_t state = SplitMix64(options.seed);
  for (int i = 0; i < options.max_new_bytes; ++i) {
    const size_t length = std::min(text.size(), context);
    RETURN_IF_ERROR(model->NextByteLogits(params,
                                          text.data() + text.size() - length,
                                          static_cast<int>(length),
                                          logits.data()));
    state = SplitMix64(state);
    const double uniform = static_cast<double>(state >> 11) * 0x1.0p-53;
    const int byte =
        SampleByte(logits.data(), options.temperature, options.top_k, uniform);
    text.push_back(static_cast<uint8_t>(byte));
    out.push_back(static_cast<char>(byte));
  }
  return out;
}

}  // namespace gasloc
