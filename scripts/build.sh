#!/usr/bin/env bash
# Configures and builds gasloc with a CMake preset (default: release; CI
# builds use "ci", which adds -Werror). Usage: scripts/build.sh [PRESET]
set -euo pipefail
cd "$(dirname "$0")/.."
preset="${1:-release}"
cmake --preset "$preset" > /dev/null
cmake --build --preset "$preset" -j "$(nproc)"
