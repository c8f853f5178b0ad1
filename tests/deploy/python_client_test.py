#!/usr/bin/env python3
"""ctest python_client_test: deploy/python/gasloc_client against real
processes: one gasloc-coordinator and two gasloc-worker daemons on loopback
(free ports), a tiny job started, watched to FINISHED and its workers
listed; list_jobs, stop_job, errors, and the example script. The daemons
check bearer tokens (docs/security.md): the client sends the operator's,
and a client without one is refused.

Environment (set by tests/deploy/CMakeLists.txt):
  GASLOC_BIN_DIR  folder with gasloc-coordinator and gasloc-worker
  PYTHONPATH      deploy/python and the generated stubs (BUILD/python)
"""

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import grpc

from gasloc_client import Client, event_kind_name, state_name
from gasloc_client.client import coordinator_pb2

BIN_DIR = os.environ.get("GASLOC_BIN_DIR", "")
SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
# Text every Debian system carries (the default corpus of local_cluster.sh).
CORPUS = "/usr/share/common-licenses"
ROUNDS = 6


def wait_port(log, process, timeout=20.0):
    """The port from the 'listening on port N' line the daemons print."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(log, encoding="utf-8", errors="replace") as f:
            m = re.search(r"listening on port (\d+)", f.read())
        if m:
            return int(m.group(1))
        if process.poll() is not None:
            raise RuntimeError(f"{log}: exited with {process.returncode}")
        time.sleep(0.05)
    raise RuntimeError(f"{log}: no port after {timeout} s")


def tiny_spec(directory, min_workers, rounds=ROUNDS, name="python-client"):
    return {
        "name": name,
        "model": {"layers": 1, "d_model": 32, "heads": 2, "context": 32},
        "training": {"batch": 8, "threads": 1,
                     "adamw": {"lr": 3e-3, "warmup_steps": 5}},
        "data": {"corpus_path": CORPUS, "eval_windows": 16,
                 "eval_interval_rounds": 2},
        "outer": {"algorithm": "ALGORITHM_GASLOC", "local_steps": 8},
        "exchange": {"deadline_ms": 5000, "chunk_bytes": 16384},
        "checkpoint": {"directory": os.path.join(directory, "ckpt"),
                       "interval_rounds": 3},
        "stop": {"max_rounds": rounds},
        "min_workers": min_workers,
    }


class PythonClientTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="gasloc-python-client-")
        cls.processes = []

        def start(name, argv):
            log = os.path.join(cls.dir, name + ".log")
            with open(log, "w") as out:
                p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, OMP_WAIT_POLICY="PASSIVE"))
            cls.processes.append(p)
            return wait_port(log, p)

        def token_file(name):
            path = os.path.join(cls.dir, name)
            with open(path, "w") as f:
                f.write(f"{name}-{os.urandom(16).hex()}\n")
            return path

        cls.operator_token_file = token_file("operator-token")
        worker_token_file = token_file("worker-token")
        peer_token_file = token_file("peer-token")
        # The coordinator's own, for relaying a model export from a worker
        # (gaslocctl job export; job_export_test.py).
        coordinator_token_file = token_file("coordinator-token")
        port = start("coordinator", [
            os.path.join(BIN_DIR, "gasloc-coordinator"), "--listen=127.0.0.1:0",
            "--db=" + os.path.join(cls.dir, "coordinator.sqlite"),
            "--lease_ms=3000",
            "--operator_token_file=" + cls.operator_token_file,
            "--worker_token_file=" + worker_token_file,
            "--export_token_file=" + coordinator_token_file])
        cls.address = f"127.0.0.1:{port}"
        for i in range(2):
            start(f"worker{i}", [
                os.path.join(BIN_DIR, "gasloc-worker"),
                "--coordinator=" + cls.address, "--listen=127.0.0.1:0",
                "--threads=1", "--worker_token_file=" + worker_token_file,
                "--peer_token_file=" + peer_token_file,
                "--coordinator_token_file=" + coordinator_token_file])
        with open(cls.operator_token_file, encoding="utf-8") as f:
            cls.client = Client(cls.address, timeout=10, token=f.read().split()[0])

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        # Workers first (they leave), then the coordinator.
        for p in cls.processes[1:] + cls.processes[:1]:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        if os.environ.get("GASLOC_KEEP_TEST_DIR") is None:
            subprocess.run(["rm", "-rf", cls.dir], check=False)

    def wait_for_workers(self, n, timeout=20.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if len(self.client.list_workers()) >= n:
                return
            time.sleep(0.1)
        self.fail(f"fewer than {n} workers registered; logs in {self.dir}")

    def test_1_start_watch_to_finished_and_list_workers(self):
        self.wait_for_workers(2)
        job = self.client.start_job(tiny_spec(self.dir, min_workers=2))
        self.assertGreater(job.job_id, 0)
        self.assertIn(state_name(job.state), ("PENDING", "RUNNING"))

        # watch() is a generator: SNAPSHOT first, the job's end last.
        events = []
        deadline = time.monotonic() + 120
        for event in self.client.watch(job.job_id):
            events.append(event)
            self.assertLess(time.monotonic(), deadline,
                            f"job still {state_name(event.job.state)} after "
                            f"120 s; logs in {self.dir}")
        kinds = [event_kind_name(e.kind) for e in events]
        self.assertEqual(kinds[0], "SNAPSHOT", kinds)
        self.assertIn("ROUND", kinds)
        self.assertEqual(kinds[-1], "STATE", kinds)
        self.assertEqual(events[-1].job.state, coordinator_pb2.JOB_STATE_FINISHED,
                         f"{events[-1].job.message}; logs in {self.dir}")
        rounds = [e.job.rounds_completed for e in events]
        self.assertEqual(rounds, sorted(rounds), "rounds_completed went back")

        final = self.client.get_job(job.job_id)
        self.assertEqual(state_name(final.state), "FINISHED")
        self.assertEqual(final.rounds_completed, ROUNDS)
        self.assertGreater(final.tokens, 0)
        self.assertGreater(final.val_bpb, 0)

        workers = self.client.list_workers(job_id=job.job_id)
        self.assertEqual(sorted(w.worker_id for w in workers),
                         sorted(final.worker_ids))
        self.assertEqual(len(workers), 2)
        for w in workers:
            self.assertEqual(w.state, coordinator_pb2.WORKER_STATE_ALIVE)
            self.assertRegex(w.info.address, r"^127\.0\.0\.1:\d+$")
        self.assertIn(job.job_id, [j.job_id for j in self.client.list_jobs()])

    def test_2_stop_a_pending_job(self):
        job = self.client.start_job(tiny_spec(self.dir, min_workers=5,
                                              name="never-starts"))
        self.assertEqual(state_name(job.state), "PENDING")
        stopped = self.client.stop_job(job.job_id, reason="test")
        self.assertEqual(state_name(stopped.state), "STOPPED")
        # The stream of an ended job: its snapshot, then the end.
        kinds = [event_kind_name(e.kind) for e in self.client.watch(job.job_id)]
        self.assertEqual(kinds[0], "SNAPSHOT")
        with self.assertRaises(grpc.RpcError) as raised:
            self.client.stop_job(job.job_id)
        self.assertEqual(raised.exception.code(),
                         grpc.StatusCode.FAILED_PRECONDITION)

    def test_3_errors_carry_the_coordinators_status(self):
        with self.assertRaises(grpc.RpcError) as raised:
            self.client.get_job(999999)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.NOT_FOUND)
        spec = tiny_spec(self.dir, min_workers=1, name="bad")
        spec["outer"]["alpha"] = 2
        with self.assertRaises(grpc.RpcError) as raised:
            self.client.start_job(spec)
        self.assertEqual(raised.exception.code(),
                         grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("alpha", raised.exception.details())
        with Client(self.address, timeout=10) as anonymous:
            with self.assertRaises(grpc.RpcError) as raised:
                anonymous.list_jobs()
            self.assertEqual(raised.exception.code(),
                             grpc.StatusCode.UNAUTHENTICATED)

    def test_4_example_script_runs_a_job_to_the_end(self):
        self.wait_for_workers(2)
        example = os.path.join(SOURCE_DIR, "deploy", "python", "examples",
                               "train_tiny.py")
        run = subprocess.run(
            [sys.executable, example, "--coordinator", self.address,
             "--corpus", CORPUS, "--checkpoint-dir",
             os.path.join(self.dir, "example-ckpt"), "--rounds", "3",
             "--threads", "1", "--token-file", self.operator_token_file],
            capture_output=True, text=True, timeout=120)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        self.assertRegex(run.stdout, r"job \d+ FINISHED: 3 rounds")
        self.assertRegex(run.stdout, r"worker \d+ at 127\.0\.0\.1:\d+")


if __name__ == "__main__":
    if not os.path.isfile(os.path.join(BIN_DIR, "gasloc-coordinator")):
        sys.exit(f"python_client_test: GASLOC_BIN_DIR={BIN_DIR!r} has no "
                 "gasloc-coordinator")
    unittest.main(verbosity=2)
