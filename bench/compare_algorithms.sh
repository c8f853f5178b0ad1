#!/usr/bin/env bash
# Benchmark (b) of docs/benchmarks.md: the outer algorithms side by side on
# the same model, data and token budget per worker. For each corpus it runs
# a local cluster (scripts/local_cluster.sh: real coordinator, real worker
# daemons, real gRPC exchange on loopback) with
#   GASLoC H = 50, DiLoCo H = 50, D-PSGD H = 1, GASLoC H = 1
# and one worker trained alone (gasloc-train) for the same number of steps,
# then prints one Markdown table row per run: final validation bpb (mean of
# the workers' last evaluation, and min..max across workers), wall time and
# tokens per worker. Every run uses a uniform budget (each worker does
# exactly H steps a round) so the token budget per worker is the same.
#
#   bench/compare_algorithms.sh [options] CORPUS...
#     --workers N     workers per cluster (default 4)
#     --steps N       inner steps per worker (default 200; a multiple of 50)
#     --model M       tiny or S (default S)
#     --threads N     compute threads per worker (default 1)
#     --solo-threads N  threads of the worker trained alone (default 2)
#     --lr X --warmup N --seed N   AdamW peak lr (0.002), warmup (20), seed (1)
#     --eval-windows N  validation windows (default 128)
#     --methods LIST  comma list of gasloc50,diloco50,dpsgd1,gasloc1,solo;
#                     gasloc1@ETA/GAMMA (or gasloc50@ETA/GAMMA) runs GASLoC
#                     with that outer step and momentum instead of the
#                     defaults (0.7 / 0.9)
#     --build DIR     build folder (default build/release)
#     --out DIR       run folders and results.jsonl (default runs/compare-<ts>)
set -euo pipefail
cd "$(dirname "$0")/.."

workers=4; steps=200; model=S; threads=1; solo_threads=2
lr=0.002; warmup=20; seed=1; eval_windows=128
methods=gasloc50,diloco50,dpsgd1,gasloc1,solo
build=build/release; out=""
corpora=()
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --solo-threads) solo_threads="$2"; shift 2 ;;
    --lr) lr="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --eval-windows) eval_windows="$2"; shift 2 ;;
    --methods) methods="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    -h|--help) sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "compare_algorithms: unknown option $1" >&2; exit 2 ;;
    *) corpora+=("$1"); shift ;;
  esac
done
[ "${#corpora[@]}" -gt 0 ] || { echo "compare_algorithms: no corpus given" >&2; exit 2; }
if [ $(( steps % 50 )) -ne 0 ]; then
  echo "compare_algorithms: --steps must be a multiple of 50" >&2; exit 2
fi
out="${out:-runs/compare-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"; out="$(realpath "$out")"
results="$out/results.jsonl"
: > "$results"

# cluster_run NAME CORPUS ALGORITHM H [LAUNCHER OPTION...]: one local
# cluster run, one result line.
cluster_run() {
  local name="$1" corpus="$2" algorithm="$3" h="$4"
  shift 4
  local dir="$out/$(basename "$corpus" .txt)-${name//\//_}" start end
  start=$(date +%s.%N)
  scripts/local_cluster.sh --workers "$workers" --algorithm "$algorithm" \
    --local-steps "$h" --rounds $(( steps / h )) --model "$model" \
    --threads "$threads" --lr "$lr" --warmup "$warmup" --seed "$seed" \
    --eval-windows "$eval_windows" --eval-every 0 --uniform-budget \
    --no-sample --build "$build" --run-dir "$dir" "$@" "$corpus" \
    > "$dir.out" 2>&1 || { echo "compare_algorithms: $name failed, see $dir.out" >&2; return 1; }
  end=$(date +%s.%N)
  /usr/bin/python3 - "$dir" "$name" "$corpus" "$h" "$start" "$end" "$workers" \
    >> "$results" <<'PY'
import glob, json, re, sys
d, name, corpus, h, start, end, workers = sys.argv[1:]
job = json.load(open(f"{d}/job-status.json"))
# Each worker logs "... done: loss L, val bpb B, ..." per round; keep the last.
finals = []
for log in sorted(glob.glob(f"{d}/worker*.log")):
    vals = re.findall(r"val bpb ([0-9.]+)", open(log, errors="replace").read())
    vals = [float(v) for v in vals if float(v) > 0]
    if vals: finals.append(vals[-1])
print(json.dumps({
    "corpus": corpus, "method": name, "H": int(h),
    "rounds": int(job.get("rounds_completed", 0)), "state": job.get("state"),
    "tokens_per_worker": int(job.get("tokens", 0)) // int(workers),
    "val_bpb": job.get("val_bpb"), "val_bpb_min": min(finals, default=None),
    "val_bpb_max": max(finals, default=None),
    "wall_s": round(float(end) - float(start), 1),
    "train_s": (int(job.get("ended_unix_ms", 0)) - int(job.get("started_unix_ms", 0))) / 1000}))
PY
}

