#!/usr/bin/env python3
"""ctest job_export_test (issue 35's acceptance): a finished 2-worker job,
exported and loaded by deploy/python/gasloc_model.py.

One gasloc-coordinator and two gasloc-worker daemons on loopback (the
harness of python_client_test.py) run a DiLoCo job on
tests/data/tinyshakespeare.txt (all-reduce: both replicas hold the same
model after every round) that checkpoints after its last round. Then
`gasloc-train export` of each member's final checkpoint must give, in
plain PyTorch:

  * the C++ model's next-byte logits (gasloc-train logits on the same
    checkpoint) within 1e-4;
  * the job's final validation bpb (the coordinator's mean of the members'
    last reports) to 3 decimals;

and `--checkpoint=A,B` (the members' mean) the same model again. So must
`gaslocctl job export` (through the coordinator, which relays a member's
Peer.FetchModel with its own coordinator token: no access to the workers'
files), one member's and the members' mean (--average). A GASLoC job,
whose members end with different models, checks that --average is the
mean exactly (the tensors of `gasloc-train export --checkpoint=A,B`), and
that an unknown job or a worker that is not a member is refused by name.

Environment (tests/deploy/CMakeLists.txt): GASLOC_BIN_DIR, PYTHONPATH with
deploy/python and the generated stubs.
"""
import glob
import json
import os
import subprocess
import sys
import time
import unittest

import gasloc_model
import python_client_test
from gasloc_client import state_name
from gasloc_client.client import coordinator_pb2

BIN_DIR = python_client_test.BIN_DIR
CORPUS = os.path.join(python_client_test.SOURCE_DIR,
                      "tests/data/tinyshakespeare.txt")
ROUNDS = 4
EVAL_WINDOWS = 16


def gaslocctl(harness, *args, check=True):
    out = subprocess.run([os.path.join(BIN_DIR, "gaslocctl"),
                          "--coordinator=" + harness.address,
                          "--token_file=" + harness.operator_token_file, *args],
                         capture_output=True, text=True, timeout=120)
    if check and out.returncode != 0:
        raise AssertionError(f"gaslocctl {' '.join(args)}: {out.stderr}")
    return out


def gasloc_train(*args):
    out = subprocess.run([os.path.join(BIN_DIR, "gasloc-train"), *args],
                         capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, OMP_NUM_THREADS="1"))
    if out.returncode != 0:
        raise AssertionError(f"gasloc-train {args[0]}: {out.stderr}")
    return out.stdout


