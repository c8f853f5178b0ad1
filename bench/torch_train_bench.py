#!/usr/bin/env python3
"""PyTorch side of `gasloc-bench train --compare-torch`.

Trains the independent PyTorch implementation of the gasloc model
(tests/worker/model/torch_reference.py, build_model) with the same config,
batch, thread count and optimizer (AdamW, decay on matrices only, clipping
at 1.0) as the C++ trainer, and prints one progress line per step and ONE
final JSON line: tokens_per_s (median after warm-up), ms_per_step,
peak_rss_bytes, params, blas (the BLAS library actually mapped, so a run on
the reference BLAS is visible), torch_version.

fp32 runs through the BLAS that torch links (OpenBLAS via Debian's
libblas.so.3 alternative when libopenblas0-openmp is installed); bf16 runs
under torch.autocast("cpu", dtype=torch.bfloat16), which uses oneDNN.

Run with Debian's /usr/bin/python3 (python3-torch, numpy).
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "tests", "worker", "model"))
from torch_reference import build_model, tensor_table  # noqa: E402


def mapped_blas():
    libs = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1] if len(line.split()) >= 6 else ""
            base = os.path.basename(path)
            if "blas" in base or "openblas" in path:
                libs.add(os.path.realpath(path))
    return sorted(libs)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--d-model", type=int, required=True)
    p.add_argument("--heads", type=int, required=True)
    p.add_argument("--ctx", type=int, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--data", required=True)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    config = dict(layers=a.layers, d_model=a.d_model, heads=a.heads,
                  context=a.ctx)
    model = build_model(config)
    decay = {name for name, _, wd in tensor_table(config) if wd}
    named = dict(model.named_parameters())
    groups = [
        {"params": [t for n, t in named.items() if n in decay],
         "weight_decay": 0.1},
        {"params": [t for n, t in named.items() if n not in decay],
         "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    data = np.fromfile(a.data, dtype=np.uint8)
    train = data[: int(len(data) * 0.9)]
    rng = np.random.default_rng(a.seed)
    T = a.ctx
    times = []
    for step in range(a.steps):
        starts = rng.integers(0, len(train) - T - 1, size=a.batch)
        batch = torch.from_numpy(
            np.stack([train[s:s + T + 1] for s in starts]).astype(np.int64))
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        if a.dtype == "bf16":
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = model(batch[:, :-1], batch[:, 1:])
        else:
            loss = model(batch[:, :-1], batch[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        dt = time.perf_counter() - t0
        times.append(dt)
        print(f"torch step {step + 1}/{a.steps} loss {loss.item():.4f} "
              f"ms {dt * 1e3:.1f} tok/s {a.batch * T / dt:.0f}", flush=True)
    measured = times[a.warmup:] if len(times) > a.warmup else times
    median = statistics.median(measured)
    print(json.dumps({
        "tokens_per_s": a.batch * T / median,
        "ms_per_step": median * 1e3,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "params": sum(t.numel() for t in model.parameters()),
        "dtype": a.dtype,
        "threads": torch.get_num_threads(),
        "blas": mapped_blas(),
        "torch_version": torch.__version__,
    }), flush=True)


if __name__ == "__main__":
    main()
