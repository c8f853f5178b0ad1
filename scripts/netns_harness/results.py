"""The results folder of a harness run: CSV files from logs and metrics.

    rounds.csv    one row per (worker, round) from the worker logs: H_i and
                  the planner's reason, compute and exchange seconds, loss
    workers.csv   one row per worker from its last metrics scrape: wait
                  fraction, bytes moved, compute and exchange totals
    progress.csv  one row per completed round of the job (coordinator):
                  elapsed seconds, tokens, validation bpb
    summary.json  the run's settings and the figures printed at the end

Pure functions of text (logs, Prometheus exposition) plus CSV writers; safe
from any thread as long as two callers do not write the same file.
"""
import csv
import datetime
import re

_LOG_LINE = re.compile(
    r"^[IWE](\d{8} \d{2}:\d{2}:\d{2}\.\d{6}) \S+\] (.*)$")
_REGISTERED = re.compile(r"registered as worker (\d+)")
_ROUND_START = re.compile(
    r"job (\d+) round (\d+) \(epoch \d+\): H=(\d+) \((.*)\), (\d+) peer")
_EXCHANGING = re.compile(r"job (\d+) round (\d+): exchanging")
# "wire W s, waiting Z s" only from workers that report their wire time.
_ROUND_DONE = re.compile(
    r"job (\d+) round (\d+) done: loss (\S+), val bpb (\S+), exchange (\S+) "
    r"s,(?: wire (\S+) s, waiting (\S+) s,)? peer distance \S+, (\d+) "
    r"failed")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)")


def _unix(stamp):
    when = datetime.datetime.strptime(stamp, "%Y%m%d %H:%M:%S.%f")
    return when.replace(tzinfo=datetime.timezone.utc).timestamp()


def parse_worker_log(text):
    """(worker ids, rounds) from a worker's log; rounds: list of dicts."""
    ids = []
    rounds = {}
    for line in text.splitlines():
        m = _LOG_LINE.match(line)
        if not m:
            continue
        t, msg = _unix(m.group(1)), m.group(2)
        if r := _REGISTERED.search(msg):
            ids.append(int(r.group(1)))
        elif r := _ROUND_START.search(msg):
            key = (int(r.group(1)), int(r.group(2)))
            rounds[key] = {"job": key[0], "round": key[1],
                           "worker_id": ids[-1] if ids else "",
                           "H": int(r.group(3)), "reason": r.group(4),
                           "peers": int(r.group(5)), "start_unix": t}
        elif r := _EXCHANGING.search(msg):
            row = rounds.get((int(r.group(1)), int(r.group(2))))
            if row is not None:
                row["compute_s"] = t - row["start_unix"]
        elif r := _ROUND_DONE.search(msg):
            row = rounds.get((int(r.group(1)), int(r.group(2))))
            if row is not None:
                row.update(done_unix=t, round_s=t - row["start_unix"],
                           loss=float(r.group(3)), val_bpb=float(r.group(4)),
                           exchange_s=float(r.group(5)),
                           failed_peers=int(r.group(8)))
                if r.group(6) is not None:
                    row.update(wire_s=float(r.group(6)),
                               wait_s=float(r.group(7)))
    return ids, sorted(rounds.values(), key=lambda r: r["round"])


def parse_metrics(text):
    """{metric name: sum over its samples} from Prometheus text."""
    totals = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        totals[m.group(1)] = totals.get(m.group(1), 0.0) + value
    return totals


def worker_totals(metrics):
    """The per-worker figures of workers.csv from parse_metrics()."""
    def get(name):
        return metrics.get("gasloc_worker_" + name, 0.0)
    compute = get("inner_phase_duration_seconds_sum")
    exchange = get("exchange_duration_seconds_sum")
    wait = get("peer_wait_seconds_total")
    # Workers that measure their wire time export it; else exchange - wait.
    wire = metrics.get("gasloc_worker_exchange_wire_seconds_total",
                       exchange - wait)
    round_s = get("round_duration_seconds_sum")
    return {
        "rounds": int(get("outer_rounds_total")),
        "inner_steps": int(get("inner_steps_total")),
        "tokens": int(get("tokens_total")),
        "compute_s": round(compute, 3),
        "exchange_s": round(exchange, 3),
        "wait_s": round(wait, 3),
        "round_s": round(round_s, 3),
        "wait_fraction": round(wait / round_s, 4) if round_s > 0 else "",
        # Round time not spent on inner steps (exchange, wait, outer update,
        # evaluation): what an all-reduce behind a slow link costs a fast
        # worker, which its peer-wait metric does not count.
        "idle_fraction": (round(1 - compute / round_s, 4) if round_s > 0
                          else ""),
        "sent_bytes": int(get("peer_sent_bytes_total")),
        "received_bytes": int(get("peer_received_bytes_total")),
        # Wire time (the exchange without the wait for partners) over
        # compute: the ratio a scenario is tuned by.
        "wire_to_compute": (round(wire / compute, 3) if compute > 0
                            else ""),
    }


def write_csv(path, rows, fields):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow(row)


ROUND_FIELDS = ["worker", "worker_id", "job", "round", "H", "peers",
                "compute_s", "exchange_s", "wire_s", "wait_s", "round_s",
                "loss", "val_bpb",
                "failed_peers", "start_unix", "done_unix", "reason"]
WORKER_FIELDS = ["worker", "worker_ids", "rate_mbit", "delay_ms", "loss_pct",
                 "cpu", "rounds", "inner_steps", "tokens", "compute_s",
                 "exchange_s", "wait_s", "round_s", "wait_fraction",
                 "idle_fraction",
                 "sent_bytes", "received_bytes", "wire_to_compute"]
PROGRESS_FIELDS = ["elapsed_s", "unix", "round", "tokens", "val_bpb",
                   "train_loss"]
