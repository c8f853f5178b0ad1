#!/usr/bin/env python3
"""Compares results folders of scripts/netns_cluster.py runs.

  scripts/netns_compare.py RUN_DIR... [--out DIR] [--reference diloco]

Groups the runs by (scenario, algorithm), averages over their seeds, and
writes to --out (default runs/netns-compare-<time>):

  table.md          one row per (scenario, algorithm): seeds, wall seconds,
                    final bpb, seconds to reach the reference algorithm's
                    final bpb (mean over its seeds, same scenario) and that
                    time over the reference's wall time, wait fraction of
                    the fast workers and of the slowest, MB moved, mean H
                    per worker from round 2 on
  runs.csv          the same figures per run
  bpb_vs_time.png   validation bpb against wall-clock seconds, a line per run
  bpb_vs_tokens.png validation bpb against tokens (gnuplot; skipped, with a
                    message, when gnuplot is missing)

docs/heterogeneity.md, "Comparing runs".
"""
import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time


def read_csv(path):
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f))


def load_run(folder):
    """The figures of one results folder; raises ValueError if incomplete."""
    try:
        with open(os.path.join(folder, "summary.json"), encoding="utf-8") as f:
            summary = json.load(f)
        progress = read_csv(os.path.join(folder, "progress.csv"))
        rounds = read_csv(os.path.join(folder, "rounds.csv"))
    except OSError as e:
        raise ValueError(f"{folder}: not a complete results folder "
                         f"({e.strerror}: {e.filename})") from e
    # progress.csv repeats the job's latest bpb every round: keep the
    # first row of each new value (an evaluation's arrival).
    evals = []
    for r in progress:
        if r["val_bpb"] and (not evals or
                             float(r["val_bpb"]) != evals[-1][2]):
            evals.append((float(r["elapsed_s"]), int(r["tokens"]),
                          float(r["val_bpb"])))
    workers = summary["workers"]
    fastest = max((float(w["rate_mbit"]) or float("inf"), float(w["cpu"]) or
                   float("inf")) for w in workers) if workers else None

    def is_fast(w):
        return (float(w["rate_mbit"]) or float("inf"),
                float(w["cpu"]) or float("inf")) == fastest

    def wait(ws, key="wait_fraction"):
        values = [w[key] for w in ws if w.get(key, "") != ""]
        return sum(values) / len(values) if values else None
    fast = [w for w in workers if is_fast(w)]
    slow = [w for w in workers if not is_fast(w)]
    h = {}
    for r in rounds:
        if int(r["round"]) >= 2:
            h.setdefault(int(r["worker"]), []).append(int(r["H"]))
    return {
        "folder": folder, "scenario": summary["scenario"],
        "algorithm": summary["algorithm"], "seed": summary["seed"],
        "state": summary["state"],
        "wall_s": float(summary["wall_seconds"] or 0),
        "tokens": int(summary["tokens"] or 0),
        "final_bpb": evals[-1][2] if evals else None,
        "evals": evals,
        "fast_wait": wait(fast), "slow_wait": wait(slow),
        "fast_idle": wait(fast, "idle_fraction"),
        "mb_moved": sum(w["sent_bytes"] for w in workers) / 1e6,
        "mean_h": {w: sum(v) / len(v) for w, v in sorted(h.items())},
    }


def seconds_to_reach(run, target):
    for elapsed, _tokens, bpb in run["evals"]:
        if bpb <= target:
            return elapsed
    return None


def mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def plot(runs, out):
    if not shutil.which("gnuplot"):
        print("netns_compare: gnuplot not found (Debian package gnuplot-nox): "
              "no PNGs, the CSVs have the data")
        return
    series = []
    for n, run in enumerate(runs):
        path = os.path.join(out, f"run{n}.dat")
        with open(path, "w", encoding="utf-8") as f:
            for elapsed, tokens, bpb in run["evals"]:
                f.write(f"{elapsed} {tokens} {bpb}\n")
        title = f"{run['scenario']} {run['algorithm']} s{run['seed']}"
        series.append((path, title))
    for column, name, label in ((1, "bpb_vs_time", "wall-clock seconds"),
                                (2, "bpb_vs_tokens", "tokens (all workers)")):
        lines = ", ".join(f"'{p}' using {column}:3 with linespoints "
                          f"title '{t}'" for p, t in series)
        script = (f"set terminal png size 900,600\n"
                  f"set output '{os.path.join(out, name + '.png')}'\n"
                  f"set xlabel '{label}'\nset ylabel 'validation bits/byte'\n"
                  f"set key top right\nset grid\nplot {lines}\n")
        subprocess.run(["gnuplot"], input=script, text=True, check=True)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="results folders")
    p.add_argument("--out", help="output folder")
    p.add_argument("--reference", default="diloco",
                   help="algorithm whose final bpb the others must reach")
    args = p.parse_args(argv)
    try:
        runs = [load_run(os.path.abspath(r)) for r in args.runs]
    except ValueError as e:
        print(f"netns_compare: {e}", file=sys.stderr)
        return 2
    out = os.path.abspath(args.out or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runs",
        f"netns-compare-{time.strftime('%Y%m%d-%H%M%S')}"))
    os.makedirs(out, exist_ok=True)
    groups = {}
    for run in runs:
        groups.setdefault((run["scenario"], run["algorithm"]), []).append(run)
    targets = {s: mean([r["final_bpb"] for r in rs])
               for (s, a), rs in groups.items() if a == args.reference}
    ref_wall = {s: mean([r["wall_s"] for r in rs])
                for (s, a), rs in groups.items() if a == args.reference}
    for run in runs:
        target = targets.get(run["scenario"])
        run["to_ref_s"] = (seconds_to_reach(run, target)
                           if target is not None else None)
    fields = ["scenario", "algorithm", "seed", "state", "wall_s", "tokens",
              "final_bpb", "to_ref_s", "fast_wait", "slow_wait", "fast_idle",
              "mb_moved",
              "mean_h", "folder"]
    with open(os.path.join(out, "runs.csv"), "w", newline="",
              encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for run in runs:
            writer.writerow({**run, "mean_h": " ".join(
                f"w{w}={h:.1f}" for w, h in run["mean_h"].items())})
    rows = [f"| scenario | algorithm | seeds | wall s | final bpb | s to "
            f"{args.reference}'s final bpb | / {args.reference} wall | fast "
            "workers wait | slowest wait | fast workers not computing | "
            "MB sent | mean H (round 2 on) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
            "| --- | --- |"]
    for (scenario, algorithm), rs in sorted(groups.items()):
        to_ref = mean([r["to_ref_s"] for r in rs])
        unreached = sum(1 for r in rs if r["to_ref_s"] is None)
        ratio = (to_ref / ref_wall[scenario]
                 if to_ref is not None and ref_wall.get(scenario) else None)
        workers = sorted({w for r in rs for w in r["mean_h"]})
        mean_h = " ".join(
            f"{mean([r['mean_h'].get(w) for r in rs]):.0f}" for w in workers)
        rows.append(
            f"| {scenario} | {algorithm} | {len(rs)} | "
            f"{fmt(mean([r['wall_s'] for r in rs]), '.0f')} | "
            f"{fmt(mean([r['final_bpb'] for r in rs]), '.4f')} | "
            f"{fmt(to_ref, '.0f')}"
            f"{f' ({unreached} never)' if unreached else ''} | "
            f"{fmt(ratio, '.2f')} | "
            f"{fmt(mean([r['fast_wait'] for r in rs]), '.1%')} | "
            f"{fmt(mean([r['slow_wait'] for r in rs]), '.1%')} | "
            f"{fmt(mean([r['fast_idle'] for r in rs]), '.1%')} | "
            f"{fmt(mean([r['mb_moved'] for r in rs]), '.1f')} | {mean_h} |")
    table = "\n".join(rows) + "\n"
    with open(os.path.join(out, "table.md"), "w", encoding="utf-8") as f:
        f.write(table)
    print(table)
    plot(runs, out)
    print(f"netns_compare: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
