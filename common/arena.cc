#include "common/arena.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "absl/strings/str_cat.h"

namespace gasloc {
namespace {

uint64_t Fnv1a(uint64_t hash, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < size; ++i) {
    hash ^= p[i];
    hash *= 1099511628211ull;
  }
  return hash;
}

}  // namespace

ArenaLayout::ArenaLayout(std::vector<TensorSpec> tensors) {
  uint64_t hash = 14695981039346656037ull;
  size_t offset = 0;
  for (auto& spec : tensors) {
    Entry entry;
    entry.size = 1;
    for (int64_t dim : spec.shape) entry.size *= static_cast<size_t>(dim);
    entry.offset = offset;
    hash = Fnv1a(hash, spec.name.data(), spec.name.size());
    hash = Fnv1a(hash, spec.shape.data(), spec.shape.size() * sizeof(int64_t));
    hash = Fnv1a(hash, &entry.offset, sizeof(entry.offset));
    parameter_count_ += entry.size;
    offset += (entry.size + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
    entry.spec = std::move(spec);
    entries_.push_back(std::move(entry));
  }
  total_floats_ = offset;
  fingerprint_ = Fnv1a(hash, &total_floats_, sizeof(total_floats_));
}

absl::StatusOr<const ArenaLayout::Entry*> ArenaLayout::Find(
    absl::string_view name) const {
  for (const Entry& entry : entries_) {
    if (entry.spec.name == name) return &entry;
  }
  return absl::NotFoundError(absl::StrCat("no tensor named ", name));
}

void FloatArena::FreeDeleter::operator()(float* p) const { std::free(p); }

FloatArena::FloatArena(std::shared_ptr<const ArenaLayout> layout)
    : layout_(std::move(layout)) {
  const size_t bytes =
      std::max<size_t>(64, (layout_->total_floats() * sizeof(float) + 63) / 64 * 64);
  float* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  if (p == nullptr) throw std::bad_alloc();
  data_.reset(p);
  SetZero();
}

FloatArena::FloatArena(const FloatArena& other) : FloatArena(other.layout_) {
  CopyFrom(other);
}

FloatArena& FloatArena::operator=(const FloatArena& other) {
  if (this != &other) {
    if (layout_ != other.layout_) *this = FloatArena(other.layout_);
    CopyFrom(other);
  }
  return *this;
}

std::span<float> FloatArena::view(size_t index) {
  const auto& e = layout_->entries()[index];
  return {data() + e.offset, e.size};
}

std::span<const float> FloatArena::view(size_t index) const {
  const auto& e = layout_->entries()[index];
  return {data() + e.offset, e.size};
}

void FloatArena::SetZero() { std::memset(data(), 0, size() * sizeof(float)); }

void FloatArena::CopyFrom(const FloatArena& other) {
  std::memcpy(data(), other.data(), size() * sizeof(float));
}

}  // namespace gasloc
