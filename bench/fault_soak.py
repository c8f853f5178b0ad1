#!/usr/bin/env python3
"""Fault-injection soak (issue 18 item 5): one job, N injected faults.

Runs a scenario on the namespace harness (scripts/netns_cluster.py: real
coordinator and workers, each worker in its own network namespace) and,
while the job trains, injects faults one after the other, drawn evenly and
in a seeded order from:

  kill_inner        SIGKILL of a worker during its inner steps
  kill_exchange     SIGKILL of a worker as it enters its exchange
  kill_checkpoint   SIGKILL of a worker while it writes a checkpoint (its
                    checkpoint folder is watched with inotify; the kill
                    follows the temp file's creation)
  coordinator_kill  SIGKILL of the coordinator, restarted 2 s later on the
                    same database
  partition         a worker's link down for 10 s, then up
  stream_cut        a worker's TCP connections to and from peers destroyed
                    (`ss -K`) as it enters its exchange
  disk_full         a worker's checkpoint folder (a tmpfs of its own) filled
                    until its next checkpoint fails, then freed

A killed worker is started again 1 s later with the same --data_dir (same
stable identity). Each fault must recover: the victim completes a round
after the fault ended (for the coordinator: the job's rounds_completed
moves on) within --fault-deadline seconds, else the soak counts a hang and
stops.
At the end it checks every checkpoint left (each loads: checksums, bounds,
finite values), counts stale temp files, checks that the validation bpb
fell, and writes, beside the harness's results:

  faults.csv   one row per fault: kind, victim, in-phase or not, recovery
               seconds, job rounds during recovery, tokens lost
  soak.json    totals, the per-kind table and the checks
  soak.md      the per-kind table as Markdown (docs/benchmarks.md)

  sudo bench/fault_soak.py SCENARIO.yaml [--faults 100] [--seed 1]
       [--spacing 6] [--out DIR] [--build DIR]

Exit codes as scripts/netns_cluster.py; 1 also when a check fails.
docs/benchmarks.md ("Fault-injection soak") has the measured run.
"""
import argparse
import collections
import csv
import ctypes
import glob
import json
import os
import random
import select
import signal
import struct
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "scripts"))
import netns_cluster as harness  # noqa: E402
from netns_harness import net, results  # noqa: E402

KINDS = ("kill_inner", "kill_exchange", "kill_checkpoint", "coordinator_kill",
         "partition", "stream_cut", "disk_full")
WORKER_PORT = harness.WORKER_PORT
RESTART_AFTER_S = 1.0
COORDINATOR_RESTART_AFTER_S = 2.0
PARTITION_S = 10.0
PHASE_WAIT_S = 30.0    # how long a phase-targeted fault waits for its phase
TMPFS_MIB = 24         # each worker's checkpoint folder
FAULT_FIELDS = ["n", "kind", "victim", "inject_unix", "job_round", "in_phase",
                "detail", "recovered", "recovery_s", "rounds_during",
                "tokens_lost"]


def log(message):
    print(f"fault_soak: {message}", flush=True)


def plan_faults(kinds, count, rng):
    """count fault kinds, each of `kinds` as often as possible (within
    one), in an order drawn from rng."""
    plan = [kinds[i % len(kinds)] for i in range(count)]
    rng.shuffle(plan)
    return plan


