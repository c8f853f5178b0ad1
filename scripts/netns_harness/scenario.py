"""Scenario files of the namespace harness: load, fill defaults, check.

A scenario is a YAML mapping (format in docs/heterogeneity.md). load()
returns a Scenario whose every field is set and checked; a bad file raises
ScenarioError naming the file, the field and what was wrong. Pure: no
side effects, safe from any thread.
"""
import dataclasses
import os

import yaml


class ScenarioError(ValueError):
    """A scenario file that cannot be run; the message says why."""


@dataclasses.dataclass
class Link:
    rate_mbit: float  # tbf rate, each direction
    delay_ms: float   # netem delay, each direction (RTT = 2x)
    loss_pct: float   # netem loss, each direction


@dataclasses.dataclass
class Worker:
    index: int          # 1-based, as in the namespace name w<index>
    link: Link
    cpu: float          # cores (cgroup quota); 0 = no cap
    join_at_s: float    # seconds after the job started; 0 = from the start
    leave_at_s: float   # SIGTERM (clean leave) at; 0 = never
    kill_at_s: float    # SIGKILL at; 0 = never
    partition_at_s: float   # its link goes down at; 0 = never
    partition_for_s: float  # ... and comes back after this many seconds
    restart_after_s: float  # after its leave or kill, starts again; 0 = no


@dataclasses.dataclass
class Scenario:
    name: str
    description: str
    path: str
    model: dict          # layers, d_model, heads, context
    batch: int
    threads: int         # compute threads per worker
    local_steps: int     # nominal H
    min_local_steps: int  # H_min; 0 = the job spec's default
    lr: float
    warmup: int
    eval_windows: int
    eval_every: int
    max_rounds: int
    max_tokens: int
    max_wall_seconds: int
    exchange_deadline_ms: int
    exchange_chunk_bytes: int  # 0 = the job spec's default (1 MiB)
    checkpoint_every: int  # rounds; 0 = no checkpoints (each worker's
                           # data_dir/ckpt otherwise)
    corpus: str          # relative to the repository root, or absolute
    workers: list
    coordinator_kill_at_s: float = 0       # SIGKILL of the coordinator; 0 = no
    coordinator_restart_after_s: float = 2  # ... started again this later


_TOP_KEYS = {"name", "description", "model", "training", "stop", "corpus",
             "defaults", "workers", "exchange_deadline_ms",
             "exchange_chunk_bytes", "checkpoint_every", "coordinator"}
_MODEL_KEYS = {"layers", "d_model", "heads", "context", "batch"}
_TRAINING_KEYS = {"threads", "local_steps", "min_local_steps", "lr", "warmup",
                  "eval_windows", "eval_every"}
_STOP_KEYS = {"max_rounds", "max_tokens", "max_wall_seconds"}
_WORKER_KEYS = {"rate_mbit", "delay_ms", "loss_pct", "cpu", "join_at_s",
                "leave_at_s", "kill_at_s", "partition_at_s",
                "partition_for_s", "restart_after_s", "count"}
_COORDINATOR_KEYS = {"kill_at_s", "restart_after_s"}


def _check_keys(where, mapping, allowed, path):
    if not isinstance(mapping, dict):
        raise ScenarioError(f"{path}: {where} must be a mapping, got "
                            f"{type(mapping).__name__}")
    unknown = sorted(set(mapping) - allowed)
    if unknown:
        raise ScenarioError(f"{path}: unknown key(s) {unknown} in {where} "
                            f"(allowed: {sorted(allowed)})")


def _number(where, value, path, low, high, integer=False):
    ok_type = int if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, ok_type):
        kind = "an integer" if integer else "a number"
        raise ScenarioError(f"{path}: {where} must be {kind}, got {value!r}")
    if not low <= value <= high:
        raise ScenarioError(f"{path}: {where}={value} is outside "
                            f"[{low}, {high}]")
    return value


