// The byte format of the fuzz targets that read a sequence of operations
// (mailbox, coordinator, model fetch): a FuzzInput reads fixed-size
// little-endian integers and length-prefixed blobs front to back, and
// returns zeros once the input is used up; a FuzzOutput writes the same
// format, so tests/fuzz/make_fuzz_seeds.cc can build meaningful seed inputs
// (libFuzzer's FuzzedDataProvider reads integers from the back, which makes
// hand-built seeds awkward).
//
// Thread safety: none needed; one per fuzz input.
#ifndef GASLOC_TESTS_FUZZ_FUZZ_BYTES_H_
#define GASLOC_TESTS_FUZZ_FUZZ_BYTES_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace gasloc::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return pos_ >= size_; }

  template <typename T>
  T Take() {
    T value{};
    const size_t n = sizeof(T) <= size_ - pos_ ? sizeof(T) : size_ - pos_;
    std::memcpy(&value, data_ + pos_, n);
    pos_ += n;
    return value;
  }
  // A value in [lo, hi] (hi >= lo).
  uint64_t TakeInRange(uint64_t lo, uint64_t hi) {
    const uint64_t span = hi - lo + 1;
    const uint32_t raw = Take<uint32_t>();
    return span == 0 ? raw : lo + raw % span;
  }
  bool TakeBool() { return (Take<uint8_t>() & 1) != 0; }
  // A blob written by FuzzOutput::PutBlob: a uint32 length, then the bytes
  // (cut short at the end of the input).
  std::string_view TakeBlob(size_t max_bytes) {
    size_t n = Take<uint32_t>();
    if (n > max_bytes) n = max_bytes;
    if (n > size_ - pos_) n = size_ - pos_;
    std::string_view blob(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return blob;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

class FuzzOutput {
 public:
  template <typename T>
  void Put(T value) {
    bytes_.append(reinterpret_cast<const char*>(&value), sizeof(value));
  }
  // The raw value TakeInRange(lo, hi) maps to `value`.
  void PutInRange(uint64_t lo, uint64_t value) {
    Put<uint32_t>(static_cast<uint32_t>(value - lo));
  }
  void PutBool(bool value) { Put<uint8_t>(value ? 1 : 0); }
  void PutBlob(std::string_view blob) {
    Put<uint32_t>(static_cast<uint32_t>(blob.size()));
    bytes_.append(blob);
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

}  // namespace gasloc::fuzz

#endif  // GASLOC_TESTS_FUZZ_FUZZ_BYTES_H_
