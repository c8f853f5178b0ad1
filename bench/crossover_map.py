#!/usr/bin/env python3
"""The crossover map (issue 36 item 3): which method reaches a target bpb
first as the slow link of the one-slow-link scenario gets slower.

  sudo bench/crossover_map.py run --ratios "0.3 2 4" --seeds "4 5 6" \
      --algorithms "diloco-h240 gasloc-overlap" --out runs/crossover \
      [--scenario bench/scenarios/one_slow_link.yaml] [--build DIR] [--report]
  bench/crossover_map.py report runs/crossover [--reference diloco-h240] \
      [--target-bpb X] [--tuning-seeds "1 2 3"] [--report]

`run` derives one scenario per wire/compute ratio r from the base scenario
and runs scripts/netns_sweep.sh on it into OUT/wc<r>, one ratio after the
other (each ratio is one sweep: size --seeds so that one fits in 90
minutes; a ratio whose sweep completed, OUT/wc<r>/SWEEP_DONE, is skipped,
so a later command goes on; an incomplete one must be removed first).
The derived scenario differs from the base in three things only, written
into it:
- the slowest worker's rate: base rate x base ratio / r, where the base
  ratio is the one the base file states (`# ... about 0.7x a round's
  compute` for one_slow_link.yaml: --base-ratio);
- the validation runs every round (`eval_every: 1`), so the time to the
  target is interpolated between evaluations a round apart, not five;
- the stop's wall-clock limit (--max-wall-seconds, the same for every
  method; 300 s by default: on the slowest link a DiLoCo round takes
  over 20 s).

`report` compares each ratio's runs with scripts/netns_compare.py (one
reference; the target bpb, unless --target-bpb gives one, is per ratio the
worst final bpb of any run, so every method reaches it in every seed; the
stop's wall-clock limit can end a method before a fixed target) into
OUT/compare/wc<r>, then writes
OUT/compare/crossover.md (per ratio and method: seeds, the wire/compute
as run (measured_ratio) and the slow worker's as the harness reports it,
time to the target and its paired ratio to the reference with a 95% t
interval, the winner) and crossover.png (the time ratio against the
wire/compute as run on log axes, a line at 1 and one at the issue's 0.67
goal). Needs gnuplot for the PNG (the table is written without it).
"""
import argparse
import csv
import json
import math
import os
import shutil
import subprocess
import sys

import yaml

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import netns_compare  # noqa: E402  (scripts/ is not a package)
import paired_stats  # noqa: E402


def ratio_name(ratio):
    """'wc0.3', 'wc4': the folder and scenario suffix of a ratio."""
    return "wc" + format(float(ratio), "g")


def derive_scenario(base_path, ratio, base_ratio, max_wall_seconds, out_path):
    """Writes the scenario for wire/compute `ratio` (see the module text)
    and returns the slow worker's rate in Mbit/s."""
    with open(base_path, encoding="utf-8") as f:
        raw = yaml.safe_load(f)
    workers = raw["workers"]
    defaults = raw.get("defaults", {})
    rates = [w.get("rate_mbit", defaults.get("rate_mbit")) for w in workers]
    slowest = min(range(len(workers)), key=lambda n: rates[n])
    if workers[slowest].get("count", 1) != 1:
        raise SystemExit(f"crossover_map: {base_path}: the slowest entry "
                         "must be one worker")
    rate = round(rates[slowest] * base_ratio / ratio, 4)
    workers[slowest] = {**workers[slowest], "rate_mbit": rate}
    raw["name"] = f"{raw.get('name', 'scenario')}-{ratio_name(ratio)}"
    raw.setdefault("training", {})["eval_every"] = 1
    raw.setdefault("stop", {})["max_wall_seconds"] = max_wall_seconds
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(f"# Derived by bench/crossover_map.py from {base_path}: the "
                f"slow link at {rate} Mbit/s for wire/compute {ratio} "
                f"(base {base_ratio}), validation every round, stop after "
                f"{max_wall_seconds} s at the latest.\n")
        yaml.safe_dump(raw, f, sort_keys=False)
    return rate


