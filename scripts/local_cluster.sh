#!/usr/bin/env bash
# Local cluster launcher: starts a coordinator and N workers on this machine
# (free ports, logs in one folder), starts a job on a corpus, shows its
# progress until it ends, prints the final validation bits per byte and a
# generated text sample, and stops everything it started.
#
#   scripts/local_cluster.sh [options] [CORPUS]
#     --workers N        workers to start (default 2)
#     --algorithm A      gasloc | diloco | local-sgd | dpsgd | data-parallel
#     --rounds R         outer rounds (default 20)
#     --local-steps H    inner steps per round (default 40)
#     --model M          tiny (2 layers, d 128, ctx 128, batch 8; default) or
#                        S (preset S: 4 layers, d 256, ctx 256, batch 16)
#     --threads N        compute threads per worker (default: cores / workers)
#     --lr X             peak AdamW learning rate (default 0.002)
#     --warmup N         AdamW warmup steps (default 20)
#     --eval-windows N   validation windows (default 32)
#     --eval-every R     evaluate every R rounds, and on the last (default 3)
#     --checkpoint-every R  each worker checkpoints every R rounds (default 3)
#     --checkpoints-kept N  checkpoints each worker keeps (default 2; the
#                        measurement script keeps one per evaluation)
#     --seed N           job seed (default 1)
#     --uniform-budget   every worker does exactly H steps a round (default:
#                        the algorithm's budget policy)
#     --eta X --gamma X  GASLoC outer step and momentum (default: the job
#                        spec's defaults, 0.7 and 0.9)
#     --outer-lr X --mu X  DiLoCo / local SGD outer learning rate and
#                        Nesterov momentum (default: the job spec's, 0.7
#                        and 0.9 for DiLoCo)
#     --placement P      GASLoC momentum placement: local, mixed or
#                        pseudo_gradient (default: the job spec's)
#     --topology T       gossip graph of a round: one_peer, two_peer, ring
#                        or complete (default: the job spec's, one_peer)
#     --encoding E       the exchange's wire encoding: fp32, bf16 or int8
#                        (default: the job spec's, fp32; int8: error
#                        feedback for the all-reduce, compressed
#                        differences for gossip: docs/exchange.md)
#     --no-sample        do not print a generated sample at the end
#     --build DIR        build folder (default build/release)
#     --run-dir DIR      where logs, state and checkpoints go
#                        (default runs/local-<timestamp>)
#     --insecure         no TLS and no authentication (default: mutual TLS
#                        with a test CA made in RUN_DIR/certs by
#                        scripts/make_test_certs.sh; docs/security.md)
#   CORPUS: a text file or a folder of them (default /usr/share/common-licenses)
set -euo pipefail
cd "$(dirname "$0")/.."

