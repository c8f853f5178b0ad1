#!/usr/bin/env python3
"""Compares results folders of scripts/netns_cluster.py runs.

  scripts/netns_compare.py RUN_DIR... [--out DIR] [--reference diloco]
      [--target-bpb X] [--tuning-seeds "1 2 3"] [--report]

Groups the runs by (scenario, algorithm) and pairs each with the reference
algorithm seed by seed (docs/benchmarks.md, "How a comparison is
reported"). Writes to --out (default runs/netns-compare-<time>):

  table.md          the target bpb (default: the reference's worst final
                    bpb over its seeds, so it reaches it in every seed) and
                    one row per (scenario, algorithm): seeds, wall seconds,
                    final bpb and its paired gap to the reference's with a
                    95% t interval, seconds to the target per seed
                    (interpolated between evaluations; "never" counts as
                    not reaching it), the paired ratio of those times to
                    the reference's with its 95% interval, wait fraction of
                    the fast workers and of the slowest, MB sent, mean H per
                    worker from round 2 on; above it, why the runs are not a
                    reportable result if they are not (tuning seeds,
                    several builds, methods with different seeds): with
                    --report that refuses the comparison (exit 2)
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

import paired_stats


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
    wall = float(summary["wall_seconds"] or 0)

    def not_computing(ws):
        # Over the job's wall time, not the rounds' (idle_fraction): a
        # worker held at the round boundary (outer.max_round_lead) is
        # between rounds, and that wait is idle too.
        values = [1 - float(w["compute_s"]) / wall for w in ws
                  if wall > 0 and w.get("compute_s", "") != ""]
        return sum(values) / len(values) if values else None
    h = {}
    for r in rounds:
        if int(r["round"]) >= 2:
            h.setdefault(int(r["worker"]), []).append(int(r["H"]))
    return {
        "folder": folder, "scenario": summary["scenario"],
        "algorithm": summary["algorithm"], "seed": summary["seed"],
        "state": summary["state"], "build": summary.get("build", "unknown"),
        "wall_s": float(summary["wall_seconds"] or 0),
        "tokens": int(summary["tokens"] or 0),
        "final_bpb": evals[-1][2] if evals else None,
        "evals": evals,
        "fast_wait": wait(fast), "slow_wait": wait(slow),
        "fast_idle": not_computing(fast),
        "mb_moved": sum(w["sent_bytes"] for w in workers) / 1e6,
        "mean_h": {w: sum(v) / len(v) for w, v in sorted(h.items())},
    }


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
    # One colour per (scenario, algorithm), its seeds as lines of that
    # colour; the legend names each method once.
    series = []
    colours = {}
    for n, run in enumerate(runs):
        path = os.path.join(out, f"run{n}.dat")
        with open(path, "w", encoding="utf-8") as f:
            for elapsed, tokens, bpb in run["evals"]:
                f.write(f"{elapsed} {tokens} {bpb}\n")
        method = f"{run['scenario']} {run['algorithm']}"
        first = method not in colours
        colour = colours.setdefault(method, len(colours) + 1)
        title = f"title '{method}'" if first else "notitle"
        series.append((path, colour, title))
    for column, name, label in ((1, "bpb_vs_time", "wall-clock seconds"),
                                (2, "bpb_vs_tokens", "tokens (all workers)")):
        lines = ", ".join(f"'{p}' using {column}:3 with linespoints "
                          f"linecolor {c} pointtype {c} {t}"
                          for p, c, t in series)
        script = (f"set terminal png size 900,600\n"
                  f"set output '{os.path.join(out, name + '.png')}'\n"
                  f"set xlabel '{label}'\nset ylabel 'validation bits/byte'\n"
                  f"set key top right\nset grid\nplot {lines}\n")
        subprocess.run(["gnuplot"], input=script, text=True, check=True)


def targets_of(groups, reference, target_bpb):
    """Per scenario: the target bpb and how it was chosen. Default: the
    reference's worst final bpb over its seeds, which it reaches in every
    seed."""
    targets = {}
    for (scenario, algorithm), rs in groups.items():
        if algorithm != reference:
            continue
        if target_bpb is not None:
            targets[scenario] = (target_bpb, "given (--target-bpb)")
            continue
        finals = [r["final_bpb"] for r in rs if r["final_bpb"] is not None]
        if finals:
            targets[scenario] = (max(finals), f"{reference}'s worst final "
                                 f"bpb over its {len(finals)} seeds")
    return targets


def protocol_problems(runs, groups, reference, tuning_seeds):
    """What keeps these runs from being a reported result
    (docs/benchmarks.md, "How a comparison is reported")."""
    problems = []
    tuned = sorted({r["seed"] for r in runs} & tuning_seeds)
    if tuned:
        problems.append(f"seeds {' '.join(map(str, tuned))} are tuning seeds "
                        f"(--tuning-seeds): report on others")
    builds = sorted({r["build"] for r in runs})
    if len(builds) != 1 or builds == ["unknown"]:
        problems.append(f"the runs are not all of one recorded build "
                        f"({', '.join(builds)})")
    for scenario in sorted({s for s, _ in groups}):
        seed_sets = {a: sorted(r["seed"] for r in rs)
                     for (s, a), rs in groups.items() if s == scenario}
        if reference not in seed_sets:
            problems.append(f"{scenario}: no {reference} runs (--reference)")
        if len({tuple(v) for v in seed_sets.values()}) > 1:
            problems.append(f"{scenario}: the methods ran different seeds "
                            f"({seed_sets})")
    return problems


def paired(rs, ref_rs, key):
    """(own, reference) values of `key` for the seeds both ran."""
    ref = {r["seed"]: r[key] for r in ref_rs}
    pairs = [(r[key], ref[r["seed"]]) for r in rs if r["seed"] in ref]
    return [a for a, _ in pairs], [b for _, b in pairs]


def interval_text(m, lo, hi, spec):
    if m is None:
        return "-"
    if lo is None:
        return format(m, spec)
    return f"{format(m, spec)} [{format(lo, spec)}, {format(hi, spec)}]"


def group_row(scenario, algorithm, rs, ref_rs, reference):
    never = [r["seed"] for r in rs if r["to_target_s"] is None]
    ratio = "-"
    own_t, ref_t = paired(rs, ref_rs, "to_target_s")
    if ref_rs and not never and None not in ref_t and own_t:
        ratio = interval_text(*paired_stats.ratio_interval(own_t, ref_t), ".2f")
    elif never:
        ratio = f"not reached in {len(never)} of {len(rs)}"
    gap = "-"
    own_b, ref_b = paired(rs, ref_rs, "final_bpb")
    if own_b and None not in own_b and None not in ref_b:
        gap = interval_text(*paired_stats.mean_interval(
            [a - b for a, b in zip(own_b, ref_b)]), "+.4f")
    times = ", ".join(fmt(r["to_target_s"], ".0f").replace("-", "never")
                      for r in sorted(rs, key=lambda r: r["seed"]))
    workers = sorted({w for r in rs for w in r["mean_h"]})
    mean_h = " ".join(
        f"{mean([r['mean_h'].get(w) for r in rs]):.0f}" for w in workers)
    return (f"| {scenario} | {algorithm} | "
            f"{' '.join(str(r['seed']) for r in sorted(rs, key=lambda r: r['seed']))} | "
            f"{fmt(mean([r['wall_s'] for r in rs]), '.0f')} | "
            f"{fmt(mean([r['final_bpb'] for r in rs]), '.4f')} | {gap} | "
            f"{times} | {ratio} | "
            f"{fmt(mean([r['fast_wait'] for r in rs]), '.1%')} | "
            f"{fmt(mean([r['slow_wait'] for r in rs]), '.1%')} | "
            f"{fmt(mean([r['fast_idle'] for r in rs]), '.1%')} | "
            f"{fmt(mean([r['mb_moved'] for r in rs]), '.1f')} | {mean_h} |")


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", help="results folders")
    p.add_argument("--out", help="output folder")
    p.add_argument("--reference", default="diloco",
                   help="the baseline every method is paired with")
    p.add_argument("--target-bpb", type=float, default=None,
                   help="the bpb to reach (default: the reference's worst "
                        "final bpb over its seeds)")
    p.add_argument("--tuning-seeds", default="1 2 3",
                   help="seeds that tuned the methods: not reportable")
    p.add_argument("--report", action="store_true",
                   help="refuse (exit 2) unless the runs follow the protocol")
    args = p.parse_args(argv)
    try:
        runs = [load_run(os.path.abspath(r)) for r in args.runs]
        tuning_seeds = {int(s) for s in args.tuning_seeds.split()}
    except ValueError as e:
        print(f"netns_compare: {e}", file=sys.stderr)
        return 2
    groups = {}
    for run in runs:
        groups.setdefault((run["scenario"], run["algorithm"]), []).append(run)
    problems = protocol_problems(runs, groups, args.reference, tuning_seeds)
    if problems and args.report:
        for problem in problems:
            print(f"netns_compare: not a report: {problem}", file=sys.stderr)
        return 2
    out = os.path.abspath(args.out or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runs",
        f"netns-compare-{time.strftime('%Y%m%d-%H%M%S')}"))
    os.makedirs(out, exist_ok=True)
    targets = targets_of(groups, args.reference, args.target_bpb)
    for run in runs:
        target = targets.get(run["scenario"])
        run["target_bpb"] = target[0] if target else None
        run["to_target_s"] = (paired_stats.crossing_time(run["evals"], target[0])
                              if target else None)
    fields = ["scenario", "algorithm", "seed", "state", "build", "wall_s",
              "tokens", "final_bpb", "target_bpb", "to_target_s", "fast_wait",
              "slow_wait", "fast_idle", "mb_moved", "mean_h", "folder"]
    with open(os.path.join(out, "runs.csv"), "w", newline="",
              encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for run in runs:
            writer.writerow({**run, "mean_h": " ".join(
                f"w{w}={h:.1f}" for w, h in run["mean_h"].items())})
    lines = []
    for scenario, (target, how) in sorted(targets.items()):
        lines.append(f"{scenario}: target bpb {target:.4f} ({how}); time to "
                     "it interpolated between evaluations.")
    lines.append("Pairs: each method against " + args.reference +
                 " seed by seed; 95% t intervals over the seeds (ratios of "
                 "times to the target on the log scale).")
    lines += [f"**Not a reported result**: {p}." for p in problems]
    rows = ["", f"| scenario | algorithm | seeds | wall s | final bpb | final "
            f"bpb - {args.reference}'s [95% CI] | s to target (by seed) | "
            f"time to target / {args.reference}'s [95% CI] | fast workers "
            "wait | slowest wait | fast workers not computing | MB sent | "
            "mean H (round 2 on) |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
            "| --- | --- | --- |"]
    for (scenario, algorithm), rs in sorted(groups.items()):
        rows.append(group_row(scenario, algorithm, rs,
                              groups.get((scenario, args.reference), []),
                              args.reference))
    table = "\n".join(lines + rows) + "\n"
    with open(os.path.join(out, "table.md"), "w", encoding="utf-8") as f:
        f.write(table)
    print(table)
    plot(runs, out)
    print(f"netns_compare: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
