#include "worker/model/transformer_workspace.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace gasloc {

namespace {
size_t Aligned(size_t bytes) { return (bytes + 63) / 64 * 64; }
}  // namespace

absl::Status TransformerWorkspace::Allocate(const ModelConfig& config,
                                            int max_batch, kernels::dt cdt,
                                            int first_block, int end_block) {
  const size_t M = static_cast<size_t>(max_batch) * config.context;
  const size_t C = config.d_model, H = config.heads, V = kVocabSize;
  const size_t f32 = 4, c = kernels::DtSize(cdt);
  // Two passes: list (pointer, bytes) in allocation order, then assign.
  std::vector<std::pair<void**, size_t>> slots;
  auto add = [&](auto** p, size_t bytes) {
    slots.push_back({reinterpret_cast<void**>(p), bytes});
  };
  x.assign(config.layers + 1, nullptr);
  blocks.assign(config.layers, Block{});
  for (int l = first_block; l <= end_block; ++l) add(&x[l], f32 * M * C);
  for (int l = first_block; l < end_block; ++l) {
    Block& b = blocks[l];
    add(&b.ln1_mean, f32 * M);
    add(&b.ln1_var, f32 * M);
    add(&b.ln2_mean, f32 * M);
    add(&b.ln2_var, f32 * M);
    add(&b.ln1_out, c * M * C);
    add(&b.qkv_heads, c * M * 3 * C);
    add(&b.attn_out, c * M * C);
    add(&b.x_mid, f32 * M * C);
    add(&b.ln2_out, c * M * C);
    add(&b.gelu_saved, c * M * 4 * C);
    add(&b.gelu_out, c * M * 4 * C);
    add(&b.attn_lse, f32 * M * H);
  }
  add(&lnf_mean, f32 * M);
  add(&lnf_var, f32 * M);
  add(&lnf_out, c * M * C);
  add(&logits, f32 * M * V);
  if (cdt == kernels::dt::bf16) {
    add(&dlogits_bf16, c * M * V);
    add(&dx_bf16, c * M * C);
  }
  add(&dx[0], f32 * M * C);
  add(&dx[1], f32 * M * C);
  add(&dx_mid, f32 * M * C);
  add(&dln_out, f32 * M * C);
  add(&dgelu_out, c * M * 4 * C);
  add(&dfc_out, c * M * 4 * C);
  add(&dqkv, c * M * 3 * C);
  add(&qkv_out, c * M * 3 * C);
  add(&attn_heads, c * M * C);
  add(&dattn_heads, c * M * C);
  add(&dqkv_heads, c * M * 3 * C);
  add(&dattn_out, c * M * C);

  size_t total = 0;
  for (const auto& [p, bytes] : slots) total += Aligned(bytes);
  memory_.reset(static_cast<char*>(std::aligned_alloc(64, total)));
  if (memory_ == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("model workspace of ", total, " bytes"));
  }
  bytes_ = total;
  size_t offset = 0;
  for (const auto& [p, bytes] : slots) {
    *p = memory_.get() + offset;
    offset += Aligned(bytes);
  }
  return absl::OkStatus();
}

}  // namespace gasloc
