#!/usr/bin/env python3
"""Unit tests of the comparison protocol (issue 36 item 2; docs/benchmarks.md,
"How a comparison is reported"): scripts/paired_stats.py against values
worked out by hand, and scripts/netns_compare.py on synthetic results
folders: the target every reference seed reaches, interpolated times to
it, paired ratios and gaps with their intervals, a method that never
reaches the target counted as such, and --report refusing tuning seeds,
several builds and unpaired seeds.
Run: python3 tests/scripts/netns_compare_unit_test.py SOURCE_DIR
"""
import contextlib
import io
import math
import os
import sys
import tempfile
import unittest

SOURCE = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(SOURCE, "scripts"))
sys.path.insert(0, os.path.join(SOURCE, "tests", "scripts"))
import netns_cluster  # noqa: E402
import netns_compare  # noqa: E402
import paired_stats  # noqa: E402
from run_folders import make_run  # noqa: E402


class PairedStatsTest(unittest.TestCase):
    def test_mean_interval_by_hand(self):
        # mean 2, sd 1, n 3: half width t(2) * 1 / sqrt(3).
        m, lo, hi = paired_stats.mean_interval([1.0, 2.0, 3.0])
        self.assertAlmostEqual(m, 2.0)
        self.assertAlmostEqual(hi - m, 4.303 / math.sqrt(3), places=9)
        self.assertAlmostEqual(m - lo, hi - m, places=12)
        self.assertEqual(paired_stats.mean_interval([5.0]), (5.0, None, None))
        self.assertEqual(paired_stats.t975(100), 1.960)
        with self.assertRaises(ValueError):
            paired_stats.t975(0)

    def test_ratio_interval_is_on_the_log_scale(self):
        # Ratios 0.5 and 2: geometric mean 1, the interval symmetric in log.
        r, lo, hi = paired_stats.ratio_interval([1.0, 4.0], [2.0, 2.0])
        self.assertAlmostEqual(r, 1.0)
        self.assertAlmostEqual(math.log(hi), -math.log(lo))
        # A constant ratio has a zero-width interval.
        r, lo, hi = paired_stats.ratio_interval([3.0, 6.0, 9.0], [6.0, 12.0, 18.0])
        self.assertAlmostEqual(r, 0.5)
        self.assertAlmostEqual(lo, 0.5)
        self.assertAlmostEqual(hi, 0.5)

    def test_crossing_time_interpolates(self):
        evals = [(10, 0, 4.0), (20, 0, 3.0), (30, 0, 2.0)]
        self.assertAlmostEqual(paired_stats.crossing_time(evals, 2.5), 25.0)
        self.assertEqual(paired_stats.crossing_time(evals, 3.0), 20)
        self.assertEqual(paired_stats.crossing_time(evals, 5.0), 10)
        self.assertIsNone(paired_stats.crossing_time(evals, 1.9))


class AlgorithmChoiceTest(unittest.TestCase):
    def test_baselines_by_name_and_h(self):
        self.assertEqual(netns_cluster.algorithm_choice("diloco-h240"),
                         ("diloco", 240))
        self.assertEqual(netns_cluster.algorithm_choice("gasloc-overlap"),
                         ("gasloc-overlap", None))
        self.assertEqual(netns_cluster.algorithm_choice("data-parallel"),
                         ("data-parallel", None))
        self.assertEqual(
            netns_cluster.algorithm_options("diloco-eager-mu0.3-h80"),
            ("diloco-eager", 80, 0.3, None, None))
        self.assertEqual(netns_cluster.algorithm_options("diloco-mu0"),
                         ("diloco", None, 0.0, None, None))
        self.assertEqual(
            netns_cluster.algorithm_options("gasloc-overlap-int8"),
            ("gasloc-overlap-int8", None, None, None, None))
        self.assertEqual(
            netns_cluster.algorithm_options("gasloc-overlap-lead1"),
            ("gasloc-overlap", None, None, 1, None))
        self.assertEqual(netns_cluster.algorithm_options("dpsgd-lead0-h20"),
                         ("dpsgd", 20, None, 0, None))
        self.assertEqual(
            netns_cluster.algorithm_options("gasloc-overlap-lead1-guard0"),
            ("gasloc-overlap", None, None, 1, 0.0))
        self.assertEqual(
            netns_cluster.algorithm_options("gasloc-guard2.5-h50"),
            ("gasloc", 50, None, None, 2.5))
        for bad in ("nope", "diloco-h0", "diloco-hx", "nope-h80",
                    "diloco-mu1", "diloco-mu1.5-h80", "gasloc-mu0.3",
                    "diloco-h80-mu0.3", "diloco-lead1", "gasloc-lead1001",
                    "gasloc-h80-lead1", "diloco-guard0",
                    "gasloc-guard0-lead1"):
            with self.assertRaises(Exception, msg=bad):
                netns_cluster.algorithm_choice(bad)


class CompareTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="netns-compare-test-")

    def compare(self, folders, *extra):
        out = os.path.join(self.root, "out")
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            code = netns_compare.main([*folders, "--out", out, *extra])
        table = ""
        if os.path.exists(os.path.join(out, "table.md")):
            with open(os.path.join(out, "table.md")) as f:
                table = f.read()
        return code, table, stderr.getvalue()

    def row(self, table, algorithm):
        for line in table.splitlines():
            if line.startswith(f"| osl | {algorithm} |"):
                return [c.strip() for c in line.strip("|").split("|")]
        self.fail(f"no row for {algorithm} in\n{table}")

    def test_paired_ratio_to_a_target_every_reference_seed_reaches(self):
        # DiLoCo's finals 2.8 and 3.0: the target is 3.0 (its worst).
        runs = [
            make_run(self.root, "diloco", 4, [(50, 3.5), (100, 2.8)]),
            make_run(self.root, "diloco", 5, [(60, 3.5), (120, 3.0)]),
            # Reaches 3.0 at 40 s (interpolated) and 60 s: ratios 40/78.57
            # and 60/120.
            make_run(self.root, "gasloc", 4, [(20, 3.5), (60, 2.5)]),
            make_run(self.root, "gasloc", 5, [(60, 3.0), (90, 2.9)]),
            # Never reaches 3.0 in seed 5.
            make_run(self.root, "slow", 4, [(200, 2.9)]),
            make_run(self.root, "slow", 5, [(200, 3.2)]),
        ]
        code, table, _ = self.compare(runs, "--tuning-seeds", "1 2 3",
                                      "--report")
        self.assertEqual(code, 0)
        self.assertIn("target bpb 3.0000 (diloco's worst final bpb over its 2 "
                      "seeds)", table)
        diloco_seed4 = 50 + 50 * (3.5 - 3.0) / (3.5 - 2.8)
        expected = math.sqrt((40 / diloco_seed4) * (60 / 120))
        gasloc = self.row(table, "gasloc")
        self.assertTrue(gasloc[7].startswith(f"{expected:.2f} ["), gasloc[7])
        self.assertEqual(gasloc[6], "40, 60")
        self.assertEqual(self.row(table, "diloco")[7], "1.00 [1.00, 1.00]")
        slow = self.row(table, "slow")
        self.assertEqual(slow[7], "not reached in 1 of 2")
        self.assertEqual(slow[6], "200, never")
        # Paired gap of the final bpb: (2.5 - 2.8, 2.9 - 3.0) = -0.2 mean.
        self.assertTrue(gasloc[5].startswith("-0.2000 ["), gasloc[5])

    def test_not_computing_counts_the_wait_between_rounds(self):
        # 30 s of compute in a 100 s job: 70% not computing, though the
        # rounds themselves (idle_fraction) were 20% idle: a worker held at
        # the round boundary waits between rounds.
        workers = [{"rate_mbit": 24, "cpu": 1, "wait_fraction": 0.1,
                    "idle_fraction": 0.2, "compute_s": 30,
                    "sent_bytes": 2e6}]
        folder = make_run(self.root, "gasloc", 4, [(50, 3.5), (100, 2.8)],
                          workers=workers)
        self.assertAlmostEqual(netns_compare.load_run(folder)["fast_idle"],
                               0.7)

    def test_report_refuses_what_breaks_the_protocol(self):
        tuned = [make_run(self.root, "diloco", 1, [(10, 3.0)]),
                 make_run(self.root, "gasloc", 1, [(10, 3.0)])]
        code, _, err = self.compare(tuned, "--report")
        self.assertEqual(code, 2)
        self.assertIn("seeds 1 are tuning seeds", err)
        # Without --report the table is written, marked as not a result.
        code, table, _ = self.compare(tuned)
        self.assertEqual(code, 0)
        self.assertIn("**Not a reported result**: seeds 1 are tuning seeds", table)

    def test_report_refuses_several_builds_and_unpaired_seeds(self):
        runs = [make_run(self.root, "diloco", 4, [(10, 3.0)], build="b1"),
                make_run(self.root, "diloco", 5, [(10, 3.0)], build="b1"),
                make_run(self.root, "gasloc", 4, [(10, 3.0)], build="b2")]
        code, _, err = self.compare(runs, "--report")
        self.assertEqual(code, 2)
        self.assertIn("not all of one recorded build (b1, b2)", err)
        self.assertIn("ran different seeds", err)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