# solo_run CORPUS: one worker alone for the same number of steps.
solo_run() {
  local corpus="$1" dir="$out/$(basename "$1" .txt)-solo" start end
  mkdir -p "$dir"
  start=$(date +%s.%N)
  # The same shapes local_cluster.sh gives the job for this --model.
  local shape=(--layers=4 --d_model=256 --heads=4 --context=256 --batch=16)
  [ "$model" = tiny ] && shape=(--layers=2 --d_model=128 --heads=4 --context=128 --batch=8)
  OMP_WAIT_POLICY=PASSIVE "$build/server/gasloc-train" train "${shape[@]}" \
    --data="$corpus" --steps="$steps" --threads="$solo_threads" --lr="$lr" \
    --warmup="$warmup" --seed="$seed" --eval_windows="$eval_windows" \
    --eval_every=0 > "$dir.out" 2>&1 ||
    { echo "compare_algorithms: solo failed, see $dir.out" >&2; return 1; }
  end=$(date +%s.%N)
  /usr/bin/python3 - "$dir.out" "$corpus" "$start" "$end" "$steps" "$model" \
    >> "$results" <<'PY'
import json, re, sys
log, corpus, start, end, steps, model = sys.argv[1:]
bpb = [float(v) for v in re.findall(r"val_bpb ([0-9.]+)", open(log).read())]
tokens_per_step = {"S": 16 * 256, "tiny": 8 * 128}[model]
print(json.dumps({
    "corpus": corpus, "method": "solo", "H": int(steps), "rounds": 1,
    "state": "JOB_STATE_FINISHED" if bpb else "FAILED",
    "tokens_per_worker": int(steps) * tokens_per_step,
    "val_bpb": bpb[-1] if bpb else None, "val_bpb_min": None,
    "val_bpb_max": None, "wall_s": round(float(end) - float(start), 1),
    "train_s": None}))
PY
}

for corpus in "${corpora[@]}"; do
  corpus="$(realpath "$corpus")"
  IFS=, read -ra list <<< "$methods"
  for m in "${list[@]}"; do
    echo "compare_algorithms: $(basename "$corpus") $m ($(date +%H:%M:%S), load $(cut -d' ' -f1 /proc/loadavg))"
    case "$m" in
      gasloc50) cluster_run "$m" "$corpus" gasloc 50 ;;
      diloco50) cluster_run "$m" "$corpus" diloco 50 ;;
      dpsgd1) cluster_run "$m" "$corpus" dpsgd 1 ;;
      gasloc1) cluster_run "$m" "$corpus" gasloc 1 ;;
      gasloc1@*/*|gasloc50@*/*)
        spec="${m#*@}"; h="${m%@*}"; h="${h#gasloc}"
        cluster_run "$m" "$corpus" gasloc "$h" --eta "${spec%/*}" --gamma "${spec#*/}" ;;
      solo) solo_run "$corpus" ;;
      *) echo "compare_algorithms: unknown method $m" >&2; exit 2 ;;
    esac
    tail -1 "$results"
  done
done

/usr/bin/python3 - "$results" <<'PY'
import json, os, sys
print("| corpus | method | H | rounds | tokens/worker | final val bpb (mean) | min..max over workers | wall s |")
print("|---|---|---|---|---|---|---|---|")
for line in open(sys.argv[1]):
    r = json.loads(line)
    spread = (f"{r['val_bpb_min']:.4f}..{r['val_bpb_max']:.4f}"
              if r["val_bpb_min"] is not None else "-")
    bpb = f"{r['val_bpb']:.4f}" if r["val_bpb"] else "-"
    print(f"| {os.path.basename(r['corpus'])} | {r['method']} | {r['H']} | "
          f"{r['rounds']} | {r['tokens_per_worker']:,} | {bpb} | {spread} | "
          f"{r['wall_s']} |")
PY
