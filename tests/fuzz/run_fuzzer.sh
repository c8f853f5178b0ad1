#!/usr/bin/env bash
# Runs one libFuzzer target from its committed seed corpus for a while and
# fails if it finds a crash, a sanitizer report, a leak or a hang.
#   tests/fuzz/run_fuzzer.sh BINARY SEED_DIR SECONDS [libFuzzer flags...]
# New inputs go to a temporary corpus (the committed seeds are never
# changed); a crashing input is saved as ./crash-<sha1> (or under
# $GASLOC_FUZZ_ARTIFACTS) for `BINARY crash-<sha1>` to replay. The last
# line printed is "fuzz: NAME executions=N seconds=S" (scripts/fuzz.sh
# sums them).
set -euo pipefail
binary="$1"; seeds="$2"; seconds="$3"; shift 3
name="$(basename "$binary")"
work="$(mktemp -d "${TMPDIR:-/tmp}/gasloc-fuzz.$name.XXXXXX")"
trap 'rm -rf "$work"' EXIT
artifacts="${GASLOC_FUZZ_ARTIFACTS:-$PWD}"
mkdir -p "$artifacts"
log="$work/log"
start=$(date +%s)
rc=0
"$binary" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$artifacts/" "$@" \
  "$work" "$seeds" > "$log" 2>&1 || rc=$?
grep -v '^#[0-9]' "$log" | tail -n 40
executions="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
echo "fuzz: $name executions=${executions:-0} seconds=$(( $(date +%s) - start )) rc=$rc"
exit "$rc"
