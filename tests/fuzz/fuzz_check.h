// GASLOC_FUZZ_CHECK(condition, message): a property of a fuzz target. When
// it does not hold, the target prints the condition and `message` (a
// std::string or string literal) and aborts, which libFuzzer reports as a
// crash and saves the input that caused it (docs/fuzzing.md).
#ifndef GASLOC_TESTS_FUZZ_FUZZ_CHECK_H_
#define GASLOC_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#define GASLOC_FUZZ_CHECK(condition, message)                              \
  do {                                                                     \
    if (!(condition)) {                                                    \
      std::fprintf(stderr, "%s:%d: property failed: %s: %s\n", __FILE__,   \
                   __LINE__, #condition, std::string(message).c_str());    \
      std::abort();                                                        \
    }                                                                      \
  } while (0)

#endif  // GASLOC_TESTS_FUZZ_FUZZ_CHECK_H_