def run(args):
    os.makedirs(args.out, exist_ok=True)
    failed = 0
    for ratio in [float(r) for r in args.ratios.split()]:
        folder = os.path.join(args.out, ratio_name(ratio))
        done = os.path.join(folder, "SWEEP_DONE")
        if os.path.isfile(done):
            print(f"crossover_map: {folder} is complete; skipped", flush=True)
            continue
        if os.path.isdir(folder):
            print(f"crossover_map: {folder} holds an incomplete sweep; "
                  "remove it to run this ratio again", file=sys.stderr)
            failed = 1
            continue
        scenario = os.path.join(args.out, f"scenario-{ratio_name(ratio)}.yaml")
        rate = derive_scenario(args.scenario, ratio, args.base_ratio,
                               args.max_wall_seconds, scenario)
        print(f"crossover_map: wire/compute {ratio}: slow link at {rate} "
              f"Mbit/s -> {folder}", flush=True)
        command = ["bash", os.path.join(REPO, "scripts", "netns_sweep.sh"),
                   scenario, "--algorithms", args.algorithms, "--seeds",
                   args.seeds, "--out", folder,
                   "--reference", args.reference]
        if args.build:
            command += ["--build", args.build]
        if args.report:
            command.append("--report")
        if subprocess.run(command, cwd=REPO).returncode == 0:
            with open(done, "w", encoding="utf-8") as f:
                f.write(f"{' '.join(command)}\n")
        else:
            failed = 1
    return 1 if failed else 0


def read_runs(path):
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f))


def slow_wire_to_compute(folder):
    """The slowest link's worker's measured wire/compute in one run."""
    with open(os.path.join(folder, "summary.json"), encoding="utf-8") as f:
        workers = json.load(f).get("workers") or []
    if not workers:
        return None
    value = min(workers, key=lambda w: float(w["rate_mbit"])).get(
        "wire_to_compute", "")
    return float(value) if value not in ("", None) else None


def ratio_of(scenario):
    return float(scenario.rsplit("-wc", 1)[1])


def summarise(rows, reference):
    """Per (ratio, method): the table's figures (dicts)."""
    groups = {}
    for row in rows:
        groups.setdefault((ratio_of(row["scenario"]), row["algorithm"]),
                          []).append(row)
    table = []
    for (ratio, method), rs in sorted(groups.items()):
        refs = {r["seed"]: r for r in groups.get((ratio, reference), [])}
        times = {r["seed"]: (float(r["to_target_s"]) if r["to_target_s"]
                             else None) for r in rs}
        wc = [w for w in (slow_wire_to_compute(r["folder"]) for r in rs)
              if w is not None]
        entry = {"ratio": ratio, "method": method,
                 "seeds": sorted(times, key=int), "times": times,
                 "wire_to_compute": sum(wc) / len(wc) if wc else None,
                 "mb": sum(float(r["mb_moved"]) for r in rs) / len(rs),
                 "vs": None, "never": [s for s, t in times.items() if t is None]}
        ref_times = {s: (float(r["to_target_s"]) if r["to_target_s"] else None)
                     for s, r in refs.items()}
        paired = [(t, ref_times[s]) for s, t in times.items()
                  if s in ref_times]
        if (method != reference and paired and len(paired) == len(times)
                and all(a is not None and b is not None for a, b in paired)):
            entry["vs"] = paired_stats.ratio_interval(
                [a for a, _ in paired], [b for _, b in paired])
        table.append(entry)
    return table


def verdict(entry, reference):
    if entry["method"] == reference:
        return "reference"
    if entry["never"]:
        return f"did not reach the target in {len(entry['never'])} seeds"
    m, lo, hi = entry["vs"] if entry["vs"] else (None, None, None)
    if hi is None:
        return "-"
    if hi < 1:
        return f"{entry['method']} faster"
    if lo > 1:
        return f"{reference} faster"
    return "no difference shown"