class CreateWatch:
    """inotify on one folder: waits for a created name containing `part`.

    Not thread-safe; one owner. close() releases the descriptor.
    """
    IN_CREATE = 0x100
    IN_NONBLOCK = 0o4000
    IN_CLOEXEC = 0o2000000

    def __init__(self, folder):
        self.libc = ctypes.CDLL("libc.so.6", use_errno=True)
        self.fd = self.libc.inotify_init1(self.IN_NONBLOCK | self.IN_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        if self.libc.inotify_add_watch(self.fd, folder.encode(),
                                       self.IN_CREATE) < 0:
            err = ctypes.get_errno()
            os.close(self.fd)
            raise OSError(err, f"inotify_add_watch {folder}")

    def wait(self, part, seconds):
        """The first created name containing part, or None after seconds."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self.fd], [], [], left)
            if not ready:
                break
            data = os.read(self.fd, 65536)
            offset = 0
            while offset + 16 <= len(data):
                _wd, _mask, _cookie, length = struct.unpack_from(
                    "iIII", data, offset)
                name = data[offset + 16:offset + 16 + length].rstrip(b"\0")
                offset += 16 + length
                if part in name.decode("utf-8", "replace"):
                    return name.decode("utf-8", "replace")
        return None

    def close(self):
        os.close(self.fd)


class SoakRun(harness.Run):
    """A harness run that injects the soak's faults from apply_events.

    Main thread only, like Run. Faults run one at a time: the next is
    injected once the previous recovered and the job reached its target
    round (--spacing rounds apart).
    """

    def __init__(self, sc, args, prefix):
        super().__init__(sc, args, prefix)
        self.rng = random.Random(args.seed)
        self.plan = plan_faults(args.kinds, args.faults, self.rng)
        self.faults = []       # records, in order
        self.active = None     # the fault being recovered
        self.job_round = 0
        self.mounts = {}       # worker index -> tmpfs path
        self.soak_error = None
        self.stopped_by_soak = False

    def job_spec(self):
        spec = super().job_spec()
        if self.args.decay_rounds:
            # The soak ends the job itself (stop_after_tail), at no limit
            # the coordinator knows: the cosine's horizon is the round
            # the soak expects to stop at, in steps (a ROUNDS horizon).
            spec["training"]["adamw"]["decaySteps"] = str(
                self.args.decay_rounds * self.sc.local_steps)
        if self.args.gamma is not None:
            spec["outer"]["gamma"] = self.args.gamma
        if self.args.placement is not None:
            spec["outer"]["momentumPlacement"] = (
                "MOMENTUM_PLACEMENT_" + self.args.placement.upper())
        return spec

    # -- set-up: each worker's checkpoint folder is a tmpfs --------------
    def checkpoint_dir(self, index):
        return os.path.join(self.out, f"worker{index}", harness.CHECKPOINT_DIR)

    def start_worker(self, w):
        path = self.checkpoint_dir(w.index)
        if w.index not in self.mounts:
            os.makedirs(path, exist_ok=True)
            net.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_MIB}m",
                     f"{self.prefix}ckpt{w.index}", path])
            self.mounts[w.index] = path
        return super().start_worker(w)

    def release(self):
        # Before the harness's removal by prefix (which would also find
        # them): the checkpoints were checked in write_results.
        for source, point in net.mounts(self.prefix):
            net.run(["umount", "-l", point], check=False)
        self.mounts_left = net.mounts(self.prefix)

    def record_progress(self, job, elapsed):
        self.job_round = int(job.get("rounds_completed", 0))
        super().record_progress(job, elapsed)

    # -- log reading -----------------------------------------------------
    def worker_log(self, index):
        path = os.path.join(self.out, "logs", f"worker{index}.log")
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def wait_for_line(self, index, needle, seconds):
        """Waits for a new line containing needle in worker index's log."""
        path = os.path.join(self.out, "logs", f"worker{index}.log")
        start = os.path.getsize(path) if os.path.exists(path) else 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with open(path, "rb") as f:
                f.seek(start)
                if needle.encode() in f.read():
                    return True
            time.sleep(0.002)
        return False

    def last_round(self, index):
        """The victim's latest round row (results.parse_worker_log)."""
        _, rows = results.parse_worker_log(self.worker_log(index))
        return rows[-1] if rows else None

    def tokens_of(self, row):
        return row["H"] * self.sc.batch * self.sc.model["context"]

    # -- the faults ------------------------------------------------------
    def live_indices(self):
        return [w.index for w in self.live_workers()]

    def worker(self, index):
        return next(w for w in self.sc.workers if w.index == index)

    def kill_worker(self, index):
        self.procs[f"worker{index}"].kill()
        self.procs[f"worker{index}"].wait()

    def inject(self, kind):
        rec = {"n": len(self.faults) + 1, "kind": kind, "victim": "",
               "inject_unix": time.time(), "job_round": self.job_round,
               "in_phase": True, "detail": "", "recovered": False,
               "recovery_s": "", "rounds_during": "", "tokens_lost": 0}
        rec["restore_at"] = rec["inject_unix"]  # when the fault ends
        if kind == "coordinator_kill":
            rec["victim"] = "coordinator"
            self.procs["coordinator"].kill()
            self.procs["coordinator"].wait()
            rec["restore_at"] += COORDINATOR_RESTART_AFTER_S
            rec["pending"] = "restart_coordinator"
        else:
            index = self.rng.choice(self.live_indices())
            rec["victim"] = f"w{index}"
            getattr(self, "inject_" + kind)(rec, index)
        log(f"fault {rec['n']}/{len(self.plan)}: {kind} on {rec['victim']} "
            f"at job round {rec['job_round']}"
            f"{'' if rec['in_phase'] else ' (out of phase)'}"
            f"{': ' + rec['detail'] if rec['detail'] else ''}")
        self.faults.append(rec)
        self.active = rec

    def after_kill(self, rec, index, started):
        """Tokens of the round the kill cut short; schedules the restart."""
        row = self.last_round(index)
        if row is not None and "done_unix" not in row:
            rec["tokens_lost"] = self.tokens_of(row)
            rec["detail"] = rec["detail"] or f"in round {row['round']}"
        rec["restore_at"] = time.time() + RESTART_AFTER_S
        rec["pending"] = "restart_worker"
        rec["index"] = index
        rec["phase_ok"] = started

    def inject_kill_inner(self, rec, index):
        # Inner steps: the latest round has started and is not exchanging.
        deadline = time.monotonic() + PHASE_WAIT_S
        computing = False
        while time.monotonic() < deadline:
            row = self.last_round(index)
            if row is not None and "compute_s" not in row and \
                    "done_unix" not in row:
                computing = True
                break
            time.sleep(0.01)
        self.kill_worker(index)
        rec["in_phase"] = computing
        self.after_kill(rec, index, computing)

    def inject_kill_exchange(self, rec, index):
        entered = self.wait_for_line(index, ": exchanging", PHASE_WAIT_S)
        self.kill_worker(index)
        row = self.last_round(index)
        rec["in_phase"] = entered and row is not None and \
            "done_unix" not in row
        self.after_kill(rec, index, entered)

    def inject_kill_checkpoint(self, rec, index):
        watch = CreateWatch(self.checkpoint_dir(index))
        try:
            name = watch.wait(".tmp.", PHASE_WAIT_S)
            self.kill_worker(index)
        finally:
            watch.close()
        tmp = os.path.join(self.checkpoint_dir(index), name) if name else ""
        # The temp file still there: the kill landed before the rename.
        rec["in_phase"] = bool(name) and os.path.exists(tmp)
        rec["detail"] = (f"temp file {name} left" if rec["in_phase"] else
                         "the write finished first" if name else
                         "no checkpoint write seen")
        self.after_kill(rec, index, rec["in_phase"])

    def inject_partition(self, rec, index):
        net.run(["ip", "link", "set", f"{self.worker_ns[index]}h", "down"])
        rec["restore_at"] = time.time() + PARTITION_S
        rec["pending"] = "heal"
        rec["index"] = index

    def inject_stream_cut(self, rec, index):
        entered = self.wait_for_line(index, ": exchanging", PHASE_WAIT_S)
        done = subprocess.run(
            ["ip", "netns", "exec", self.worker_ns[index], "ss", "-K", "-t",
             f"( sport = :{WORKER_PORT} or dport = :{WORKER_PORT} )"],
            capture_output=True, text=True, check=False)
        cut = max(0, len(done.stdout.strip().splitlines()) - 1)
        rec["in_phase"] = entered and cut > 0
        rec["detail"] = f"{cut} connection(s) destroyed"
        rec["index"] = index
        row = self.last_round(index)
        rec["cut_round"] = row["round"] if row else -1

    def inject_disk_full(self, rec, index):
        # Filled once is not full for long: each checkpoint first deletes
        # the oldest kept file, which frees exactly the room of the next
        # write. So the filler keeps taking every block freed until the
        # worker logs a failed checkpoint (or PHASE_WAIT_S passes).
        folder = self.checkpoint_dir(index)
        filler = os.path.join(folder, "soak-filler")
        log_path = os.path.join(self.out, "logs", f"worker{index}.log")
        start = os.path.getsize(log_path)
        block = b"\0" * (64 << 10)
        failed = False
        deadline = time.monotonic() + PHASE_WAIT_S
        next_look = 0.0
        with open(filler, "wb", buffering=0) as f:
            while time.monotonic() < deadline:
                try:
                    f.write(block)
                    continue
                except OSError:
                    pass  # full: look at the log, then try again
                if time.monotonic() >= next_look:
                    next_look = time.monotonic() + 0.02
                    with open(log_path, "rb") as lf:
                        lf.seek(start)
                        if b"checkpoint failed" in lf.read():
                            failed = True
                            break
                time.sleep(0.0005)
        os.remove(filler)
        rec["in_phase"] = failed
        rec["detail"] = ("a checkpoint failed, training went on" if failed
                         else "no checkpoint failed while full")
        rec["index"] = index

    # -- recovery ----------------------------------------------------------
    def restore(self, rec):
        pending = rec.pop("pending", None)
        if pending == "restart_coordinator":
            self.retired.append(self.procs["coordinator"])
            self.start_coordinator()
        elif pending == "restart_worker":
            name = f"worker{rec['index']}"
            self.retired.append(self.procs[name])
            self.start_worker(self.worker(rec["index"]))
        elif pending == "heal":
            net.run(["ip", "link", "set",
                     f"{self.worker_ns[rec['index']]}h", "up"])
        rec["restored_unix"] = time.time()
        rec["round_at_restore"] = self.job_round

    def recovered(self, rec):
        """A worker fault: the victim completed a round after the fault
        ended. The coordinator: the job's rounds_completed moved on since
        the restart. (rounds_completed is the slowest member's progress,
        so a worker that is still joining holds it back: a worker fault's
        recovery is the victim's own round, not the job's.)"""
        if "restored_unix" not in rec:
            return False
        if rec["victim"] == "coordinator":
            return self.job_round > rec["round_at_restore"]
        _, rows = results.parse_worker_log(self.worker_log(rec["index"]))
        return any(r.get("done_unix", 0) > rec["restored_unix"] for r in rows)

    def finish(self, rec):
        rec["recovered"] = True
        rec["recovery_s"] = round(time.time() - rec["inject_unix"], 2)
        rec["rounds_during"] = self.job_round - rec["job_round"]
        rec["round_recovered"] = self.job_round
        if rec["kind"] == "stream_cut" and rec.get("cut_round", -1) >= 0:
            _, rows = results.parse_worker_log(self.worker_log(rec["index"]))
            cut = [r for r in rows if r["round"] == rec["cut_round"]]
            if cut and "done_unix" not in cut[0]:
                rec["tokens_lost"] = self.tokens_of(cut[0])
        self.active = None

    def target_round(self, k):
        """Fault k's round: on the --spacing grid, and at least --gap
        rounds after the previous fault recovered (a slow recovery shifts
        the rest; the grid's slack takes it back)."""
        grid = self.args.first_round + k * self.args.spacing
        if not self.faults:
            return grid
        return max(grid, self.faults[-1]["round_recovered"] + self.args.gap)

    def apply_events(self, elapsed, done):
        super().apply_events(elapsed, done)
        rec = self.active
        if rec is not None:
            if "restored_unix" not in rec and \
                    time.time() >= rec["restore_at"]:
                self.restore(rec)
            if self.recovered(rec):
                self.finish(rec)
            elif time.time() - rec["inject_unix"] > self.args.fault_deadline:
                self.soak_error = (
                    f"fault {rec['n']} ({rec['kind']} on {rec['victim']}) "
                    f"not recovered after {self.args.fault_deadline:.0f} s")
                raise harness.HarnessError(self.soak_error)
            return
        k = len(self.faults)
        if k >= len(self.plan):
            self.stop_after_tail()
            return
        if self.job_round < self.target_round(k):
            return
        if len(self.live_indices()) < len(self.sc.workers):
            return  # a worker is still starting
        self.inject(self.plan[k])

    def stop_after_tail(self):
        """Stops the job --tail job rounds after the last fault recovered.

        The end is set by the faults, not by a round fixed in advance:
        recoveries shift the later faults (a partition or a killed
        exchange can take 20 job rounds), and a fixed stop.max_rounds let
        the job finish before the last fault was injected (CI, 9 of 10).
        stop.max_rounds stays as a bound on a run whose faults never end.
        """
        if self.stopped_by_soak or not self.faults or \
                self.job_round < self.faults[-1]["round_recovered"] + \
                self.args.tail:
            return
        try:
            self.ctl("job", "stop", str(self.job_id),
                     f"--reason=fault soak: {len(self.faults)} fault(s) "
                     f"recovered and {self.args.tail} rounds after the last")
        except harness.HarnessError as e:
            log(f"stopping the job failed, retrying: {e}")
            return
        self.stopped_by_soak = True
        log(f"job stopped at job round {self.job_round}, "
                    f"{self.args.tail} rounds after the last fault recovered")

    # -- results -----------------------------------------------------------
    def check_checkpoints(self):
        """(files loaded, corrupt [(path, error)], stale temp files)."""
        loaded, corrupt, stale = 0, [], []
        bench = os.path.join(self.args.build, "bench", "gasloc-bench")
        spec = os.path.join(self.out, "job.json")
        for index in sorted(self.mounts):
            folder = self.checkpoint_dir(index)
            for path in sorted(glob.glob(os.path.join(folder, "*"))):
                base = os.path.basename(path)
                if ".tmp." in base:
                    stale.append(path)
                    continue
                if ".ckpt" not in base:
                    continue
                done = subprocess.run(
                    [bench, "consensus", f"--spec={spec}", "--threads=1",
                     f"--checkpoints={path}"],
                    capture_output=True, text=True, check=False)
                loaded += 1
                if done.returncode != 0:
                    corrupt.append((path, done.stderr.strip()[-300:]))
        return loaded, corrupt, stale

    def worker_log_counts(self):
        counts = collections.Counter()
        for w in self.sc.workers:
            text = self.worker_log(w.index)
            counts["non_finite"] += text.count("non-finite")
            counts["checkpoint_refused"] += text.count(
                "not used, trying the previous one")
            counts["resumed_from_checkpoint"] += text.count("resumed from")
            counts["joined_with_model"] += text.count(
                "joined with the model of worker")
        return counts

    def write_results(self, state):
        super().write_results(state)
        bpb = [float(p["val_bpb"]) for p in self.progress
               if p["val_bpb"] != ""]
        third = max(1, len(bpb) // 3)
        falling = (len(bpb) >= 3 and bpb[-1] < bpb[0] and
                   sum(bpb[-third:]) / third < sum(bpb[:third]) / third)
        loaded, corrupt, stale = self.check_checkpoints()
        counts = self.worker_log_counts()
        by_kind = {}
        for kind in KINDS:
            recs = [r for r in self.faults if r["kind"] == kind]
            rec_s = [r["recovery_s"] for r in recs if r["recovered"]]
            by_kind[kind] = {
                "faults": len(recs),
                "in_phase": sum(1 for r in recs if r["in_phase"]),
                "recovered": len(rec_s),
                "recovery_s_mean": (round(sum(rec_s) / len(rec_s), 2)
                                    if rec_s else None),
                "recovery_s_max": max(rec_s) if rec_s else None,
                "rounds_during_mean": (round(sum(
                    r["rounds_during"] for r in recs if r["recovered"]) /
                    len(rec_s), 1) if rec_s else None),
                "tokens_lost": sum(r["tokens_lost"] for r in recs),
            }
        # A fault still recovering when the job ended (its victim was
        # rejoining as the last rounds ran) is not a hang unless it had
        # already been going for longer than the deadline.
        now = time.time()
        hangs = sum(1 for r in self.faults if not r["recovered"] and
                    now - r["inject_unix"] > self.args.fault_deadline)
        open_at_end = sum(1 for r in self.faults if not r["recovered"]) - hangs
        summary = {
            "state": state, "faults_planned": len(self.plan),
            "faults_injected": len(self.faults), "hangs": hangs,
            "recovering_when_the_job_ended": open_at_end,
            "checkpoints_loaded": loaded, "checkpoints_corrupt": len(corrupt),
            "corrupt": corrupt, "stale_temp_files": len(stale),
            "non_finite_log_lines": counts["non_finite"],
            "checkpoints_refused_on_load": counts["checkpoint_refused"],
            "resumed_from_checkpoint": counts["resumed_from_checkpoint"],
            "joined_with_model": counts["joined_with_model"],
            "val_bpb_first": bpb[0] if bpb else None,
            "val_bpb_last": bpb[-1] if bpb else None,
            "loss_falling": falling, "by_kind": by_kind,
            "error": self.soak_error,
        }
        checks = {
            # The soak's own stop ends a run once the faults are done;
            # the job reaching stop.max_rounds first is fine as well.
            "job finished": state == "JOB_STATE_FINISHED" or (
                state == "JOB_STATE_STOPPED" and self.stopped_by_soak),
            "every fault injected": len(self.faults) == len(self.plan),
            "no hang": hangs == 0,
            "no corrupt checkpoint": not corrupt and loaded > 0,
            "no non-finite value": counts["non_finite"] == 0,
            "validation bpb fell": falling,
        }
        summary["checks"] = checks
        summary["passed"] = all(checks.values())
        with open(os.path.join(self.out, "soak.json"), "w",
                  encoding="utf-8") as f:
            json.dump(summary, f, indent=2)
        with open(os.path.join(self.out, "faults.csv"), "w", newline="",
                  encoding="utf-8") as f:
            writer = csv.DictWriter(f, FAULT_FIELDS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(self.faults)
        table = ["| fault | injected | in phase | recovered | recovery s "
                 "(mean / max) | job rounds during recovery (mean) | "
                 "tokens lost |", "| --- | ---: | ---: | ---: | ---: | ---: "
                 "| ---: |"]
        for kind, k in by_kind.items():
            table.append(
                f"| {kind} | {k['faults']} | {k['in_phase']} | "
                f"{k['recovered']} | {k['recovery_s_mean']} / "
                f"{k['recovery_s_max']} | {k['rounds_during_mean']} | "
                f"{k['tokens_lost']:,} |")
        with open(os.path.join(self.out, "soak.md"), "w",
                  encoding="utf-8") as f:
            f.write("\n".join(table) + "\n")
        print("\n".join(table))
        log(f"{len(self.faults)} of {len(self.plan)} fault(s), {hangs} "
            f"hang(s), {open_at_end} still recovering at the end; {loaded} checkpoint(s) loaded, {len(corrupt)} "
            f"corrupt, {len(stale)} stale temp file(s); val bpb "
            f"{summary['val_bpb_first']} -> {summary['val_bpb_last']}")
        for name, ok in checks.items():
            log(f"{'ok  ' if ok else 'FAIL'} {name}")
        for path, error in corrupt:
            log(f"corrupt: {path}: {error}")
        self.passed = summary["passed"]


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", help="scenario YAML file "
                   "(bench/scenarios/fault_soak.yaml)")
    p.add_argument("--faults", type=int, default=100)
    p.add_argument("--seed", type=int, default=1,
                   help="the job's seed and the faults' order and victims")
    p.add_argument("--kinds", default=",".join(KINDS),
                   help="comma-separated fault kinds to draw from "
                   f"(default: all of {', '.join(KINDS)})")
    p.add_argument("--spacing", type=int, default=15,
                   help="job rounds between the starts of two faults (a "
                   "killed worker's recovery takes ~10-13 rounds here)")
    p.add_argument("--gap", type=int, default=2,
                   help="at least this many job rounds after a recovery "
                   "before the next fault")
    p.add_argument("--first-round", type=int, default=3,
                   help="job round of the first fault")
    p.add_argument("--tail", type=int, default=12,
                   help="job rounds the job runs on after the last fault "
                   "recovered; then the soak stops it")
    p.add_argument("--fault-deadline", type=float, default=120,
                   help="seconds a fault may take to recover (else a hang)")
    p.add_argument("--rounds", type=int, default=None,
                   help="stop.max_rounds, a bound only (default: twice "
                   "the faults' grid plus --tail)")
    p.add_argument("--decay-rounds", type=int, default=None,
                   help="job rounds the learning rate anneals over "
                   "(adamw.decay_steps = this x H; then it stays at the "
                   "floor). Default: the round the soak expects to stop "
                   "at, --first-round + faults x --spacing + --tail; 0 = "
                   "over stop.max_rounds, a bound the soak never reaches "
                   "(no annealing: the soak before issue 32)")
    p.add_argument("--gamma", type=float, default=None,
                   help="the job's outer.gamma (GASLoC momentum; default: "
                   "the job spec's default)")
    p.add_argument("--placement", default=None,
                   choices=["local", "mixed", "pseudo_gradient"],
                   help="the job's outer.momentum_placement (default: the "
                   "job spec's default)")
    p.add_argument("--out")
    p.add_argument("--build", default=os.path.join(REPO, "build", "release"))
    p.add_argument("--poll", type=float, default=0.5)
    p.add_argument("--timeout", type=float, default=7200)
    args = p.parse_args(argv)
    if args.faults < 1 or args.spacing < 1:
        p.error("--faults and --spacing must be at least 1")
    args.kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(args.kinds) - set(KINDS))
    if unknown or not args.kinds:
        p.error(f"--kinds: unknown {unknown}; known: {', '.join(KINDS)}")
    args.algorithm, args.corpus, args.cleanup = "gasloc", None, False
    if args.rounds is None:
        # A bound: the soak stops the job --tail rounds after the last
        # fault recovered, wherever recoveries shifted it to.
        args.rounds = (args.first_round + 2 * args.faults * args.spacing +
                       args.tail)
    if args.decay_rounds is None:
        # Where the soak stops with no fault shifting the grid (a late
        # recovery stops it later, at the floor rate).
        args.decay_rounds = (args.first_round + args.faults * args.spacing +
                             args.tail)
    if args.decay_rounds < 0:
        p.error("--decay-rounds must be at least 0")
    return args


def main(argv):
    args = parse_args(argv)
    sc, rc = harness.prepare(args)
    if sc is None:
        return rc
    if not sc.checkpoint_every:
        log(f"{args.scenario}: the soak needs checkpoint_every > 0")
        return 2
    run = SoakRun(sc, args, f"{harness.BASE_PREFIX}{os.getpid()}-")
    run.passed = False
    rc = harness.execute(run)
    return rc if rc != 0 else (0 if run.passed else 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
