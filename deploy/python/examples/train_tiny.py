#!/usr/bin/env python3
"""Starts a small gasloc job, follows it to the end, prints the result.

    PYTHONPATH=deploy/python:build/release/python \\
      python3 deploy/python/examples/train_tiny.py --coordinator HOST:7070 \\
      --corpus /usr/share/common-licenses --workers 2 --rounds 10 \\
      [--token-file FILE] [--tls-ca PEM --tls-cert PEM --tls-key PEM]

The corpus path (a text file or a folder of them) and the checkpoint folder
are read and written by the workers, so they must exist on the workers'
machines (in Kubernetes: under /data and /var/lib/gasloc). Ctrl-C stops the
job. Exit status: 0 when the job FINISHED, 1 otherwise.
"""

import argparse
import sys

from gasloc_client import Client, print_event, state_name
from gasloc_client.client import coordinator_pb2


def tiny_spec(args):
    # A 1-layer, 32-wide model: a round takes about a second on one core.
    return {
        "name": args.name,
        "model": {"layers": 1, "d_model": 32, "heads": 2, "context": 32},
        "training": {"batch": 8, "threads": args.threads,
                     "adamw": {"lr": 3e-3, "warmup_steps": 5}},
        "data": {"corpus_path": args.corpus, "eval_windows": 16,
                 "eval_interval_rounds": 2},
        "outer": {"algorithm": "ALGORITHM_GASLOC", "local_steps": 8},
        "exchange": {"deadline_ms": 5000},
        "checkpoint": {"directory": args.checkpoint_dir, "interval_rounds": 5},
        "stop": {"max_rounds": args.rounds},
        "min_workers": args.workers,
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--coordinator", default="localhost:7070")
    parser.add_argument("--corpus", default="/usr/share/common-licenses")
    parser.add_argument("--checkpoint-dir", default="/var/lib/gasloc/checkpoints")
    parser.add_argument("--workers", type=int, default=2, help="min_workers")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--threads", type=int, default=0,
                        help="compute threads per worker (0 = each worker's "
                             "--threads, in Kubernetes its CPU request)")
    parser.add_argument("--name", default="python-tiny")
    parser.add_argument("--token-file",
                        help="operator bearer token (first token of the file)")
    parser.add_argument("--tls-ca", help="PEM root of the coordinator")
    parser.add_argument("--tls-cert", help="PEM operator certificate")
    parser.add_argument("--tls-key", help="PEM key of --tls-cert")
    args = parser.parse_args()

    def read(path):
        if path is None:
            return None
        with open(path, "rb") as f:
            return f.read()

    token = None
    if args.token_file:
        with open(args.token_file, encoding="utf-8") as f:
            token = next(line.split()[0] for line in f
                         if line.strip() and not line.startswith("#"))
    with Client(args.coordinator, token=token,
                root_certificates=read(args.tls_ca),
                private_key=read(args.tls_key),
                certificate_chain=read(args.tls_cert)) as client:
        job = client.start_job(tiny_spec(args))
        print(f"started job {job.job_id} ({state_name(job.state)})", flush=True)
        try:
            final = client.wait(job.job_id, on_event=print_event)
        except KeyboardInterrupt:
            final = client.stop_job(job.job_id, reason="Ctrl-C in train_tiny.py")
        print(f"job {final.job_id} {state_name(final.state)}: "
              f"{final.rounds_completed} rounds, {final.tokens} tokens, "
              f"val_bpb {final.val_bpb:.4f} {final.message}")
        for w in client.list_workers(job_id=final.job_id):
            print(f"  worker {w.worker_id} at {w.info.address} "
                  f"({w.info.hostname}, {w.info.cores} cores)")
        return 0 if final.state == coordinator_pb2.JOB_STATE_FINISHED else 1


if __name__ == "__main__":
    sys.exit(main())
