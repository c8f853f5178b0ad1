#!/usr/bin/env bash
# Runs one scenario for several algorithms and seeds with the namespace
# harness, one run after the other, then compares them (docs/heterogeneity.md).
#
#   sudo scripts/netns_sweep.sh SCENARIO.yaml [options]
#     --algorithms "A B"   default "gasloc gasloc-overlap gasloc-uniform diloco dpsgd";
#                          any netns_cluster.py --algorithm, e.g. diloco-h240,
#                          data-parallel
#     --seeds "S T"        default "1 2 3"
#     --dpsgd-rounds N     D-PSGD and data-parallel do one step a round
#                          (default 2400; the scenario's max_wall_seconds
#                          still applies)
#     --report             a reported result (docs/benchmarks.md, "How a
#                          comparison is reported"): refuses tuning seeds
#                          (1 2 3) before running, and the comparison
#                          refuses runs that break the protocol
#     --schedule-horizon H rounds|tokens|seconds|stop for every run (default:
#                          the job spec's rule: STOP with the scenarios'
#                          max_wall_seconds, so D-PSGD anneals by the clock)
#     --out DIR            default runs/sweep-<scenario>-<time>; each run in
#                          DIR/<algorithm>-s<seed>, the comparison in DIR/compare
#     --build DIR          passed to the harness
#     --reference A        the comparison's baseline (default diloco)
# A failed run is reported and skipped; the exit code is 1 if any failed.
set -euo pipefail
cd "$(dirname "$0")/.."

algorithms="gasloc gasloc-overlap gasloc-uniform diloco dpsgd"
seeds="1 2 3"
dpsgd_rounds=2400
out=""
build_args=()
horizon_args=()
compare_args=()
reference_args=()
scenario=""
while [ $# -gt 0 ]; do
  case "$1" in
    --algorithms) algorithms="$2"; shift 2 ;;
    --seeds) seeds="$2"; shift 2 ;;
    --dpsgd-rounds) dpsgd_rounds="$2"; shift 2 ;;
    --schedule-horizon) horizon_args=(--schedule-horizon "$2"); shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --report) compare_args=(--report); shift ;;
    --build) build_args=(--build "$2"); shift 2 ;;
    --reference) reference_args=(--reference "$2"); shift 2 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "netns_sweep: unknown option $1" >&2; exit 2 ;;
    *) scenario="$1"; shift ;;
  esac
done
[ -n "$scenario" ] || { echo "netns_sweep: a scenario file is required" >&2; exit 2; }
[ -f "$scenario" ] || { echo "netns_sweep: scenario $scenario does not exist" >&2; exit 2; }
if [ "${#compare_args[@]}" -gt 0 ]; then
  for seed in $seeds; do
    case " 1 2 3 " in *" $seed "*)
      echo "netns_sweep: --report: seed $seed is a tuning seed (1 2 3); report on others" >&2
      exit 2 ;;
    esac
  done
fi
name="$(basename "$scenario" .yaml)"
out="${out:-runs/sweep-$name-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"

failed=0
runs=()
for seed in $seeds; do
  for algorithm in $algorithms; do
    extra=()
    case "$algorithm" in
      dpsgd|data-parallel) extra=(--rounds "$dpsgd_rounds") ;;
    esac
    dir="$out/$algorithm-s$seed"
    echo "netns_sweep: $name $algorithm seed $seed -> $dir"
    if python3 scripts/netns_cluster.py "$scenario" --algorithm "$algorithm" \
        --seed "$seed" --out "$dir" "${build_args[@]}" "${horizon_args[@]}" \
        "${extra[@]}"; then
      runs+=("$dir")
    else
      echo "netns_sweep: $algorithm seed $seed failed (exit $?); see $dir/logs" >&2
      failed=1
    fi
  done
done
if [ "${#runs[@]}" -gt 0 ]; then
  python3 scripts/netns_compare.py "${runs[@]}" --out "$out/compare" \
    "${compare_args[@]}" "${reference_args[@]}" || failed=1
fi
exit "$failed"
