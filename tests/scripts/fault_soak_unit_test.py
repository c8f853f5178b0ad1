#!/usr/bin/env python3
"""Unit tests of bench/fault_soak.py's pure parts (no root, no cluster):
the fault plan, the argument checks and the inotify watch.

Run: python3 tests/scripts/fault_soak_unit_test.py SOURCE_DIR
"""
import collections
import contextlib
import io
import os
import random
import sys
import tempfile
import threading
import time
import unittest

SOURCE = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(SOURCE, "bench"))
import fault_soak  # noqa: E402


class PlanTest(unittest.TestCase):
    def test_every_kind_as_often_as_the_others(self):
        plan = fault_soak.plan_faults(fault_soak.KINDS, 100, random.Random(1))
        counts = collections.Counter(plan)
        self.assertEqual(set(counts), set(fault_soak.KINDS))
        self.assertLessEqual(max(counts.values()) - min(counts.values()), 1)
        self.assertEqual(sum(counts.values()), 100)

    def test_the_seed_fixes_the_order(self):
        a = fault_soak.plan_faults(fault_soak.KINDS, 20, random.Random(7))
        b = fault_soak.plan_faults(fault_soak.KINDS, 20, random.Random(7))
        self.assertEqual(a, b)


class ArgsTest(unittest.TestCase):
    def test_rounds_follow_the_faults(self):
        args = fault_soak.parse_args(["s.yaml", "--faults", "10",
                                      "--spacing", "15", "--tail", "8"])
        self.assertEqual(args.rounds, 3 + 2 * 10 * 15 + 8)  # a bound only
        self.assertEqual(args.kinds, list(fault_soak.KINDS))
        self.assertIsNone(args.gamma)  # the job spec's default
        self.assertEqual(fault_soak.parse_args(
            ["s.yaml", "--gamma", "0"]).gamma, 0.0)

    def test_unknown_kind_is_refused_by_name(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit):
            fault_soak.parse_args(["s.yaml", "--kinds", "kill_inner,meteor"])
        self.assertIn("meteor", err.getvalue())


class StopAfterTailTest(unittest.TestCase):
    """The soak ends the job --tail rounds after the last fault recovered,
    not at a round fixed in advance (CI: recoveries shifted the tenth fault
    past a fixed stop.max_rounds, and it was never injected)."""

    def run_at(self, job_round, recovered_at=117, faults=1, plan=1):
        run = fault_soak.SoakRun.__new__(fault_soak.SoakRun)
        run.args = fault_soak.parse_args(["s.yaml", "--tail", "20"])
        run.plan = ["partition"] * plan
        run.faults = [{"round_recovered": recovered_at}] * faults
        run.active, run.job_round, run.job_id = None, job_round, 1
        run.stopped_by_soak = False
        calls = []
        run.ctl = lambda *argv: calls.append(argv) or {}
        with contextlib.redirect_stdout(io.StringIO()):
            run.stop_after_tail()
        return run, calls

    def test_stops_once_the_tail_has_run(self):
        run, calls = self.run_at(job_round=137)
        self.assertTrue(run.stopped_by_soak)
        self.assertEqual(calls[0][:3], ("job", "stop", "1"))

    def test_runs_on_during_the_tail(self):
        run, calls = self.run_at(job_round=136)
        self.assertFalse(run.stopped_by_soak)
        self.assertEqual(calls, [])

    def test_a_failed_stop_is_tried_again(self):
        run = fault_soak.SoakRun.__new__(fault_soak.SoakRun)
        run.args = fault_soak.parse_args(["s.yaml", "--tail", "0"])
        run.faults, run.job_round, run.job_id = [{"round_recovered": 5}], 9, 1
        run.stopped_by_soak = False

        def unreachable(*argv):
            raise fault_soak.harness.HarnessError("coordinator restarting")
        run.ctl = unreachable
        with contextlib.redirect_stdout(io.StringIO()):
            run.stop_after_tail()
        self.assertFalse(run.stopped_by_soak)

    def test_the_round_bound_leaves_room_for_shifted_faults(self):
        args = fault_soak.parse_args(["s.yaml", "--faults", "10",
                                      "--spacing", "10", "--tail", "20"])
        # The CI run that failed: the ninth fault recovered at job round
        # 121 (grid 93), so the tenth was due at 123 = the old bound.
        self.assertGreater(args.rounds, 121 + args.gap + 20 + 10)

    def test_the_rate_anneals_by_the_expected_stop(self):
        # Issue 32 item 5: the soak stops the job itself, long before the
        # stop.max_rounds bound; the cosine ends where the soak expects to
        # stop instead (the grid's end plus the tail).
        args = fault_soak.parse_args(["s.yaml", "--faults", "10",
                                      "--spacing", "10", "--tail", "20"])
        self.assertEqual(args.decay_rounds, args.first_round + 100 + 20)
        self.assertLess(args.decay_rounds, args.rounds)
        self.assertEqual(fault_soak.parse_args(
            ["s.yaml", "--decay-rounds", "0"]).decay_rounds, 0)


class CreateWatchTest(unittest.TestCase):
    def test_sees_the_matching_name_and_not_the_others(self):
        with tempfile.TemporaryDirectory() as folder:
            watch = fault_soak.CreateWatch(folder)
            try:
                def create():
                    time.sleep(0.05)
                    open(os.path.join(folder, "a.ckpt"), "w").close()
                    open(os.path.join(folder, "a.ckpt.tmp.00ff"), "w").close()
                threading.Thread(target=create).start()
                self.assertEqual(watch.wait(".tmp.", 5), "a.ckpt.tmp.00ff")
                self.assertIsNone(watch.wait(".tmp.", 0.1))
            finally:
                watch.close()


if __name__ == "__main__":
    unittest.main()
