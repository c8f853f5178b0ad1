// The model arena: a table of named tensors laid out in one flat, 64-byte
// aligned float buffer (llm.c's malloc_and_point_parameters). Parameters,
// gradients, AdamW moments, outer-optimizer buffers, checkpoints and wire
// transfers all use the same layout, so each of them is one loop over a
// flat vector and an element index means the same thing everywhere.
//
// ArenaLayout is immutable after construction: share it freely across
// threads. FloatArena is a plain buffer: concurrent reads are fine, writes
// need external synchronisation (the owner's).
#ifndef GASLOC_COMMON_ARENA_H_
#define GASLOC_COMMON_ARENA_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gasloc {

struct TensorSpec {
  std::string name;              // e.g. "blocks.3.attn.qkv.weight"
  std::vector<int64_t> shape;    // row-major, e.g. {3 * d, d}
  bool weight_decay = false;     // AdamW decays it (2-D weights only)
};

class ArenaLayout {
 public:
  // Every tensor starts at a multiple of kAlignFloats elements; the gaps
  // are padding that stays zero.
  static constexpr size_t kAlignFloats = 16;

  struct Entry {
    TensorSpec spec;
    size_t offset = 0;  // first element, in floats
    size_t size = 0;    // elements (product of shape)
  };

  explicit ArenaLayout(std::vector<TensorSpec> tensors);

  const std::vector<Entry>& entries() const { return entries_; }
  // Total floats including padding.
  size_t total_floats() const { return total_floats_; }
  // Floats that belong to tensors (excludes padding).
  size_t parameter_count() const { return parameter_count_; }
  // NOT_FOUND naming `name` if absent.
  absl::StatusOr<const Entry*> Find(absl::string_view name) const;
  // A stable 64-bit hash of names, shapes and offsets: two processes agree
  // on the layout iff their fingerprints match (checked by checkpoints and
  // by the exchange).
  uint64_t fingerprint() const { return fingerprint_; }

 private:
  std::vector<Entry> entries_;
  size_t total_floats_ = 0;
  size_t parameter_count_ = 0;
  uint64_t fingerprint_ = 0;
};

// One zero-initialised, 64-byte aligned allocation laid out by a layout.
class FloatArena {
 public:
  explicit FloatArena(std::shared_ptr<const ArenaLayout> layout);
  FloatArena(const FloatArena& other);
  FloatArena& operator=(const FloatArena& other);
  FloatArena(FloatArena&&) noexcept = default;
  FloatArena& operator=(FloatArena&&) noexcept = default;

  const ArenaLayout& layout() const { return *layout_; }
  const std::shared_ptr<const ArenaLayout>& shared_layout() const {
    return layout_;
  }
  float* data() { return data_.get(); }
  const float* data() const { return data_.get(); }
  size_t size() const { return layout_->total_floats(); }
  std::span<float> flat() { return {data(), size()}; }
  std::span<const float> flat() const { return {data(), size()}; }
  // The view of entry `index` (position in layout().entries()).
  std::span<float> view(size_t index);
  std::span<const float> view(size_t index) const;
  void SetZero();
  void CopyFrom(const FloatArena& other);  // same layout required

 private:
  struct FreeDeleter {
    void operator()(float* p) const;
  };
  std::shared_ptr<const ArenaLayout> layout_;
  std::unique_ptr<float[], FreeDeleter> data_;
};

}  // namespace gasloc

#endif  // GASLOC_COMMON_ARENA_H_