def write_table(table, reference, targets, measured, path):
    lines = [f"Each ratio's methods paired with {reference} seed by seed: "
             "the geometric mean of the time ratios to the target bpb and "
             "its 95% t interval on the log scale. wire/compute as run: one "
             "model copy's time at the slow link's rate over the compute "
             "time of a round of the scenario's H at the steps per second "
             "measured in these runs; the slow worker's (harness): its "
             "exchange wire time over its compute time per round, as the "
             "harness prints it for that method.", "",
             "| wire/compute (nominal) | wire/compute as run | slow worker's "
             "(harness) | target bpb | method | seeds | s to target (by "
             "seed) | vs " + reference + " [95% CI] | MB sent | verdict |",
             "| ---: | ---: | ---: | ---: | --- | --- | --- | --- | ---: "
             "| --- |"]
    for e in table:
        times = ", ".join("never" if e["times"][s] is None
                          else f"{e['times'][s]:.0f}" for s in e["seeds"])
        vs = ("1" if e["method"] == reference else "-" if not e["vs"] else
              f"{e['vs'][0]:.2f} [{e['vs'][1]:.2f}, {e['vs'][2]:.2f}]"
              if e["vs"][1] is not None else f"{e['vs'][0]:.2f}")
        wc = "-" if e["wire_to_compute"] is None else f"{e['wire_to_compute']:.2f}"
        run_ratio = measured.get(e["ratio"])
        as_run = "-" if run_ratio is None else f"{run_ratio:.2f}"
        lines.append(f"| {e['ratio']:g} | {as_run} | {wc} | "
                     f"{targets[e['ratio']]:.4f} | {e['method']} | "
                     f"{' '.join(e['seeds'])} | {times} | {vs} | "
                     f"{e['mb']:.1f} | {verdict(e, reference)} |")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def plot(table, reference, measured, out):
    if not shutil.which("gnuplot"):
        print("crossover_map: gnuplot not found: no PNG, crossover.md has "
              "the figures")
        return
    series = {}
    for e in table:
        if e["vs"] and e["vs"][1] is not None:
            series.setdefault(e["method"], []).append(e)
    if not series:
        print("crossover_map: no ratio with an interval: no PNG")
        return
    plots = []
    for n, (method, entries) in enumerate(sorted(series.items()), start=1):
        data = os.path.join(out, f"crossover-{method}.dat")
        with open(data, "w", encoding="utf-8") as f:
            for e in sorted(entries, key=lambda e: e["ratio"]):
                m, lo, hi = e["vs"]
                x = measured.get(e["ratio"]) or e["ratio"]
                f.write(f"{x} {m} {lo} {hi}\n")
        plots.append(f"'{data}' using 1:2:3:4 with yerrorlines linecolor {n} "
                     f"pointtype 7 title '{method} / {reference}'")
    script = (
        "set terminal png size 900,600\n"
        f"set output '{os.path.join(out, 'crossover.png')}'\n"
        "set logscale xy\nset grid\nset key top right\n"
        "set xlabel 'slow link: copy time / compute time of an H = 80 "
        "round, as run'\n"
        f"set ylabel 'time to target / {reference} (95% CI)'\n"
        "set xrange [0.2:20]\nset yrange [0.1:4]\n"
        "plot " + ", ".join(plots) +
        ", 1 with lines dashtype 2 linecolor rgb 'black' title 'equal', "
        "0.67 with lines dashtype 3 linecolor rgb 'red' title 'goal 0.67'\n")
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def ratio_folders(out):
    """{ratio: [run folders]} of the complete runs under OUT/wc<r>."""
    folders = {}
    for d in sorted(os.listdir(out)):
        path = os.path.join(out, d)
        if not (d.startswith("wc") and os.path.isdir(path)):
            continue
        runs = sorted(os.path.join(path, run) for run in os.listdir(path)
                      if os.path.isfile(os.path.join(path, run, "summary.json")))
        if runs:
            folders[float(d[2:])] = runs
    return folders


