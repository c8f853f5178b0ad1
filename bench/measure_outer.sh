#!/usr/bin/env bash
# The outer algorithms measured as a reviewer would (issue 15 item 3), the
# successor of bench/compare_algorithms.sh. For each corpus and each
# configuration it runs a local cluster (scripts/local_cluster.sh: real
# coordinator, worker daemons and gRPC exchange on loopback) once per seed,
# every worker doing the same number of inner steps (uniform budget, so the
# same tokens), and evaluates every few rounds:
#   - each worker's validation bpb (its round reports, from the logs),
#   - the average model's bpb and the exact consensus distance
#     (1/n) sum_i ||theta_i - theta_bar||^2, from the checkpoints the
#     workers write at every evaluation (gasloc-bench consensus),
#   - tokens (all workers) and wall-clock seconds since the job's first
#     round started (evaluation time included).
# "solo" is one worker trained alone (gasloc-train) for as many steps as
# the whole cluster (the same total tokens), evaluated at the same token
# counts. Writes, under --out:
#   curves.csv    one row per (corpus, config, seed, evaluation)
#   summary.csv   mean and sample standard deviation over the seeds
#   final.md      the last evaluation per (corpus, config) as a table
#   paired.md     with --reference: every configuration against it, seed by
#                 seed (scripts/equal_tokens_report.py: paired gaps with
#                 95% intervals, the non-inferiority verdict, bytes sent)
#   <corpus>-bpb-tokens.png, <corpus>-bpb-wall.png, <corpus>-consensus.png
#                 the curves with the seeds' spread as error bars (gnuplot)
#
#   bench/measure_outer.sh [options] [CORPUS...]
#     CORPUS          text files (default tests/data/tinyshakespeare.txt)
#     --configs LIST  comma list of ALGO<H>[@ETA/GAMMA][+PLACEMENT][+2p]
#                     [+ENCODING][+lrX] and solo, ALGO one of gasloc, diloco, dpsgd,
#                     localsgd (default gasloc50,diloco50,dpsgd1,gasloc1,
#                     solo); @ETA/GAMMA sets GASLoC's outer step and
#                     momentum (DiLoCo's and local SGD's outer lr and mu),
#                     +local, +mixed or +pg its momentum placement (LOCAL,
#                     MIXED, PSEUDO_GRADIENT), +2p two random peers a
#                     round, +fp32, +bf16 or +int8 the exchange's wire
#                     encoding (default the job spec's, fp32), +lrX the
#                     inner AdamW peak learning rate X (default --lr);
#                     e.g. gasloc50+pg+2p, diloco50+int8, dpsgd1+lr0.004
#     --reference C   pair every configuration with C (e.g. diloco50) in
#                     paired.md; --margin PCT its non-inferiority margin
#                     (default 1)
#     --seeds N       seeds per configuration (default 3), from --first-seed
#     --first-seed N  (default 1)
#     --workers N     workers per cluster (default 4)
#     --steps N       inner steps per worker (default 300; a multiple of
#                     every H)
#     --evals K       evaluations per run, evenly spaced (default 10)
#     --model M       tiny or S (default tiny)
#     --threads N     compute threads per worker (default 1)
#     --lr X --warmup N --eval-windows N   (0.002, 20, 32)
#     --build DIR     build folder (default build/release)
#     --out DIR       output folder (default runs/measure-<timestamp>)
set -euo pipefail
cd "$(dirname "$0")/.."

configs=gasloc50,diloco50,dpsgd1,gasloc1,solo
seeds=3; first_seed=1; workers=4; steps=300; evals=10
model=tiny; threads=1; lr=0.002; warmup=20; eval_windows=32
build=build/release; out=""; reference=""; margin=1
corpora=()
while [ $# -gt 0 ]; do
  case "$1" in
    --configs) configs="$2"; shift 2 ;;
    --seeds) seeds="$2"; shift 2 ;;
    --first-seed) first_seed="$2"; shift 2 ;;
    --workers) workers="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --evals) evals="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --lr) lr="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --eval-windows) eval_windows="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --reference) reference="$2"; shift 2 ;;
    --margin) margin="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -e/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "measure_outer: unknown option $1" >&2; exit 2 ;;
    *) corpora+=("$1"); shift ;;
  esac
