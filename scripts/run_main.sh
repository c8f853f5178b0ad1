#!/usr/bin/env bash
# README command 1: installs everything, builds, and runs the main job: a
# local coordinator plus workers training a model end to end on a corpus.
#   bash scripts/run_main.sh [local_cluster.sh options] [CORPUS]
#   (default corpus: /usr/share/common-licenses, on every Debian system)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bash scripts/build.sh release
exec bash scripts/local_cluster.sh "$@"
