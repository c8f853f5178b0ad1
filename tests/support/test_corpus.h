// Where the tests' corpus lives: Tiny Shakespeare, shipped in the
// repository under tests/data/ (provenance, licence and checksum in
// tests/data/README.md), so every test runs on a fresh clone with nothing
// beside the checkout.
//
// Thread safety: constants only.
#ifndef GASLOC_TESTS_SUPPORT_TEST_CORPUS_H_
#define GASLOC_TESTS_SUPPORT_TEST_CORPUS_H_

namespace gasloc::testing {

// 1,115,394 bytes; the documented 0.9 split puts 1,003,854 in training.
inline constexpr char kTinyShakespeare[] =
    GASLOC_SOURCE_DIR "/tests/data/tinyshakespeare.txt";

}  // namespace gasloc::testing

#endif  // GASLOC_TESTS_SUPPORT_TEST_CORPUS_H_