def measured_ratio(runs, scenario_path):
    """The scenario's wire/compute as this CPU ran it: the slow link's copy
    time (one model copy at its rate) over the compute time of a round of
    the scenario's H, with the steps per compute-second of every worker of
    `runs` and the copy's bytes from an all-reduce run (a ring sends
    2 (n - 1) / n copies a round); None without one."""
    with open(scenario_path, encoding="utf-8") as f:
        local_steps = yaml.safe_load(f)["training"]["local_steps"]
    steps = seconds = 0.0
    copy_bytes, rate = None, None
    for run in runs:
        with open(os.path.join(run, "summary.json"), encoding="utf-8") as f:
            summary = json.load(f)
        workers = summary.get("workers") or []
        for w in workers:
            steps += float(w["inner_steps"])
            seconds += float(w["compute_s"])
        rate = min(float(w["rate_mbit"]) for w in workers)
        n = len(workers)
        if summary["algorithm"].startswith("diloco") and n > 1 and \
                copy_bytes is None:
            w = workers[0]
            copy_bytes = (float(w["sent_bytes"]) / float(w["rounds"]) /
                          (2 * (n - 1) / n))
    if copy_bytes is None or not steps or not rate:
        return None
    copy_seconds = copy_bytes * 8 / (rate * 1e6)
    return copy_seconds / (local_steps / (steps / seconds))


def common_target(runs):
    """The worst final bpb of any run (its last evaluation, as
    netns_compare.py reads it): every method reaches it in every seed."""
    finals = [netns_compare.load_run(run)["final_bpb"] for run in runs]
    if None in finals:
        raise SystemExit(f"crossover_map: a run under {os.path.dirname(runs[0])}"
                         " has no evaluation")
    return max(finals)


def report(args):
    folders = ratio_folders(args.out)
    if not folders:
        print(f"crossover_map: no runs under {args.out}", file=sys.stderr)
        return 2
    out = os.path.join(args.out, "compare")
    os.makedirs(out, exist_ok=True)
    rows, targets, measured = [], {}, {}
    for ratio, runs in sorted(folders.items()):
        scenario_path = os.path.join(args.out,
                                     f"scenario-{ratio_name(ratio)}.yaml")
        measured[ratio] = (measured_ratio(runs, scenario_path)
                           if os.path.isfile(scenario_path) else None)
        target = (args.target_bpb if args.target_bpb is not None
                  else common_target(runs))
        targets[ratio] = target
        folder = os.path.join(out, ratio_name(ratio))
        command = [sys.executable,
                   os.path.join(REPO, "scripts", "netns_compare.py"), *runs,
                   "--out", folder, "--reference", args.reference,
                   "--target-bpb", repr(target),
                   "--tuning-seeds", args.tuning_seeds]
        if args.report:
            command.append("--report")
        if subprocess.run(command, stdout=subprocess.DEVNULL).returncode != 0:
            print(f"crossover_map: the comparison of {ratio_name(ratio)} "
                  "refused its runs (above)", file=sys.stderr)
            return 2
        rows += read_runs(os.path.join(folder, "runs.csv"))
    table = summarise(rows, args.reference)
    write_table(table, args.reference, targets, measured,
                os.path.join(out, "crossover.md"))
    plot(table, args.reference, measured, out)
    print(f"crossover_map: wrote {out}/crossover.md and crossover.png")
    return 0


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the sweeps, one ratio after another")
    r.add_argument("--ratios", default="0.3 0.7 2 4")
    r.add_argument("--seeds", default="4 5 6 7 8")
    r.add_argument("--algorithms", default="diloco-h240 gasloc-overlap")
    r.add_argument("--reference", default="diloco-h240")
    r.add_argument("--scenario", default=os.path.join(
        REPO, "bench", "scenarios", "one_slow_link.yaml"))
    r.add_argument("--base-ratio", type=float, default=0.7,
                   help="the base scenario's slow-link wire/compute")
    r.add_argument("--max-wall-seconds", type=int, default=300)
    r.add_argument("--build")
    r.add_argument("--out", required=True)
    r.add_argument("--report", action="store_true")
    s = sub.add_parser("report", help="compare the runs, table and PNG")
    s.add_argument("out")
    s.add_argument("--reference", default="diloco-h240")
    s.add_argument("--target-bpb", type=float, default=None,
                   help="one target for every ratio (default: per ratio, "
                        "the worst final bpb of any run, which every method "
                        "reaches in every seed)")
    s.add_argument("--tuning-seeds", default="1 2 3")
    s.add_argument("--report", action="store_true")
    args = p.parse_args(argv)
    if args.command == "run":
        if not math.isfinite(args.base_ratio) or args.base_ratio <= 0:
            p.error("--base-ratio must be positive")
        return run(args)
    return report(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
