#!/usr/bin/env python3
"""The equal-token comparison of bench/measure_outer.sh, as the protocol
asks (docs/benchmarks.md, "How a comparison is reported"): every
configuration against a reference configuration, seed by seed, at the
final evaluation (the same tokens for every configuration of a run).

For each corpus and configuration it reports
  - the final validation bpb (the mean of the workers, as a job reports it)
    and its paired gap to the reference in percent, with the two-sided 95%
    t interval over the seeds; the same for the average model's bpb;
  - the non-inferiority verdict at --margin percent: non-inferior when the
    interval's upper bound is below the margin (a one-sided 97.5% test),
    inferior when its lower bound is above it, not shown otherwise;
  - the bytes one worker sent over the whole run (mean over workers and
    seeds) and their ratio to the reference's.
Seeds 1-3 are the tuning seeds (the protocol's rule 1): a table that
contains one says so, and --report refuses it, as it refuses
configurations that ran different seeds.

  scripts/equal_tokens_report.py CURVES_CSV --reference CONFIG
      [--margin PCT] [--report] [--out FILE]

Standard library only (scripts/paired_stats.py).
"""
import argparse
import csv
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paired_stats  # noqa: E402

TUNING_SEEDS = {1, 2, 3}


def final_rows(rows):
    """{(corpus, config): {seed: the row of the seed's last evaluation}}."""
    finals = {}
    for r in rows:
        key = (r["corpus"], r["config"])
        seed = int(r["seed"])
        kept = finals.setdefault(key, {}).get(seed)
        if kept is None or int(r["round"]) > int(kept["round"]):
            finals[key][seed] = r
    return finals


def number(row, column):
    """The column's value as a float, None where it is missing or empty."""
    value = row.get(column, "")
    return float(value) if value not in ("", None) else None


def relative_gap(rows, ref_rows, column, seeds):
    """(mean, low, high) of 100 (x / x_ref - 1) over `seeds`, or None when
    some seed lacks the column."""
    gaps = []
    for s in seeds:
        x, ref = number(rows[s], column), number(ref_rows[s], column)
        if x is None or ref is None or ref <= 0:
            return None
        gaps.append(100.0 * (x / ref - 1.0))
    return paired_stats.mean_interval(gaps)


def verdict(interval, margin):
    """Non-inferiority at `margin` percent from a (mean, low, high) gap."""
    if interval is None or interval[2] is None:
        return "not tested (fewer than 2 seeds)"
    _, low, high = interval
    if high < margin:
        return f"non-inferior at {margin:g}%"
    if low > margin:
        return f"inferior by more than {margin:g}%"
    return f"not shown (the interval crosses {margin:g}%)"


def gap_text(interval):
    if interval is None:
        return "-"
    m, lo, hi = interval
    if lo is None:
        return f"{m:+.2f}%"
    return f"{m:+.2f}% [{lo:+.2f}, {hi:+.2f}]"


def mean_of(rows, column, seeds):
    values = [number(rows[s], column) for s in seeds]
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def protocol_problems(finals, reference):
    """What makes the table unfit to report (rule 1 and paired seeds)."""
    problems = []
    seeds = set()
    for (corpus, config), rows in sorted(finals.items()):
        seeds |= set(rows)
        ref = finals.get((corpus, reference))
        if ref is not None and set(rows) != set(ref):
            problems.append(f"{corpus} {config} ran seeds {sorted(rows)}, "
                            f"the reference {sorted(ref)}")
    tuning = sorted(seeds & TUNING_SEEDS)
    if tuning:
        problems.append(f"seeds {tuning} are tuning seeds (1-3); a reported "
                        "table runs others (--first-seed 4)")
    return problems


def report(rows, reference, margin):
    """The markdown table and the list of protocol problems."""
    finals = final_rows(rows)
    problems = protocol_problems(finals, reference)
    corpora = sorted({corpus for corpus, _ in finals})
    lines = [
        f"Paired against {reference} at the final evaluation; gaps are "
        "100 (bpb / reference's bpb - 1), mean and two-sided 95% t interval "
        f"over the seeds; margin {margin:g}%.",
        "",
        "| corpus | config | seeds | tokens | worker bpb | gap to "
        f"{reference} | verdict | average model bpb | gap | MB sent per "
        "worker | bytes vs reference |",
        "| --- | --- | --- | ---: | ---: | --- | --- | ---: | --- | ---: | ---: |"]
    for corpus in corpora:
        ref_rows = finals.get((corpus, reference))
        if ref_rows is None:
            problems.append(f"{corpus}: no {reference} runs to compare with")
            continue
        configs = sorted(c for k, c in finals if k == corpus)
        configs.sort(key=lambda c: c != reference)
        for config in configs:
            rows = finals[(corpus, config)]
            seeds = sorted(set(rows) & set(ref_rows))
            if not seeds:
                continue
            bpb = mean_of(rows, "worker_bpb_mean", seeds)
            avg = mean_of(rows, "avg_model_bpb", seeds)
            sent = mean_of(rows, "bytes_sent_per_worker", seeds)
            ref_sent = mean_of(ref_rows, "bytes_sent_per_worker", seeds)
            if config == reference:
                gap, avg_gap, call = "0", "0", "reference"
            else:
                g = relative_gap(rows, ref_rows, "worker_bpb_mean", seeds)
                gap, call = gap_text(g), verdict(g, margin)
                avg_gap = gap_text(
                    relative_gap(rows, ref_rows, "avg_model_bpb", seeds))
            ratio = (f"{sent / ref_sent:.3f}"
                     if sent is not None and ref_sent else "-")
            lines.append(
                f"| {corpus} | {config} | {','.join(map(str, seeds))} | "
                f"{int(float(rows[seeds[0]]['tokens'])):,} | "
                f"{bpb:.4f} | {gap} | {call} | "
                + (f"{avg:.4f}" if avg is not None else "-")
                + f" | {avg_gap} | "
                + (f"{sent / 1e6:.3f}" if sent is not None else "-")
                + f" | {ratio} |")
    return "\n".join(lines) + "\n", problems


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("curves", help="measure_outer.sh's curves.csv")
    parser.add_argument("--reference", required=True,
                        help="the configuration the others are paired with")
    parser.add_argument("--margin", type=float, default=1.0,
                        help="non-inferiority margin in percent (default 1)")
    parser.add_argument("--report", action="store_true",
                        help="refuse a table the protocol does not allow")
    parser.add_argument("--out", help="write the table here too")
    args = parser.parse_args(argv)
    with open(args.curves, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        print(f"equal_tokens_report: {args.curves} has no evaluations",
              file=sys.stderr)
        return 2
    table, problems = report(rows, args.reference, args.margin)
    for p in problems:
        print(f"equal_tokens_report: {p}", file=sys.stderr)
    if args.report and problems:
        print("equal_tokens_report: --report refuses this table",
              file=sys.stderr)
        return 1
    if problems:
        table += "\nNot a reporting table: " + "; ".join(problems) + ".\n"
    if args.out:
        with open(args.out, "w") as f:
            f.write(table)
    sys.stdout.write(table)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
