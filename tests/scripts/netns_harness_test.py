#!/usr/bin/env python3
"""Unit tests of the namespace harness's pure parts (no root, no network).

scripts/netns_harness/scenario.py: defaults, counts, clear errors;
scripts/netns_harness/results.py: worker-log and metrics parsing.
Run: python3 tests/scripts/netns_harness_test.py SOURCE_DIR
"""
import os
import sys
import tempfile
import types
import unittest

SOURCE = sys.argv.pop(1) if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(SOURCE, "scripts"))
from netns_harness import results, scenario  # noqa: E402
import netns_cluster  # noqa: E402


def write(text):
    f = tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False)
    f.write(text)
    f.close()
    return f.name


class ScenarioTest(unittest.TestCase):
    def test_defaults_and_count(self):
        s = scenario.load(write(
            "stop: {max_rounds: 3}\n"
            "defaults: {rate_mbit: 24, cpu: 0.45}\n"
            "workers:\n  - {count: 3}\n  - {rate_mbit: 2.4, kill_at_s: 9}\n"))
        self.assertEqual([w.index for w in s.workers], [1, 2, 3, 4])
        self.assertEqual([w.link.rate_mbit for w in s.workers],
                         [24, 24, 24, 2.4])
        self.assertEqual(s.workers[3].cpu, 0.45)
        self.assertEqual(s.workers[3].kill_at_s, 9)
        self.assertEqual(s.workers[0].partition_for_s, 10)
        self.assertEqual(s.local_steps, 40)
        self.assertEqual(s.exchange_chunk_bytes, 0)  # the job's default
        self.assertEqual(s.checkpoint_every, 0)  # no checkpoints

    def test_checkpoint_every(self):
        s = scenario.load(write("stop: {max_rounds: 3}\n"
                                "checkpoint_every: 2\nworkers: [{}]\n"))
        self.assertEqual(s.checkpoint_every, 2)
        self.assert_error("stop: {max_rounds: 3}\ncheckpoint_every: -1\n"
                          "workers: [{}]\n", "checkpoint_every=-1")

    def test_shipped_scenarios_load(self):
        folder = os.path.join(SOURCE, "bench", "scenarios")
        for name in sorted(os.listdir(folder)):
            s = scenario.load(os.path.join(folder, name))
            self.assertEqual(len(s.workers), 4, name)
            # Several chunks a copy, or the wire time is not measurable.
            self.assertEqual(s.exchange_chunk_bytes, 65536, name)

    def test_diloco_eager_job_spec(self):
        """--algorithm diloco-eager: DiLoCo's overlapped all-reduce with
        eager updates (outer.overlap_update), with or without -h<N>."""
        folder = os.path.join(SOURCE, "bench", "scenarios")
        sc = scenario.load(os.path.join(folder, sorted(os.listdir(folder))[0]))
        for name, h in (("diloco-eager", sc.local_steps),
                        ("diloco-eager-h240", 240)):
            args = types.SimpleNamespace(algorithm=name, corpus=None,
                                         rounds=None, seed=4)
            run = types.SimpleNamespace(sc=sc, args=args)
            outer = netns_cluster.Run.job_spec(run)["outer"]
            self.assertEqual(outer["algorithm"], "ALGORITHM_DILOCO", name)
            self.assertEqual(outer["localSteps"], h, name)
            self.assertTrue(outer["overlapExchange"], name)
            self.assertEqual(outer["overlapUpdate"], "OVERLAP_UPDATE_EAGER",
                             name)
        args = types.SimpleNamespace(algorithm="diloco-overlap", corpus=None,
                                     rounds=None, seed=4)
        outer = netns_cluster.Run.job_spec(
            types.SimpleNamespace(sc=sc, args=args))["outer"]
        self.assertTrue(outer["overlapExchange"])
        self.assertNotIn("overlapUpdate", outer)
        # Eager updates at a lower outer momentum (-mu).
        args = types.SimpleNamespace(algorithm="diloco-eager-mu0.3-h80",
                                     corpus=None, rounds=None, seed=4)
        outer = netns_cluster.Run.job_spec(
            types.SimpleNamespace(sc=sc, args=args))["outer"]
        self.assertEqual(outer["mu"], 0.3)
        self.assertEqual(outer["localSteps"], 80)
        self.assertEqual(outer["overlapUpdate"], "OVERLAP_UPDATE_EAGER")
        self.assertNotIn("mu", netns_cluster.Run.job_spec(types.SimpleNamespace(
            sc=sc, args=types.SimpleNamespace(algorithm="diloco-eager",
                                              corpus=None, rounds=None,
                                              seed=4)))["outer"])
        # Streaming DiLoCo's merge, its weight left to the spec's default.
        args = types.SimpleNamespace(algorithm="diloco-streaming-h240",
                                     corpus=None, rounds=None, seed=4)
        outer = netns_cluster.Run.job_spec(
            types.SimpleNamespace(sc=sc, args=args))["outer"]
        self.assertEqual(outer["localSteps"], 240)
        self.assertTrue(outer["overlapExchange"])
        self.assertEqual(outer["overlapUpdate"], "OVERLAP_UPDATE_MERGE")
        self.assertNotIn("overlapMergeAlpha", outer)
        # The INT8 exchange, with the overlap kept for gasloc-overlap-int8.
        for name, algorithm, overlap in (
                ("gasloc-overlap-int8", "ALGORITHM_GASLOC", True),
                ("diloco-int8-h240", "ALGORITHM_DILOCO", False)):
            args = types.SimpleNamespace(algorithm=name, corpus=None,
                                         rounds=None, seed=4)
            spec = netns_cluster.Run.job_spec(
                types.SimpleNamespace(sc=sc, args=args))
            self.assertEqual(spec["outer"]["algorithm"], algorithm, name)
            self.assertEqual(spec["outer"].get("overlapExchange", False),
                             overlap, name)
            self.assertEqual(spec["exchange"]["encoding"],
                             "WIRE_ENCODING_INT8", name)
        args = types.SimpleNamespace(algorithm="gasloc-overlap", corpus=None,
                                     rounds=None, seed=4)
        self.assertNotIn("encoding", netns_cluster.Run.job_spec(
            types.SimpleNamespace(sc=sc, args=args))["exchange"])

    def assert_error(self, text, *needles):
        path = write(text)
        with self.assertRaises(scenario.ScenarioError) as e:
            scenario.load(path)
        for needle in (path,) + needles:
            self.assertIn(needle, str(e.exception))

    def test_errors_name_the_field(self):
        self.assert_error("stop: {max_rounds: 3}\nworkers: [{rate: 1}]\n",
                          "unknown key(s) ['rate']", "workers[1]")
        self.assert_error("stop: {max_rounds: 3}\nworkers: [{cpu: -1}]\n",
                          "workers[1].cpu=-1")
        self.assert_error("stop: {max_rounds: 3}\nworkers: []\n",
                          "workers must be a non-empty list")
        self.assert_error("workers: [{}]\n", "stop needs at least one")
        self.assert_error("stop: {max_rounds: 3}\nworkers: [{join_at_s: 5}]\n",
                          "no worker starts at time 0")
        self.assert_error("stop: {max_rounds: x}\nworkers: [{}]\n",
                          "stop.max_rounds must be an integer")
        self.assert_error("workers: [\n", "not valid YAML")


