#!/usr/bin/env bash
# Checks that a fuzz target's committed seed corpus is what the target
# writes today (tests/fuzz/fuzz_seeds.h), so the seeds still reach past the
# first checks after a format change.
#   tests/fuzz/check_seeds.sh BINARY SEED_DIR
# Regenerate: scripts/fuzz.sh --write-seeds
set -euo pipefail
binary="$1"; seeds="$2"
fresh="$(mktemp -d "${TMPDIR:-/tmp}/gasloc-seeds.XXXXXX")"
trap 'rm -rf "$fresh"' EXIT
GASLOC_FUZZ_WRITE_SEEDS="$fresh" "$binary"
if ! diff -r "$seeds" "$fresh"; then
  echo "check_seeds: $seeds differs from what $(basename "$binary") writes;" \
       "run scripts/fuzz.sh --write-seeds and commit the result" >&2
  exit 1
fi
echo "check_seeds: $(ls "$fresh" | wc -l) seeds of $(basename "$binary") current"
