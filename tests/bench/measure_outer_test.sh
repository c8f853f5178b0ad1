#!/usr/bin/env bash
# bench/measure_outer.sh end to end at the smallest scale (3 workers, 4
# steps, 2 evaluations, 1 seed; DiLoCo, GASLoC and the solo reference):
# the CSVs and the three PNGs exist, DiLoCo's consensus distance is
# exactly 0 (bit-identical replicas), GASLoC's is positive (3 workers: one
# sits out each round's matching; two would always be paired and, with
# the PSEUDO_GRADIENT momentum, average exactly), and the solo run
# trained as many tokens as the cluster.
# Usage: measure_outer_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src="$1"; build="$(realpath "$2")"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
bash "$src/bench/measure_outer.sh" --workers 3 --steps 4 --evals 2 --seeds 1 \
  --configs diloco2,gasloc2,solo --build "$build" --out "$out" \
  "$src/tests/data/tinyshakespeare.txt" > "$out/log" 2>&1 ||
  { cat "$out/log"; echo "measure_outer_test: the script failed" >&2; exit 1; }
for f in curves.csv summary.csv final.md tinyshakespeare.txt-bpb-tokens.png \
         tinyshakespeare.txt-bpb-wall.png tinyshakespeare.txt-consensus.png; do
  [ -s "$out/$f" ] || { cat "$out/log"; echo "measure_outer_test: $f missing or empty" >&2; exit 1; }
done
/usr/bin/python3 - "$out/curves.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
def last(config):
    r = [x for x in rows if x["config"] == config]
    assert r, f"no rows of {config}: {rows}"
    return max(r, key=lambda x: int(x["round"]))
d, g, s = last("diloco2"), last("gasloc2"), last("solo")
assert float(d["consensus_distance"]) == 0.0, f"DiLoCo replicas differ: {d}"
assert float(g["consensus_distance"]) > 0.0, f"GASLoC workers identical: {g}"
assert d["tokens"] == g["tokens"] == s["tokens"], (d, g, s)
for r in (d, g, s):
    assert 0 < float(r["worker_bpb_mean"]) < 8.5, r
    assert r["wall_s"] != "", r
print("measure_outer_test: ok", d["tokens"], "tokens;", "GASLoC consensus",
      g["consensus_distance"], "average-model bpb", g["avg_model_bpb"])
PY
