#!/usr/bin/env bash
# README command 2: installs everything, builds, and runs the whole test
# suite with ctest. Exits non-zero if anything fails.
#   bash scripts/test.sh            (add -R REGEX etc. to pass to ctest)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
preset=release
if [ "${CI:-}" = "true" ]; then preset=ci; fi
bash scripts/build.sh "$preset"
# Unit tests in parallel; multi-process tests one at a time (they measure
# deadlines and share two cores).
ctest --preset "$preset" -j "$(nproc)" -LE integration "$@"
ctest --preset "$preset" -L integration "$@"