def load(path):
    """Reads and checks the scenario at path; raises ScenarioError."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.safe_load(f)
    except OSError as e:
        raise ScenarioError(f"{path}: cannot read: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise ScenarioError(f"{path}: not valid YAML: {e}") from e
    _check_keys("the top level", raw, _TOP_KEYS, path)
    model = dict(raw.get("model", {}))
    _check_keys("model", model, _MODEL_KEYS, path)
    training = dict(raw.get("training", {}))
    _check_keys("training", training, _TRAINING_KEYS, path)
    stop = dict(raw.get("stop", {}))
    _check_keys("stop", stop, _STOP_KEYS, path)
    defaults = dict(raw.get("defaults", {}))
    _check_keys("defaults", defaults, _WORKER_KEYS - {"count"}, path)

    def num(where, mapping, key, default, low, high, integer=False):
        return _number(where, mapping.get(key, default), path, low, high,
                       integer)

    workers = []
    entries = raw.get("workers")
    if not isinstance(entries, list) or not entries:
        raise ScenarioError(f"{path}: workers must be a non-empty list")
    for n, entry in enumerate(entries, start=1):
        entry = entry or {}
        _check_keys(f"workers[{n}]", entry, _WORKER_KEYS, path)
        merged = {**defaults, **entry}
        where = f"workers[{n}]"
        count = num(f"{where}.count", merged, "count", 1, 1, 64, True)
        for _ in range(count):
            workers.append(Worker(
                index=len(workers) + 1,
                link=Link(
                    rate_mbit=num(f"{where}.rate_mbit", merged, "rate_mbit",
                                  0, 0, 100000),
                    delay_ms=num(f"{where}.delay_ms", merged, "delay_ms", 0,
                                 0, 10000),
                    loss_pct=num(f"{where}.loss_pct", merged, "loss_pct", 0,
                                 0, 100)),
                cpu=num(f"{where}.cpu", merged, "cpu", 0, 0, 1024),
                join_at_s=num(f"{where}.join_at_s", merged, "join_at_s", 0,
                              0, 86400),
                leave_at_s=num(f"{where}.leave_at_s", merged, "leave_at_s",
                               0, 0, 86400),
                kill_at_s=num(f"{where}.kill_at_s", merged, "kill_at_s", 0,
                              0, 86400),
                partition_at_s=num(f"{where}.partition_at_s", merged,
                                   "partition_at_s", 0, 0, 86400),
                partition_for_s=num(f"{where}.partition_for_s", merged,
                                    "partition_for_s", 10, 0.1, 86400),
                restart_after_s=num(f"{where}.restart_after_s", merged,
                                    "restart_after_s", 0, 0, 86400)))
    if len(workers) > 99:
        raise ScenarioError(f"{path}: {len(workers)} workers; at most 99 "
                            "(interface names have 15 characters)")
    if not any(w.join_at_s == 0 for w in workers):
        raise ScenarioError(f"{path}: no worker starts at time 0 (every "
                            "entry has join_at_s > 0)")
    name = raw.get("name", os.path.splitext(os.path.basename(path))[0])
    if not isinstance(name, str) or not name.replace("-", "").replace(
            "_", "").replace(".", "").isalnum():
        raise ScenarioError(f"{path}: name must be [A-Za-z0-9._-]+, got "
                            f"{name!r}")
    corpus = raw.get("corpus", "tests/data/tinyshakespeare.txt")
    if not isinstance(corpus, str) or not corpus:
        raise ScenarioError(f"{path}: corpus must be a path, got {corpus!r}")
    scenario = Scenario(
        name=name,
        description=str(raw.get("description", "")),
        path=path,
        model={"layers": num("model.layers", model, "layers", 2, 1, 64, True),
               "dModel": num("model.d_model", model, "d_model", 128, 8,
                             8192, True),
               "heads": num("model.heads", model, "heads", 4, 1, 128, True),
               "context": num("model.context", model, "context", 128, 8,
                              65536, True)},
        batch=num("model.batch", model, "batch", 8, 1, 4096, True),
        threads=num("training.threads", training, "threads", 1, 1, 256, True),
        local_steps=num("training.local_steps", training, "local_steps", 40,
                        1, 10**6, True),
        min_local_steps=num("training.min_local_steps", training,
                            "min_local_steps", 0, 0, 10**6, True),
        lr=num("training.lr", training, "lr", 0.002, 1e-9, 10),
        warmup=num("training.warmup", training, "warmup", 20, 0, 10**9, True),
        eval_windows=num("training.eval_windows", training, "eval_windows",
                         16, 1, 10**6, True),
        eval_every=num("training.eval_every", training, "eval_every", 5, 1,
                       10**6, True),
        max_rounds=num("stop.max_rounds", stop, "max_rounds", 0, 0, 10**9,
                       True),
        max_tokens=num("stop.max_tokens", stop, "max_tokens", 0, 0, 10**15,
                       True),
        max_wall_seconds=num("stop.max_wall_seconds", stop,
                             "max_wall_seconds", 0, 0, 10**7, True),
        exchange_deadline_ms=num("exchange_deadline_ms", raw,
                                 "exchange_deadline_ms", 60000, 100, 3600000,
                                 True),
        exchange_chunk_bytes=num("exchange_chunk_bytes", raw,
                                 "exchange_chunk_bytes", 0, 0, 3 << 20,
                                 True),
        checkpoint_every=num("checkpoint_every", raw, "checkpoint_every", 0,
                             0, 10**6, True),
        corpus=corpus,
        workers=workers)
    coordinator = dict(raw.get("coordinator", {}))
    _check_keys("coordinator", coordinator, _COORDINATOR_KEYS, path)
    scenario.coordinator_kill_at_s = num(
        "coordinator.kill_at_s", coordinator, "kill_at_s", 0, 0, 86400)
    scenario.coordinator_restart_after_s = num(
        "coordinator.restart_after_s", coordinator, "restart_after_s", 2,
        0.1, 86400)
    if not (scenario.max_rounds or scenario.max_tokens or
            scenario.max_wall_seconds):
        raise ScenarioError(f"{path}: stop needs at least one of "
                            "max_rounds, max_tokens, max_wall_seconds")
    if scenario.min_local_steps > scenario.local_steps:
        raise ScenarioError(f"{path}: training.min_local_steps="
                            f"{scenario.min_local_steps} is above "
                            f"local_steps={scenario.local_steps}")
    return scenario
