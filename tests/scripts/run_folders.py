"""Synthetic results folders, as scripts/netns_cluster.py writes them (the
parts scripts/netns_compare.py and bench/crossover_map.py read), for the
unit tests of those tools."""
import json
import os

ONE_FAST_WORKER = [{"rate_mbit": 24, "cpu": 1, "wait_fraction": 0.1,
                    "idle_fraction": 0.2, "sent_bytes": 2e6}]


def make_run(root, algorithm, seed, evals, build="b1", scenario="osl",
             workers=None):
    """A results folder under root: evals are (seconds, bpb) pairs, the
    last one the final bpb; workers as summary.json lists them."""
    folder = os.path.join(root, f"{algorithm}-s{seed}")
    os.makedirs(folder)
    with open(os.path.join(folder, "summary.json"), "w") as f:
        json.dump({"scenario": scenario, "algorithm": algorithm, "seed": seed,
                   "state": "JOB_STATE_FINISHED", "build": build,
                   "wall_seconds": evals[-1][0], "tokens": 1000,
                   "final_val_bpb": evals[-1][1],
                   "workers": ONE_FAST_WORKER if workers is None else workers},
                  f)
    with open(os.path.join(folder, "progress.csv"), "w") as f:
        f.write("elapsed_s,tokens,val_bpb\n")
        for seconds, bpb in evals:
            f.write(f"{seconds},{int(seconds * 10)},{bpb}\n")
    with open(os.path.join(folder, "rounds.csv"), "w") as f:
        f.write("round,worker,H\n2,1,80\n")
    return folder
