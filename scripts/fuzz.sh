#!/usr/bin/env bash
# Builds the fuzz preset and runs its libFuzzer targets (docs/fuzzing.md).
#   bash scripts/fuzz.sh                      every target for 300 s, 2 at a time
#   bash scripts/fuzz.sh --seconds 60 mailbox_fuzzer coordinator_fuzzer
#   bash scripts/fuzz.sh --jobs 1             one target at a time
#   bash scripts/fuzz.sh --write-seeds        rewrite tests/fuzz/corpus/*
#                                             from the targets' WriteSeeds
# Each run starts from the committed seeds (never modified); crashing
# inputs and each target's log go to runs/fuzz-<UTC time>/. Prints one line
# per target and the total number of executions; exits non-zero if any
# target found a crash, a sanitizer report, a leak or a hang.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=300
jobs=2
write_seeds=false
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --write-seeds) write_seeds=true; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown flag $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
bash scripts/install_deps.sh > /dev/null
bash scripts/build.sh fuzz
bin=build/fuzz/tests/fuzz
if [ "${#targets[@]}" -eq 0 ]; then
  for source in tests/fuzz/*_fuzzer.cc; do
    targets+=("$(basename "$source" .cc)")
  done
fi

if [ "$write_seeds" = true ]; then
  for t in "${targets[@]}"; do
    rm -rf "tests/fuzz/corpus/$t"
    mkdir -p "tests/fuzz/corpus/$t"
    GASLOC_FUZZ_WRITE_SEEDS="tests/fuzz/corpus/$t" "$bin/$t"
    echo "fuzz.sh: $(ls "tests/fuzz/corpus/$t" | wc -l) seeds in tests/fuzz/corpus/$t"
  done
  exit 0
fi

out="runs/fuzz-$(date -u +%Y%m%dT%H%M%SZ)"
mkdir -p "$out"
isa="$(grep -o -m1 -w 'amx_bf16' /proc/cpuinfo || grep -o -m1 -w 'avx512_bf16' /proc/cpuinfo || echo 'no avx512_bf16')"
echo "fuzz.sh: ${#targets[@]} target(s), ${seconds} s each, ${jobs} at a time;" \
     "CPU $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1) ($isa), $(nproc) cores; logs in $out"
export LSAN_OPTIONS="suppressions=$PWD/tests/support/lsan.supp"
export GASLOC_FUZZ_ARTIFACTS="$PWD/$out"
pids=()
for t in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
  echo "fuzz.sh: started $t"
  bash tests/fuzz/run_fuzzer.sh "$bin/$t" "tests/fuzz/corpus/$t" "$seconds" \
    > "$out/$t.log" 2>&1 &
  pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=$((failed + 1)); done

total=0
for t in "${targets[@]}"; do
  line="$(grep '^fuzz: ' "$out/$t.log" | tail -n 1)"
  echo "${line:-fuzz: $t did not finish}"
  n="$(sed -n 's/.*executions=\([0-9]*\).*/\1/p' <<< "$line")"
  total=$((total + ${n:-0}))
done
crashes="$(find "$out" -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' | wc -l)"
echo "fuzz.sh: total executions=$total, failed targets=$failed, saved inputs=$crashes ($out)"
[ "$failed" -eq 0 ]