workers=2
algorithm=gasloc
rounds=20
local_steps=40
build=build/release
run_dir=""
corpus=/usr/share/common-licenses
model=tiny
threads=""
lr=0.002
warmup=20
eval_windows=32
eval_every=3
checkpoint_every=3
checkpoints_kept=2
seed=1
sample=1
insecure=0
budget_json=""
outer_json=""
encoding_json=""
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers="$2"; shift 2 ;;
    --algorithm) algorithm="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --local-steps) local_steps="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --run-dir) run_dir="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --lr) lr="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --eval-windows) eval_windows="$2"; shift 2 ;;
    --eval-every) eval_every="$2"; shift 2 ;;
    --checkpoint-every) checkpoint_every="$2"; shift 2 ;;
    --checkpoints-kept) checkpoints_kept="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --no-sample) sample=0; shift ;;
    --insecure) insecure=1; shift ;;
    --uniform-budget) budget_json=', "budgetPolicy": "BUDGET_POLICY_UNIFORM"'; shift ;;
    --eta|--gamma|--outer-lr|--mu)
      [[ "${2:-}" =~ ^[0-9]*\.?[0-9]+$ ]] ||
        { echo "local_cluster: $1 wants a number, got '${2:-}'" >&2; exit 2; }
      field="${1#--}"; [ "$field" = outer-lr ] && field=lr
      outer_json+=", \"$field\": $2"; shift 2 ;;
    --placement)
      case "${2:-}" in
        local|mixed|pseudo_gradient) outer_json+=", \"momentumPlacement\": \"MOMENTUM_PLACEMENT_${2^^}\"" ;;
        *) echo "local_cluster: --placement wants local, mixed or pseudo_gradient, got '${2:-}'" >&2; exit 2 ;;
      esac
      shift 2 ;;
    --topology)
      case "${2:-}" in
        one_peer|two_peer) outer_json+=", \"topology\": \"TOPOLOGY_RANDOM_${2^^}\"" ;;
        ring|complete) outer_json+=", \"topology\": \"TOPOLOGY_${2^^}\"" ;;
        *) echo "local_cluster: --topology wants one_peer, two_peer, ring or complete, got '${2:-}'" >&2; exit 2 ;;
      esac
      shift 2 ;;
    --encoding)
      case "${2:-}" in
        fp32|bf16|int8) encoding_json=", \"encoding\": \"WIRE_ENCODING_${2^^}\"" ;;
        *) echo "local_cluster: --encoding wants fp32, bf16 or int8, got '${2:-}'" >&2; exit 2 ;;
      esac
      shift 2 ;;
    -h|--help) sed -n '2,/^set -e/{/^#/p}' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "local_cluster: unknown option $1" >&2; exit 2 ;;
    *) corpus="$1"; shift ;;
  esac
done
case "$algorithm" in
  gasloc) algo_enum=ALGORITHM_GASLOC ;;
  diloco) algo_enum=ALGORITHM_DILOCO ;;
  local-sgd) algo_enum=ALGORITHM_LOCAL_SGD ;;
  dpsgd) algo_enum=ALGORITHM_DPSGD ;;
  data-parallel) algo_enum=ALGORITHM_DATA_PARALLEL ;;
  *) echo "local_cluster: unknown algorithm '$algorithm'" >&2; exit 2 ;;
esac
case "$model" in
  tiny) model_json='{"layers": 2, "dModel": 128, "heads": 4, "context": 128}'
        batch=8 ;;
  S) model_json='{"layers": 4, "dModel": 256, "heads": 4, "context": 256}'
     batch=16 ;;
  *) echo "local_cluster: unknown model '$model' (tiny or S)" >&2; exit 2 ;;
esac
if [ ! -e "$corpus" ]; then
  echo "local_cluster: corpus $corpus does not exist" >&2; exit 2
fi
corpus="$(realpath "$corpus")"
bin="$build/server"
for b in gasloc-coordinator gasloc-worker gaslocctl gasloc-train; do
  [ -x "$bin/$b" ] || { echo "local_cluster: $bin/$b missing (build first)" >&2; exit 2; }
done
run_dir="${run_dir:-runs/local-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$run_dir"
run_dir="$(realpath "$run_dir")"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
}
trap cleanup EXIT INT TERM

# wait_port FILE: prints the port once FILE has "listening on port N".
wait_port() {
  for _ in $(seq 300); do
    if grep -q "listening on port" "$1" 2>/dev/null; then
      grep -m1 -o "listening on port [0-9]*" "$1" | awk '{print $4}'
      return 0
    fi
    sleep 0.1
  done
  echo "local_cluster: no port in $1" >&2; return 1
}

# Credentials: mutual TLS with a fresh test CA (each worker its own
# certificate, CN worker:worker<i>; gaslocctl the operator's), unless
# --insecure.
if [ "$insecure" = 1 ]; then
  coordinator_tls=(--insecure); ctl_tls=(--insecure)
  worker_tls() { echo --insecure; }