done
[ "${#corpora[@]}" -gt 0 ] || corpora=(tests/data/tinyshakespeare.txt)
for c in "${corpora[@]}"; do
  [ -f "$c" ] || { echo "measure_outer: corpus $c is not a file" >&2; exit 2; }
done
for n in "$seeds" "$workers" "$steps" "$evals"; do
  [[ "$n" =~ ^[1-9][0-9]*$ ]] ||
    { echo "measure_outer: --seeds, --workers, --steps and --evals want a positive integer, got '$n'" >&2; exit 2; }
done
command -v gnuplot > /dev/null ||
  { echo "measure_outer: gnuplot missing (scripts/install_deps.sh installs gnuplot-nox)" >&2; exit 2; }
[ -x "$build/bench/gasloc-bench" ] ||
  { echo "measure_outer: $build/bench/gasloc-bench missing (build first)" >&2; exit 2; }
case "$model" in
  tiny) tokens_per_step=$(( 8 * 128 ))
        shape=(--layers=2 --d_model=128 --heads=4 --context=128 --batch=8) ;;
  S) tokens_per_step=$(( 16 * 256 ))
     shape=(--layers=4 --d_model=256 --heads=4 --context=256 --batch=16) ;;
  *) echo "measure_outer: unknown model '$model' (tiny or S)" >&2; exit 2 ;;
esac
out="${out:-runs/measure-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$out"; out="$(realpath "$out")"
curves="$out/curves.csv"
echo "corpus,config,seed,round,tokens,wall_s,worker_bpb_mean,worker_bpb_min,worker_bpb_max,avg_model_bpb,consensus_distance,bytes_sent_per_worker" > "$curves"