class JobExportTest(unittest.TestCase):
    # The coordinator and two workers of python_client_test (token auth).
    Harness = python_client_test.PythonClientTest
    setUpClass = Harness.__dict__["setUpClass"]
    tearDownClass = Harness.__dict__["tearDownClass"]
    wait_for_workers = Harness.wait_for_workers

    def run_job(self, algorithm, name):
        """A finished 2-worker job of `algorithm`: (status, checkpoints)."""
        self.wait_for_workers(2)
        spec = python_client_test.tiny_spec(self.dir, min_workers=2,
                                            rounds=ROUNDS, name=name)
        spec["outer"] = {"algorithm": algorithm, "local_steps": 8}
        spec["data"] = {"corpus_path": CORPUS, "eval_windows": EVAL_WINDOWS}
        spec["checkpoint"]["interval_rounds"] = ROUNDS
        job = self.client.start_job(spec)
        deadline = time.monotonic() + 120
        while True:
            status = self.client.get_job(job.job_id)
            if status.state in (coordinator_pb2.JOB_STATE_FINISHED,
                                coordinator_pb2.JOB_STATE_FAILED):
                break
            self.assertLess(time.monotonic(), deadline,
                            f"job {state_name(status.state)}; logs in {self.dir}")
            time.sleep(0.2)
        self.assertEqual(status.state, coordinator_pb2.JOB_STATE_FINISHED,
                         f"{status.message}; logs in {self.dir}")
        checkpoints = sorted(glob.glob(os.path.join(
            self.dir, "ckpt", f"job{job.job_id}-*.ckpt")))
        self.assertEqual(len(checkpoints), 2, checkpoints)
        return status, checkpoints

    def test_a_finished_two_worker_job_exports_to_pytorch(self):
        status, checkpoints = self.run_job("ALGORITHM_DILOCO", "export")

        with open(CORPUS, "rb") as f:
            corpus = f.read()
        prompt = gasloc_model.split_corpus(corpus, 0.9)[500:532]
        exports = [(c, os.path.join(self.dir, f"export{i}"))
                   for i, c in enumerate(checkpoints)]
        exports.append((",".join(checkpoints),
                        os.path.join(self.dir, "export-mean")))
        for checkpoint, out in exports:
            gasloc_train("export", f"--checkpoint={checkpoint}", f"--out={out}")
        # The same model taken out through the coordinator: one member's,
        # and the members' mean.
        for extra, name in (([], "export-ctl"), (["--average"], "export-ctl-mean")):
            out = os.path.join(self.dir, name)
            printed = gaslocctl(self, "job", "export", str(status.job_id),
                                f"--out={out}", *extra).stdout
            print(printed.strip())
            self.assertIn("FINISHED", printed)
            exports.append((checkpoints[0], out))
        for checkpoint, out in exports:
            model, config = gasloc_model.load_exported(out)
            bpb = gasloc_model.validation_bpb(model, corpus, 0.9, EVAL_WINDOWS)
            print(f"{os.path.basename(out)}: val_bpb job {status.val_bpb:.6f} "
                  f"PyTorch {bpb:.6f}")
            self.assertLess(abs(bpb - status.val_bpb), 5e-4)
            cpp = json.loads(gasloc_train(
                "logits", f"--checkpoint={checkpoint.split(',')[0]}",
                "--threads=1", "--prompt=" + prompt.decode("ascii")))["logits"]
            torch_logits = gasloc_model.next_byte_logits(model, prompt).tolist()
            diff = max(abs(a - b) for rc, rt in zip(cpp, torch_logits)
                       for a, b in zip(rc, rt))
            print(f"{os.path.basename(out)}: max |logit difference| {diff:.3g}")
            self.assertLessEqual(diff, 1e-4)
            if "ctl" in out:
                self.assertEqual(config["gasloc"]["metrics"]["rounds_completed"],
                                 ROUNDS)
                self.assertEqual(config["gasloc"]["job_id"], str(status.job_id))
            else:
                self.assertEqual(config["gasloc"]["metrics"]["step"], ROUNDS * 8)

    def test_gasloc_members_average_exactly_and_bad_requests_are_named(self):
        status, checkpoints = self.run_job("ALGORITHM_GASLOC", "export-gasloc")
        mean = os.path.join(self.dir, "gasloc-mean-train")
        gasloc_train("export", "--checkpoint=" + ",".join(checkpoints),
                     f"--out={mean}")
        relayed = os.path.join(self.dir, "gasloc-mean-ctl")
        gaslocctl(self, "job", "export", str(status.job_id), f"--out={relayed}",
                  "--average")
        a, _ = gasloc_model.load_exported(mean)
        b, config = gasloc_model.load_exported(relayed)
        self.assertEqual(config["gasloc"]["metrics"]["members"], 2)
        for (name, x), (_, y) in zip(a.state_dict().items(),
                                     b.state_dict().items()):
            self.assertTrue(bool((x == y).all()), f"{name} differs")
        # The members' own models differ (gossip), so the mean is a mean.
        # A path JSON must escape, and the JSON answer names it exactly.
        one = os.path.join(self.dir, 'gasloc "one" ctl')
        answer = json.loads(gaslocctl(
            self, "--output=json", "job", "export", str(status.job_id),
            f"--out={one}", f"--worker={status.worker_ids[0]}").stdout)
        self.assertEqual(answer["out"], one)
        self.assertEqual(answer["worker_ids"], [status.worker_ids[0]])
        c, _ = gasloc_model.load_exported(one)
        self.assertFalse(all(bool((x == y).all()) for x, y in zip(
            a.state_dict().values(), c.state_dict().values())))

        unknown = gaslocctl(self, "job", "export", "987654",
                            f"--out={self.dir}/none", check=False)
        self.assertEqual(unknown.returncode, 1)
        self.assertIn("job 987654 not found", unknown.stderr)
        stranger = gaslocctl(self, "job", "export", str(status.job_id),
                             f"--out={self.dir}/none", "--worker=424242",
                             check=False)
        self.assertEqual(stranger.returncode, 1)
        self.assertIn("worker 424242 is not a member", stranger.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.dir, "none")))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