else
  certs="$run_dir/certs"
  bash scripts/make_test_certs.sh "$certs" "$workers" > /dev/null
  coordinator_tls=(--tls_cert="$certs/coordinator.pem"
                   --tls_key="$certs/coordinator.key" --tls_ca="$certs/ca.pem")
  ctl_tls=(--tls_cert="$certs/operator.pem" --tls_key="$certs/operator.key"
           --tls_ca="$certs/ca.pem")
  worker_tls() {
    echo --tls_cert="$certs/worker$1.pem" --tls_key="$certs/worker$1.key" \
      --tls_ca="$certs/ca.pem"
  }
  echo "local_cluster: mutual TLS, certificates in $certs"
fi

"$bin/gasloc-coordinator" --listen=127.0.0.1:0 "${coordinator_tls[@]}" \
  --db="$run_dir/coordinator.sqlite" \
  > "$run_dir/coordinator.out" 2> "$run_dir/coordinator.log" &
pids+=($!)
port=$(wait_port "$run_dir/coordinator.out")
coordinator="127.0.0.1:$port"
echo "local_cluster: coordinator on $coordinator, logs in $run_dir"

# Share the cores: by default cores / workers compute threads each, at
# least one.
if [ -z "$threads" ]; then
  threads=$(( $(nproc) / workers )); [ "$threads" -ge 1 ] || threads=1
fi
# --data_dir: each worker's state directory (its stable name, so a
# restarted worker finds its own checkpoints).
for i in $(seq 1 "$workers"); do
  mkdir -p "$run_dir/worker$i"
  OMP_WAIT_POLICY=PASSIVE "$bin/gasloc-worker" --coordinator="$coordinator" \
    --listen=127.0.0.1:0 --threads="$threads" --data_dir="$run_dir/worker$i" \
    --checkpoints_kept="$checkpoints_kept" \
    --checkpoint_root="$run_dir" \
    $(worker_tls "$i") \
    > "$run_dir/worker$i.out" 2> "$run_dir/worker$i.log" &
  pids+=($!)
done
for i in $(seq 1 "$workers"); do wait_port "$run_dir/worker$i.out" > /dev/null; done
echo "local_cluster: $workers workers up ($threads thread(s) each)"

cat > "$run_dir/job.json" <<JSON
{
  "name": "local-$algorithm",
  "model": $model_json,
  "training": {"batch": $batch, "seed": "$seed",
               "adamw": {"lr": $lr, "warmupSteps": $warmup}},
  "data": {"corpusPath": "$corpus", "evalWindows": $eval_windows,
           "evalIntervalRounds": $eval_every},
  "outer": {"algorithm": "$algo_enum", "localSteps": $local_steps$budget_json$outer_json},
  "exchange": {"deadlineMs": 20000$encoding_json},
  "checkpoint": {"directory": "$run_dir/checkpoints", "intervalRounds": $checkpoint_every},
  "stop": {"maxRounds": "$rounds"},
  "minWorkers": $workers
}
JSON
ctl=("$bin/gaslocctl" --coordinator="$coordinator" "${ctl_tls[@]}")
job_id=$("${ctl[@]}" --output=json job start "$run_dir/job.json" |
  /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["job_id"])')
echo "local_cluster: job $job_id started ($algorithm, $rounds rounds of $local_steps steps)"
"${ctl[@]}" job watch "$job_id"

status_json=$("${ctl[@]}" --output=json job get "$job_id")
echo "$status_json" > "$run_dir/job-status.json"
/usr/bin/python3 - "$run_dir/job-status.json" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))
print(f"local_cluster: job {job['job_id']} {job.get('state', '?')}: "
      f"{job.get('rounds_completed', 0)} rounds, {job.get('tokens', 0)} tokens, "
      f"final validation bpb {job.get('val_bpb', float('nan')):.4f}")
PY
checkpoint=$(ls -t "$run_dir"/checkpoints/*.ckpt 2>/dev/null | head -1 || true)
if [ "$sample" = 1 ] && [ -n "$checkpoint" ]; then
  echo "local_cluster: sample from $checkpoint:"
  "$bin/gasloc-train" generate --checkpoint="$checkpoint" \
    --prompt="The " --length=200 --temperature=0.8 --top_k=40
  echo
fi
