#!/usr/bin/env bash
# bf16 emulation against fp32 and native bf16, in one invocation on one
# build (docs/training.md, "Precision on every CPU"): gasloc-train runs the
# same model, data, seeds and schedule as
#   fp32      ONEDNN_MAX_CPU_ISA=AVX2 + GASLOC_ELEMENTWISE_ISA=avx2 (an
#             AVX2-only CPU's fp32)
#   bf16-emu  the same cap, --precision=bf16 (bf16 emulated)
#   bf16      no cap, --precision=bf16 (native where this CPU has bf16
#             matmuls; skipped on an AVX2-only CPU, where it is bf16-emu)
# and prints each run's final validation bpb and median ms/step, then per
# seed the relative bpb difference of bf16-emu against fp32.
#
#   bash bench/bf16_emulation.sh [--steps N] [--seeds "1 2 3"] [--preset P]
#                                [--data FILE] [--out DIR]
# Default: preset TINY, 1000 steps, seeds 1 2 3, tests/data/tinyshakespeare.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=1000 seeds="1 2 3" preset=TINY data=tests/data/tinyshakespeare.txt
out=runs/bf16_emulation
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps="$2"; shift 2 ;;
    --seeds) seeds="$2"; shift 2 ;;
    --preset) preset="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "bf16_emulation.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
train=build/release/server/gasloc-train
[ -x "$train" ] || { echo "bf16_emulation.sh: build first (scripts/build.sh)" >&2; exit 1; }
mkdir -p "$out"
build/release/bench/gasloc-bench cpu | head -1

# run NAME SEED CAP(yes|no) PRECISION: trains and prints "NAME seed S bpb B ms M".
run() {
  local name=$1 seed=$2 cap=$3 precision=$4 log="$out/$1-seed$2.log"
  local env=()
  if [ "$cap" = yes ]; then env=(ONEDNN_MAX_CPU_ISA=AVX2 GASLOC_ELEMENTWISE_ISA=avx2); fi
  env "${env[@]}" "$train" train --data="$data" --preset="$preset" \
    --precision="$precision" --steps="$steps" --seed="$seed" \
    --eval_every="$steps" --eval_windows=256 --log_every=50 > "$log" 2>&1
  local bpb ms
  bpb=$(grep -o 'val_bpb [0-9.]*' "$log" | tail -1 | cut -d' ' -f2)
  ms=$(grep -o 'ms/step [0-9.]*' "$log" | cut -d' ' -f2 | sort -n |
       awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
  echo "$name seed $seed bpb $bpb ms/step $ms ($(grep -o 'compute: .*' "$log" | cut -d'(' -f1))"
}

native=$(build/release/bench/gasloc-bench cpu | grep -o '"bf16": "[a-z]*"' | cut -d'"' -f4)
for seed in $seeds; do
  run fp32 "$seed" yes fp32
  run bf16-emu "$seed" yes bf16
  if [ "$native" = native ]; then run bf16 "$seed" no bf16; fi
done | tee "$out/summary.txt"
echo "bf16-emu vs fp32, relative final bpb difference per seed:"
awk '/^fp32 /{f[$3]=$5} /^bf16-emu /{e[$3]=$5}
     END {for (s in f) if (s in e) printf "  seed %s: %+.2f%%\n", s, 100*(e[s]-f[s])/f[s]}' \
  "$out/summary.txt"
