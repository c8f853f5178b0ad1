#include "common/crc32c.h"

#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gasloc {
namespace {

TEST(Crc32c, KnownVectors) {
  // RFC 3720 (iSCSI) appendix B.4 test vectors.
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF), inc(32);
  for (int i = 0; i < 32; ++i) inc[i] = static_cast<uint8_t>(i);
  EXPECT_EQ(Crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), 32), 0x62A8AB43u);
  EXPECT_EQ(Crc32c(inc.data(), 32), 0x46DD794Eu);
  const std::string s = "123456789";
  EXPECT_EQ(Crc32c(s.data(), s.size()), 0xE3069283u);
}

TEST(Crc32c, FastPathMatchesReferenceAndExtends) {
  std::mt19937 rng(7);
  // Sizes around and beyond the three-stream blocks (kCrc32cParallelBytes)
  // and their remainders.
  const size_t block = kCrc32cParallelBytes;
  for (size_t size : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9},
                      size_t{63}, size_t{1000}, size_t{4099}, block - 1, block,
                      block + 1, 2 * block + 13, 5 * block + 4099}) {
    std::vector<uint8_t> data(size);
    for (auto& b : data) b = static_cast<uint8_t>(rng());
    const uint32_t whole = Crc32c(data.data(), size);
    EXPECT_EQ(whole, Crc32cReference(data.data(), size)) << size;
    const size_t cut = size / 3;
    EXPECT_EQ(Crc32cExtend(Crc32c(data.data(), cut), data.data() + cut,
                           size - cut),
              whole)
        << size;
  }
}

}  // namespace
}  // namespace gasloc
