// The gasloc release version, reported by every binary (--version) and sent
// by workers when they register.
#ifndef GASLOC_COMMON_VERSION_H_
#define GASLOC_COMMON_VERSION_H_

namespace gasloc {
inline constexpr char kGaslocVersion[] = "0.1.0";
}  // namespace gasloc

#endif  // GASLOC_COMMON_VERSION_H_
