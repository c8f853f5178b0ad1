#include "common/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace gasloc {
namespace {

TEST(Utf8, WellFormedTextHasNoInvalidByte) {
  EXPECT_EQ(FirstInvalidUtf8(""), std::nullopt);
  EXPECT_EQ(FirstInvalidUtf8("/usr/share/common-licenses"), std::nullopt);
  // U+00E9, U+20AC, U+10FFFF (the largest code point), U+D7FF, U+E000.
  EXPECT_EQ(FirstInvalidUtf8("\xc3\xa9\xe2\x82\xac\xf4\x8f\xbf\xbf"
                             "\xed\x9f\xbf\xee\x80\x80"),
            std::nullopt);
}

TEST(Utf8, NamesTheFirstBadByte) {
  struct Case {
    std::string text;
    size_t first_bad;
  };
  const Case cases[] = {
      {"ab\xff", 2},                  // never a UTF-8 byte
      {"a\x80", 1},                   // continuation without a lead
      {"\xc0\xaf", 0},                // overlong '/'
      {"\xe0\x80\xaf", 0},            // overlong, 3 bytes
      {"\xf0\x80\x80\xaf", 0},        // overlong, 4 bytes
      {"ok\xed\xa0\x80", 2},          // surrogate U+D800
      {"\xf4\x90\x80\x80", 0},        // above U+10FFFF
      {"x\xe2\x82", 1},               // cut short
      {"\xc3\xa9\xc3", 2},            // cut short after a good one
      {"\xe2\x28\xa1", 0},            // bad continuation
  };
  for (const Case& c : cases)
    EXPECT_EQ(FirstInvalidUtf8(c.text), c.first_bad) << c.first_bad;
}

}  // namespace
}  // namespace gasloc
