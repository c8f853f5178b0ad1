// gasloc-bench's flag parser reads Abseil's syntax, like the other binaries:
// `--layers 4` is `--layers=4`.
#include "bench/bench_flags.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gasloc::bench {
namespace {

struct Parsed {
  int layers = 0;
  double lr = 0;
  std::string dtype;
  bool torch = false;
};

// Parses `args` (without the program name) into a fresh Parsed.
bool Parse(std::vector<std::string> args, Parsed* out) {
  args.insert(args.begin(), "gasloc-bench test");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  BenchFlags flags;
  flags.ints = {{"layers", &out->layers}};
  flags.doubles = {{"lr", &out->lr}};
  flags.strings = {{"dtype", &out->dtype}};
  flags.bools = {{"compare-torch", &out->torch}};
  return ParseBenchFlags(static_cast<int>(argv.size()), argv.data(),
                         "gasloc-bench test", "usage\n", flags);
}

TEST(BenchFlagsTest, SpaceSeparatedValuesReadLikeEquals) {
  Parsed a, b, c;
  ASSERT_TRUE(Parse({"--layers", "4", "--dtype", "bf16", "--lr", "0.5"}, &a));
  ASSERT_TRUE(Parse({"--layers=4", "--dtype=bf16", "--lr=0.5"}, &b));
  ASSERT_TRUE(Parse({"-layers", "4", "-dtype=bf16", "--lr", "0.5"}, &c));
  for (const Parsed* p : {&a, &b, &c}) {
    EXPECT_EQ(p->layers, 4);
    EXPECT_EQ(p->dtype, "bf16");
    EXPECT_EQ(p->lr, 0.5);
  }
}

TEST(BenchFlagsTest, BooleansTakeAbseilsForms) {
  Parsed p;
  ASSERT_TRUE(Parse({"--compare-torch", "--layers", "2"}, &p));
  EXPECT_TRUE(p.torch);
  EXPECT_EQ(p.layers, 2);  // a boolean never eats the next argument
  ASSERT_TRUE(Parse({"--compare_torch=false"}, &p));
  EXPECT_FALSE(p.torch);
  ASSERT_TRUE(Parse({"--compare-torch=true", "--nocompare-torch"}, &p));
  EXPECT_FALSE(p.torch);
}

TEST(BenchFlagsTest, MalformedInputIsRefused) {
  Parsed p;
  EXPECT_FALSE(Parse({"--layers"}, &p));           // value missing
  EXPECT_FALSE(Parse({"--layers", "four"}, &p));   // not an integer
  EXPECT_FALSE(Parse({"--depth=4"}, &p));          // unknown
  EXPECT_FALSE(Parse({"layers=4"}, &p));           // not a flag
  EXPECT_FALSE(Parse({"--compare-torch=maybe"}, &p));
}

}  // namespace
}  // namespace gasloc::bench