# cluster_run CORPUS CONFIG SEED: one cluster run, its rows in curves.csv.
cluster_run() {
  local corpus="$1" config="$2" seed="$3"
  local algo="${config%%[0-9]*}" rest="${config#"${config%%[0-9]*}"}"
  local extra=() inner_lr="$lr"
  if [[ "$rest" =~ ^(.*)\+lr([0-9]*\.?[0-9]+)$ ]]; then
    rest="${BASH_REMATCH[1]}"; inner_lr="${BASH_REMATCH[2]}"
  fi
  if [[ "$rest" =~ ^(.*)\+(fp32|bf16|int8)$ ]]; then
    rest="${BASH_REMATCH[1]}"; extra+=(--encoding "${BASH_REMATCH[2]}")
  fi
  if [[ "$rest" == *+2p ]]; then rest="${rest%+2p}"; extra+=(--topology two_peer); fi
  if [[ "$rest" == *+mixed ]]; then rest="${rest%+mixed}"; extra+=(--placement mixed); fi
  if [[ "$rest" == *+local ]]; then rest="${rest%+local}"; extra+=(--placement local); fi
  if [[ "$rest" == *+pg ]]; then rest="${rest%+pg}"; extra+=(--placement pseudo_gradient); fi
  local h="${rest%%@*}"
  [[ "$h" =~ ^[1-9][0-9]*$ ]] || { echo "measure_outer: bad config $config" >&2; return 2; }
  case "$algo" in
    gasloc|diloco|dpsgd) ;;
    localsgd) algo=local-sgd ;;
    *) echo "measure_outer: unknown algorithm in $config" >&2; return 2 ;;
  esac
  if [[ "$rest" == *@*/* ]]; then
    local eg="${rest#*@}"
    case "$algo" in
      diloco|local-sgd) extra+=(--outer-lr "${eg%/*}" --mu "${eg#*/}") ;;
      *) extra+=(--eta "${eg%/*}" --gamma "${eg#*/}") ;;
    esac
  fi
  if [ $(( steps % h )) -ne 0 ]; then
    echo "measure_outer: --steps $steps is not a multiple of H = $h ($config)" >&2; return 2
  fi
  local rounds=$(( steps / h ))
  local every=$(( rounds / evals )); [ "$every" -ge 1 ] || every=1
  local kept=$(( rounds / every + 2 ))
  local dir="$out/runs/$(basename "$corpus" .txt)-${config//\//_}-seed$seed"
  rm -rf "$dir"
  scripts/local_cluster.sh --workers "$workers" --algorithm "$algo" \
    --local-steps "$h" --rounds "$rounds" --model "$model" \
    --threads "$threads" --lr "$inner_lr" --warmup "$warmup" --seed "$seed" \
    --eval-windows "$eval_windows" --eval-every "$every" \
    --checkpoint-every "$every" --checkpoints-kept "$kept" --uniform-budget \
    --no-sample --build "$build" --run-dir "$dir" "${extra[@]}" "$corpus" \
    > "$dir.out" 2>&1 ||
    { echo "measure_outer: $config seed $seed failed, see $dir.out" >&2; return 1; }
  # The exact consensus distance and the average model, per evaluation.
  local ckpts
  ckpts=$(ls "$dir"/checkpoints/*.ckpt* 2> /dev/null | paste -sd, -)
  if [ -n "$ckpts" ]; then
    OMP_WAIT_POLICY=PASSIVE "$build/bench/gasloc-bench" consensus \
      --spec="$dir/job.json" --threads="$threads" --checkpoints="$ckpts" \
      > "$dir.consensus.jsonl" 2> "$dir.consensus.err" ||
      { echo "measure_outer: consensus of $config seed $seed failed, see $dir.consensus.err" >&2; return 1; }
  else
    : > "$dir.consensus.jsonl"
  fi
  /usr/bin/python3 - "$dir" "$corpus" "$config" "$seed" "$h" "$workers" \
    "$tokens_per_step" >> "$curves" <<'PY'
import datetime, glob, json, os, re, sys
d, corpus, config, seed, h, workers, tps = sys.argv[1:]
h, workers, tps = int(h), int(workers), int(tps)
stamp = re.compile(r"^[IWE](\d{8} \d\d:\d\d:\d\d\.\d+) .*job \d+ round (\d+)"
                   r"( \(epoch| done: loss [^,]*, val bpb ([0-9.eE+-]+))")
def when(s):
    return datetime.datetime.strptime(s, "%Y%m%d %H:%M:%S.%f").timestamp()
sent_re = re.compile(r", sent (\d+) B")
start, bpb, done_at, sent = None, {}, {}, {}
for log in sorted(glob.glob(f"{d}/worker*.log")):
    for line in open(log, errors="replace"):
        m = stamp.match(line)
        if not m: continue
        t, r = when(m.group(1)), int(m.group(2))
        if b := sent_re.search(line):
            sent.setdefault(log, {})[r] = int(b.group(1))
        if m.group(3).startswith(" (epoch"):
            if r == 0: start = t if start is None else min(start, t)
        elif m.group(4) and float(m.group(4)) > 0:
            bpb.setdefault(r, []).append(float(m.group(4)))
            done_at[r] = max(done_at.get(r, t), t)
def sent_through(r):
    """Bytes one worker sent in rounds 0..r, the mean over the workers."""
    totals = [sum(b for k, b in per.items() if k <= r) for per in sent.values()]
    return round(sum(totals) / len(totals)) if totals else ""
cons = {}
for line in open(f"{d}.consensus.jsonl"):
    c = json.loads(line); cons[c["round"]] = c
for r in sorted(bpb):
    v = bpb[r]; c = cons.get(r, {})
    print(",".join(str(x) for x in [
        os.path.basename(corpus), config, seed, r, workers * (r + 1) * h * tps,
        round(done_at[r] - start, 2) if start else "",
        round(sum(v) / len(v), 5), min(v), max(v),
        c.get("avg_val_bpb", ""), c.get("consensus_distance", ""),
        sent_through(r)]))
PY
}

# solo_run CORPUS SEED: one worker alone, as many steps as the cluster.
solo_run() {
  local corpus="$1" seed="$2"
  local total=$(( workers * steps ))
  local every=$(( total / evals )); [ "$every" -ge 1 ] || every=1
  local dir="$out/runs/$(basename "$corpus" .txt)-solo-seed$seed"
  OMP_WAIT_POLICY=PASSIVE "$build/server/gasloc-train" train "${shape[@]}" \
    --data="$corpus" --steps="$total" --threads="$threads" --lr="$lr" \
    --warmup="$warmup" --seed="$seed" --eval_windows="$eval_windows" \
    --eval_every="$every" 2>&1 |
    while IFS= read -r line; do echo "$(date +%s.%N) $line"; done > "$dir.out" ||
    { echo "measure_outer: solo seed $seed failed, see $dir.out" >&2; return 1; }
  /usr/bin/python3 - "$dir.out" "$corpus" "$seed" "$tps_solo" >> "$curves" <<'PY'
import os, re, sys
log, corpus, seed, tps = sys.argv[1:]
lines = open(log).read().splitlines()
start = float(lines[0].split()[0]) if lines else 0
for line in lines:
    m = re.match(r"([0-9.]+) eval step (\d+) val_bpb ([0-9.]+)", line)
    if m:
        step = int(m.group(2))
        print(",".join(str(x) for x in [
            os.path.basename(corpus), "solo", seed, step - 1,
            step * int(tps), round(float(m.group(1)) - start, 2),
            m.group(3), m.group(3), m.group(3), m.group(3), "", 0]))
PY
}
tps_solo=$tokens_per_step

IFS=, read -ra list <<< "$configs"
for corpus in "${corpora[@]}"; do
  corpus="$(realpath "$corpus")"
  mkdir -p "$out/runs"
  for config in "${list[@]}"; do
    for seed in $(seq "$first_seed" $(( first_seed + seeds - 1 ))); do
      echo "measure_outer: $(basename "$corpus") $config seed $seed ($(date +%H:%M:%S), load $(cut -d' ' -f1 /proc/loadavg))"
      if [ "$config" = solo ]; then solo_run "$corpus" "$seed"
      else cluster_run "$corpus" "$config" "$seed"; fi
    done
  done
done

# Mean and spread over the seeds, the final table, the data for the plots.
/usr/bin/python3 - "$out" <<'PY'
import csv, math, os, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(f"{out}/curves.csv")))
def stats(xs):
    xs = [float(x) for x in xs if x not in ("", None)]
    if not xs: return "", ""
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return round(m, 6), round(sd, 6)
groups = {}
for r in rows:
    groups.setdefault((r["corpus"], r["config"], int(r["round"])), []).append(r)
with open(f"{out}/summary.csv", "w") as f:
    f.write("corpus,config,round,seeds,tokens,wall_s_mean,worker_bpb_mean,worker_bpb_sd,"
            "avg_model_bpb_mean,avg_model_bpb_sd,consensus_mean,consensus_sd\n")
    for (corpus, config, rnd), g in sorted(groups.items()):
        w = stats(r["worker_bpb_mean"] for r in g)
        a = stats(r["avg_model_bpb"] for r in g)
        c = stats(r["consensus_distance"] for r in g)
        t = stats(r["wall_s"] for r in g)
        f.write(",".join(str(x) for x in [corpus, config, rnd, len(g), g[0]["tokens"], t[0],
                                          *w, *a, *c]) + "\n")
summary = list(csv.DictReader(open(f"{out}/summary.csv")))
last = {}
for s in summary:
    k = (s["corpus"], s["config"])
    if k not in last or int(s["round"]) > int(last[k]["round"]): last[k] = s
with open(f"{out}/final.md", "w") as f:
    f.write("| corpus | config | seeds | tokens | worker bpb (mean ± sd) | "
            "average model bpb | consensus distance | wall s |\n|---|---|---|---|---|---|---|---|\n")
    for (corpus, config), s in sorted(last.items()):
        pm = lambda m, sd: f"{float(m):.4f} ± {float(sd):.4f}" if m != "" else "-"
        cd = f"{float(s['consensus_mean']):.3g}" if s["consensus_mean"] != "" else "-"
        f.write(f"| {corpus} | {config} | {s['seeds']} | {int(s['tokens']):,} | "
                f"{pm(s['worker_bpb_mean'], s['worker_bpb_sd'])} | "
                f"{pm(s['avg_model_bpb_mean'], s['avg_model_bpb_sd'])} | {cd} | "
                f"{s['wall_s_mean']} |\n")
# One whitespace data file per (corpus, config) for gnuplot.
os.makedirs(f"{out}/plot", exist_ok=True)
for s in summary:
    path = f"{out}/plot/{s['corpus']}--{s['config'].replace('/', '_')}.dat"
    new = not os.path.exists(path)
    with open(path, "a") as f:
        if new: f.write("# tokens wall_s bpb bpb_sd avg_bpb avg_sd consensus consensus_sd\n")
        f.write(" ".join(str(s[k]) if s[k] != "" else "NaN" for k in [
            "tokens", "wall_s_mean", "worker_bpb_mean", "worker_bpb_sd",
            "avg_model_bpb_mean", "avg_model_bpb_sd", "consensus_mean",
            "consensus_sd"]) + "\n")
PY

# PNG curves, one set per corpus: bpb against tokens and against wall time
# (mean over seeds, sample standard deviation as error bars), and the
# consensus distance against tokens.
for corpus in "${corpora[@]}"; do
  name="$(basename "$corpus")"
  files=("$out"/plot/"$name"--*.dat)
  [ -e "${files[0]}" ] || continue
  plots() {  # plots XCOL YCOL ERRCOL
    local sep="" f label
    for f in "${files[@]}"; do
      label="$(basename "$f" .dat)"; label="${label#"$name"--}"
      printf '%s"%s" using %s:%s:%s with yerrorlines title "%s"' "$sep" "$f" "$1" "$2" "$3" "$label"
      sep=", "
    done
  }
  # Log scale only when some distance is positive (gnuplot refuses a log
  # plot whose points are all 0: DiLoCo alone, or two always-paired
  # GASLoC workers, which average exactly).
  consensus_scale="set logscale y"
  awk '!/^#/ && $7 + 0 > 0 { found = 1 } END { exit !found }' "${files[@]}" ||
    consensus_scale="set yrange [-1:1]"
  gnuplot <<GP
set terminal pngcairo size 900,600 noenhanced
set grid
set key top right
set output "$out/$name-bpb-tokens.png"
set title "$name: validation bpb (mean of workers, ${seeds} seeds) vs tokens"
set xlabel "tokens (all workers)"; set ylabel "val bpb"
plot $(plots 1 3 4)
set output "$out/$name-bpb-wall.png"
set title "$name: validation bpb vs wall-clock seconds"
set xlabel "seconds since the first round"
plot $(plots 2 3 4)
set output "$out/$name-consensus.png"
set title "$name: consensus distance (1/n) sum ||theta_i - theta_bar||^2"
set xlabel "tokens (all workers)"; set ylabel "squared L2"
$consensus_scale
plot $(plots 1 7 8)
GP
done
cat "$out/final.md"
if [ -n "$reference" ]; then
  /usr/bin/python3 scripts/equal_tokens_report.py "$curves" \
    --reference "$reference" --margin "$margin" --out "$out/paired.md"
fi
echo "measure_outer: curves.csv, summary.csv, final.md and the PNGs in $out"
