#!/usr/bin/env bash
# README command 2: installs everything, builds, and runs the whole test
# suite with ctest. Exits non-zero if anything fails.
#   bash scripts/test.sh                 unit tests (twice: also with the
#                                        instruction set capped to AVX2)
#                                        + integration tests
#   bash scripts/test.sh --sanitizers    also builds the asan preset
#                                        (AddressSanitizer + UBSan) and runs
#                                        the unit tests under it, and the
#                                        fuzz preset (clang, libFuzzer) and
#                                        runs each fuzz target for 20 s
#                                        from its seeds (CI does both)
#   bash scripts/test.sh -R REGEX ...    anything else is passed to ctest
set -euo pipefail
cd "$(dirname "$0")/.."
sanitizers=false
ctest_args=()
for arg in "$@"; do
  case "$arg" in
    --sanitizers) sanitizers=true ;;
    *) ctest_args+=("$arg") ;;
  esac
done
bash scripts/install_deps.sh
preset=release
if [ "${CI:-}" = "true" ]; then preset=ci; fi
bash scripts/build.sh "$preset"
# Unit tests in parallel; multi-process tests one at a time (they measure
# deadlines and share two cores).
ctest --preset "$preset" -j "$(nproc)" -LE integration "${ctest_args[@]}"
# Every instruction-set path on any machine: the unit tests again as on an
# AVX2-only CPU (oneDNN capped by ONEDNN_MAX_CPU_ISA, the project's own
# vector loops by GASLOC_ELEMENTWISE_ISA; docs/training.md), so bf16
# emulation is tested on AVX-512 and AMX machines too.
echo "test.sh: unit tests with the instruction set capped to AVX2"
ONEDNN_MAX_CPU_ISA=AVX2 GASLOC_ELEMENTWISE_ISA=avx2 \
  ctest --preset "$preset" -j "$(nproc)" -LE integration "${ctest_args[@]}"
ctest --preset "$preset" -L integration "${ctest_args[@]}"
if [ "$sanitizers" = true ]; then
  echo "test.sh: unit tests under AddressSanitizer + UBSan (preset asan)"
  bash scripts/build.sh asan
  # Third-party leaks that live until exit (tests/support/lsan.supp says why).
  LSAN_OPTIONS="suppressions=$PWD/tests/support/lsan.supp" \
    ctest --preset asan -j "$(nproc)" -LE integration "${ctest_args[@]}"
  echo "test.sh: fuzz targets, briefly (preset fuzz; docs/fuzzing.md)"
  bash scripts/build.sh fuzz
  ctest --preset fuzz -j "$(nproc)" "${ctest_args[@]}"
fi
