#!/usr/bin/env python3
"""PNGs of gasloc-bench simulate's JSON lines (gnuplot, as the harness's
plots; scripts/install_deps.sh installs gnuplot-nox).

  bench/simulate_plot.py RUN.jsonl OUT_DIR

writes into OUT_DIR:
  loss_vs_time_<n>w.png  excess loss at the workers' average against
                         virtual seconds, one colour per algorithm, one
                         line per seed (log scale)
  consensus_vs_workers.png  the consensus distance, mean over each run's
                         second half and over seeds, against the worker
                         count (log scales; DiLoCo's is 0 and not drawn)
and the .dat files they are drawn from in OUT_DIR/data. Exits 2 without
gnuplot.
"""
import collections
import json
import os
import shutil
import subprocess
import sys


def gnuplot(script):
    subprocess.run(["gnuplot"], input=script, text=True, check=True)


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    if not shutil.which("gnuplot"):
        print("simulate_plot: gnuplot not found (Debian package gnuplot-nox)",
              file=sys.stderr)
        return 2
    src, out = argv[1], argv[2]
    data = os.path.join(out, "data")
    os.makedirs(data, exist_ok=True)
    runs = collections.defaultdict(list)  # (workers, algorithm, seed) -> points
    with open(src, encoding="utf-8") as f:
        for line in f:
            p = json.loads(line)
            runs[(p["workers"], p["algorithm"], p["seed"])].append(p)
    algorithms = list(dict.fromkeys(k[1] for k in runs))
    colour = {a: n + 1 for n, a in enumerate(algorithms)}
    for workers in sorted({k[0] for k in runs}):
        series, titled = [], set()
        for (w, algorithm, seed), points in sorted(runs.items()):
            if w != workers:
                continue
            path = os.path.join(data, f"loss_{w}w_{algorithm}_s{seed}.dat")
            with open(path, "w", encoding="utf-8") as f:
                for p in points:
                    f.write(f"{p['seconds']} {max(p['average_loss'], 1e-12)}\n")
            title = "notitle" if algorithm in titled else f"title '{algorithm}'"
            titled.add(algorithm)
            series.append(f"'{path}' using 1:2 with lines linecolor "
                          f"{colour[algorithm]} {title}")
        gnuplot(f"set terminal png size 900,600\n"
                f"set output '{os.path.join(out, f'loss_vs_time_{workers}w.png')}'\n"
                f"set title '{workers} workers: loss at the average model'\n"
                f"set xlabel 'virtual seconds'\nset ylabel 'excess loss'\n"
                f"set logscale y\nset grid\nset key top right\n"
                f"plot {', '.join(series)}\n")
    series = []
    for algorithm in algorithms:
        if algorithm == "diloco":
            continue
        path = os.path.join(data, f"consensus_{algorithm}.dat")
        with open(path, "w", encoding="utf-8") as f:
            for workers in sorted({k[0] for k in runs}):
                values = []
                for (w, a, _), points in runs.items():
                    if w == workers and a == algorithm:
                        half = points[len(points) // 2:]
                        values.append(sum(p["consensus_distance"] for p in half)
                                      / len(half))
                if values:
                    f.write(f"{workers} {sum(values) / len(values)}\n")
        series.append(f"'{path}' using 1:2 with linespoints linecolor "
                      f"{colour[algorithm]} title '{algorithm}'")
    if series:
        gnuplot(f"set terminal png size 900,600\n"
                f"set output '{os.path.join(out, 'consensus_vs_workers.png')}'\n"
                f"set title 'consensus distance (mean over the second half of each run)'\n"
                f"set xlabel 'workers'\nset ylabel '(1/n) sum ||x_i - xbar||^2'\n"
                f"set logscale x 2\nset logscale y\nset grid\nset key top left\n"
                f"plot {', '.join(series)}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