# Lines as worker/daemon/worker_daemon.cc writes them.
LOG = "".join(f"I20261203 13:29:{t} worker/daemon/worker_daemon.cc:1] {m}\n"
              for t, m in (
    ("00.000000", "registered as worker 7 (name w)"),
    ("01.000000", "job 1 round 0 (epoch 1): H=80 (no measurement yet), "
                  "1 peer(s), 0 in ring"),
    ("03.500000", "job 1 round 0: exchanging"),
    ("04.000000", "job 1 round 0 done: loss 4.5, val bpb 0, exchange 0.5 s, "
                  "peer distance 1.2, 0 failed peer(s)"),
    ("04.100000", "job 1 round 1 (epoch 1): H=25 (s_i=25 steps/s (0.90x "
                  "fastest), c_i=2.54 s, T=3.55 s: H_i=25), 1 peer(s), "
                  "0 in ring"),
    ("06.000000", "job 1 round 1: exchanging"),
    # Workers that report wire and waiting time (issue 16 item 1).
    ("08.000000", "job 1 round 1 done: loss 4.1, val bpb 3.9, exchange 2 s, "
                  "wire 0.5 s, waiting 1.5 s, peer distance 1.1, 1 failed "
                  "peer(s)"),
    ("08.100000", "job 1 round 2 (epoch 1): H=30 (s_i=25 steps/s), 1 "
                  "peer(s), 0 in ring")))

METRICS = """\
# HELP gasloc_worker_peer_wait_seconds_total x
gasloc_worker_peer_wait_seconds_total{job_id="1",worker_id="7"} 2.5
gasloc_worker_round_duration_seconds_sum{job_id="1",worker_id="7"} 10
gasloc_worker_inner_phase_duration_seconds_sum{job_id="1",worker_id="7"} 6
gasloc_worker_exchange_duration_seconds_sum{job_id="1",worker_id="7"} 4
gasloc_worker_peer_sent_bytes_total{job_id="1",worker_id="7"} 1e+06
"""


class ResultsTest(unittest.TestCase):
    def test_worker_log(self):
        ids, rounds = results.parse_worker_log(LOG)
        self.assertEqual(ids, [7])
        self.assertEqual(len(rounds), 3)
        first, second, third = rounds
        self.assertEqual(first["H"], 80)
        self.assertAlmostEqual(first["compute_s"], 2.5)
        self.assertAlmostEqual(first["round_s"], 3.0)
        self.assertEqual(first["exchange_s"], 0.5)
        self.assertEqual(second["H"], 25)
        self.assertIn("c_i=2.54 s", second["reason"])
        self.assertNotIn("wire_s", first)
        self.assertEqual((second["exchange_s"], second["wire_s"],
                          second["wait_s"], second["failed_peers"]),
                         (2.0, 0.5, 1.5, 1))
        self.assertNotIn("exchange_s", third)  # not done yet

    def test_metrics(self):
        totals = results.worker_totals(results.parse_metrics(METRICS))
        self.assertEqual(totals["wait_fraction"], 0.25)
        self.assertEqual(totals["sent_bytes"], 1000000)
        self.assertEqual(totals["wire_to_compute"], 0.25)  # (4 - 2.5) / 6
        with_wire = results.parse_metrics(
            METRICS + 'gasloc_worker_exchange_wire_seconds_total{job_id="1"} '
            "3\n")
        self.assertEqual(results.worker_totals(with_wire)["wire_to_compute"],
                         0.5)  # 3 / 6


if __name__ == "__main__":
    unittest.main()
