#!/usr/bin/env python3
"""Unit tests of scripts/equal_tokens_report.py (the equal-token table of
bench/measure_outer.sh --reference; docs/benchmarks.md, "How a comparison
is reported"): the final evaluation per seed, paired percentage gaps with
their t intervals worked out by hand, the non-inferiority verdicts, bytes
against the reference's, and --report refusing tuning seeds and unpaired
seeds.
Run: python3 tests/scripts/equal_tokens_report_unit_test.py SOURCE_DIR
"""
import contextlib
import csv
import io
import math
import os
import sys
import tempfile
import unittest

SOURCE = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(SOURCE, "scripts"))
import equal_tokens_report as etr  # noqa: E402

COLUMNS = ["corpus", "config", "seed", "round", "tokens", "wall_s",
           "worker_bpb_mean", "worker_bpb_min", "worker_bpb_max",
           "avg_model_bpb", "consensus_distance", "bytes_sent_per_worker"]


def row(config, seed, rnd, bpb, sent, corpus="c.txt"):
    return {"corpus": corpus, "config": config, "seed": str(seed),
            "round": str(rnd), "tokens": str(1000 * (rnd + 1)),
            "wall_s": "1", "worker_bpb_mean": str(bpb),
            "worker_bpb_min": str(bpb), "worker_bpb_max": str(bpb),
            "avg_model_bpb": str(bpb), "consensus_distance": "0",
            "bytes_sent_per_worker": str(sent)}


def runs(gaps_pct, seeds=(4, 5, 6), ref_bpb=2.0):
    """The reference at ref_bpb in every seed, config "x" at gaps_pct
    percent above it; an earlier evaluation that must be ignored."""
    rows = []
    for seed, gap in zip(seeds, gaps_pct):
        rows.append(row("ref", seed, 0, 9.0, 10))
        rows.append(row("ref", seed, 9, ref_bpb, 400))
        rows.append(row("x", seed, 0, 1.0, 10))
        rows.append(row("x", seed, 9, ref_bpb * (1 + gap / 100), 100))
    return rows


class EqualTokensReportTest(unittest.TestCase):
    def test_final_rows_take_each_seeds_last_evaluation(self):
        finals = etr.final_rows(runs([1.0, 2.0, 3.0]))
        self.assertEqual(sorted(finals), [("c.txt", "ref"), ("c.txt", "x")])
        self.assertEqual(finals[("c.txt", "x")][5]["round"], "9")

    def test_gap_interval_by_hand(self):
        # Gaps 1, 2, 3 percent: mean 2, sd 1, half width t(2) / sqrt(3).
        rows = runs([1.0, 2.0, 3.0])
        finals = etr.final_rows(rows)
        m, lo, hi = etr.relative_gap(finals[("c.txt", "x")],
                                     finals[("c.txt", "ref")],
                                     "worker_bpb_mean", [4, 5, 6])
        self.assertAlmostEqual(m, 2.0, places=9)
        self.assertAlmostEqual(hi - m, 4.303 / math.sqrt(3), places=9)
        self.assertAlmostEqual(m - lo, hi - m, places=9)

    def test_verdicts(self):
        self.assertEqual(etr.verdict((0.1, -0.2, 0.4), 1.0),
                         "non-inferior at 1%")
        self.assertEqual(etr.verdict((0.5, -0.2, 1.2), 1.0),
                         "not shown (the interval crosses 1%)")
        self.assertEqual(etr.verdict((2.0, 1.5, 2.5), 1.0),
                         "inferior by more than 1%")
        self.assertEqual(etr.verdict((2.0, None, None), 1.0),
                         "not tested (fewer than 2 seeds)")

    def test_table_pairs_seeds_and_reports_bytes(self):
        table, problems = etr.report(runs([0.1, 0.2, 0.3]), "ref", 1.0)
        self.assertEqual(problems, [])
        lines = [l for l in table.splitlines() if l.startswith("| c.txt")]
        self.assertEqual(len(lines), 2)
        self.assertIn("| ref |", lines[0])
        self.assertIn("reference", lines[0])
        self.assertIn("non-inferior at 1%", lines[1])
        self.assertIn("+0.20% [", lines[1])
        # 100 bytes against the reference's 400: a quarter.
        self.assertIn("| 0.250 |", lines[1])

    def test_tuning_and_unpaired_seeds_are_problems(self):
        _, problems = etr.report(runs([1.0, 2.0], seeds=(2, 5)), "ref", 1.0)
        self.assertTrue(any("tuning seeds" in p for p in problems), problems)
        rows = runs([1.0, 2.0, 3.0])
        rows.append(row("x", 7, 9, 2.0, 100))
        _, problems = etr.report(rows, "ref", 1.0)
        self.assertTrue(any("ran seeds [4, 5, 6, 7]" in p for p in problems),
                        problems)

    def test_report_flag_refuses_what_the_protocol_does_not_allow(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "curves.csv")
            with open(path, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=COLUMNS)
                w.writeheader()
                w.writerows(runs([1.0, 2.0, 3.0], seeds=(1, 2, 3)))
            err = io.StringIO()
            with contextlib.redirect_stderr(err), \
                    contextlib.redirect_stdout(io.StringIO()):
                self.assertEqual(etr.main([path, "--reference", "ref",
                                           "--report"]), 1)
                self.assertEqual(etr.main([path, "--reference", "ref"]), 0)
            self.assertIn("refuses", err.getvalue())


if __name__ == "__main__":
    unittest.main()
