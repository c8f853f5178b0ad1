#!/usr/bin/env python3
"""Network-namespace cluster harness: one scenario file, one run.

Starts a coordinator and N workers on this machine, each worker in its own
network namespace on a private bridge with its own link rate, delay and loss
(tc) and CPU cap (cgroup), starts one job, applies the scenario's joins,
leaves, kills and partitions, prints progress, and writes a results folder.
Everything it creates is named "gl-<pid>-..." and removed on exit, on error
and on SIGINT/SIGTERM; --cleanup removes what a killed run left. Needs root.
docs/heterogeneity.md: scenario format, output, cleanup.

  scripts/netns_cluster.py SCENARIO.yaml [--algorithm A] [--seed N]
                           [--out DIR] [--build DIR] [--rounds R]
  scripts/netns_cluster.py --cleanup [--force]

Exit codes: 0 the job finished; 1 it failed or the harness hit an error;
2 bad usage or scenario; 3 not root (namespaces need it); 130 interrupted.
"""
import argparse
import fcntl
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns_harness import net, results  # noqa: E402
from netns_harness import scenario as scenario_file  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BASE_PREFIX = "gl-"
LOCK_FILE = "/run/gasloc-netns.lock"
COORDINATOR_PORT, WORKER_PORT = 7070, 7071
COORDINATOR_METRICS, WORKER_METRICS = 9464, 9465
# Every process runs without authentication (--insecure): the harness's
# traffic stays on the private bridge between the namespaces it created,
# and what a scenario measures is the links, not TLS (docs/heterogeneity.md).
INSECURE = ("--insecure",)
# --algorithm -> (Algorithm, BudgetPolicy or None for the default).
ALGORITHMS = {
    "gasloc": ("ALGORITHM_GASLOC", "BUDGET_POLICY_ADAPTIVE"),
    # Adaptive budgets, and inner steps during the exchange
    # (outer.overlap_exchange).
    "gasloc-overlap": ("ALGORITHM_GASLOC", "BUDGET_POLICY_ADAPTIVE"),
    "gasloc-uniform": ("ALGORITHM_GASLOC", "BUDGET_POLICY_UNIFORM"),
    # -int8: the INT8 exchange (exchange.encoding): compressed differences
    # against per-edge public copies for gossip, error feedback for the
    # all-reduce (docs/algorithms.md section 3).
    "gasloc-overlap-int8": ("ALGORITHM_GASLOC", "BUDGET_POLICY_ADAPTIVE"),
    "diloco": ("ALGORITHM_DILOCO", None),
    "diloco-int8": ("ALGORITHM_DILOCO", None),
    # DiLoCo with its all-reduce overlapped by inner steps (the same
    # outer.overlap_exchange rule as GASLoC's; docs/algorithms.md s.5).
    "diloco-overlap": ("ALGORITHM_DILOCO", None),
    # DiLoCo with eager updates (outer.overlap_update EAGER, Kale et al.
    # 2025): the outer step at H_i with the worker's own pseudo-gradient in
    # place of its share of the mean, the all-reduce beside the next inner
    # steps (docs/algorithms.md s.5).
    "diloco-eager": ("ALGORITHM_DILOCO", None),
    # Streaming DiLoCo's merge (outer.overlap_update MERGE, Douillard et
    # al. 2025): the overlapped all-reduce's result G merged with the live
    # model, theta <- 0.5 theta + 0.5 G (docs/algorithms.md s.5).
    "diloco-streaming": ("ALGORITHM_DILOCO", None),
    "dpsgd": ("ALGORITHM_DPSGD", None),
    "local-sgd": ("ALGORITHM_LOCAL_SGD", None),
    # The synchronous reference: one all-reduced gradient step a round.
    "data-parallel": ("ALGORITHM_DATA_PARALLEL", None),
}


def algorithm_options(name):
    """(base name, H or None, outer momentum or None, round lead or None,
    poisoning-guard ratio or None) of an --algorithm: a name of
    ALGORITHMS, optionally with "-lead<N>" for the gossip algorithms'
    round lead bound (outer.max_round_lead: gasloc-overlap-lead1), then
    "-guard<X>" for the gossip poisoning guard's ratio
    (exchange.poison_distance_ratio, 0 = off: gasloc-overlap-guard0), then
    "-mu<X>" for the all-reduce algorithms' outer momentum (outer.mu, in
    [0, 1): diloco-eager-mu0.3) and then "-h<N>" for that H in place of the
    scenario's (diloco-h240: DiLoCo tuned for wall-clock time)."""
    number = r"([0-9]*\.?[0-9]+)"
    match = re.fullmatch(
        rf"(.+?)(?:-lead([0-9]+))?(?:-guard{number})?(?:-mu{number})?"
        r"(?:-h([0-9]+))?", name)
    base, lead, guard, mu, h = match.groups()
    if base not in ALGORITHMS:
        raise argparse.ArgumentTypeError(
            f"unknown algorithm {name!r}: one of {', '.join(sorted(ALGORITHMS))}"
            ", optionally with -lead<N> and -guard<X> (gossip), -mu<X> "
            "(all-reduce algorithms) and -h<N>")
    if h is not None and int(h) <= 0:
        raise argparse.ArgumentTypeError(f"{name!r}: -h wants H >= 1")
    gossip = ALGORITHMS[base][0] in ("ALGORITHM_GASLOC", "ALGORITHM_DPSGD")
    if mu is not None:
        if gossip or base == "data-parallel":
            raise argparse.ArgumentTypeError(
                f"{name!r}: -mu sets outer.mu, the outer momentum of DiLoCo "
                "and local SGD")
        if not 0 <= float(mu) < 1:
            raise argparse.ArgumentTypeError(f"{name!r}: -mu wants [0, 1)")
    if lead is not None:
        if not gossip:
            raise argparse.ArgumentTypeError(
                f"{name!r}: -lead sets outer.max_round_lead, the round lead "
                "bound of the gossip algorithms (GASLoC, D-PSGD)")
        if int(lead) > 1000:
            raise argparse.ArgumentTypeError(f"{name!r}: -lead wants <= 1000")
    if guard is not None and not gossip:
        raise argparse.ArgumentTypeError(
            f"{name!r}: -guard sets exchange.poison_distance_ratio, the "
            "poisoning guard of the gossip algorithms (GASLoC, D-PSGD)")
    return (base, int(h) if h else None,
            float(mu) if mu is not None else None,
            int(lead) if lead is not None else None,
            float(guard) if guard is not None else None)


def algorithm_choice(name):
    """(base name, H or None) of an --algorithm (algorithm_options)."""
    base, h = algorithm_options(name)[:2]
    return base, h


def build_identity(server_dir):
    """12 hex digits of the SHA-256 of the coordinator's and the worker's
    binaries: runs of one table must share it (netns_compare.py)."""
    digest = hashlib.sha256()
    for binary in ("gasloc-coordinator", "gasloc-worker"):
        with open(os.path.join(server_dir, binary), "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:12]
CHECKPOINT_DIR = "ckpt"  # under each worker's data_dir
TERMINAL = {"JOB_STATE_FINISHED", "JOB_STATE_FAILED", "JOB_STATE_STOPPED"}


class Interrupted(Exception):
    """SIGINT or SIGTERM reached the harness."""


class HarnessError(RuntimeError):
    """The run cannot go on; the message says why."""


def log(message):
    print(f"netns_cluster: {message}", flush=True)


def child_env():
    """The children's environment: no proxy (gRPC and urllib honour it)."""
    env = {k: v for k, v in os.environ.items()
           if k.lower() not in ("http_proxy", "https_proxy", "grpc_proxy",
                                "all_proxy")}
    env["OMP_WAIT_POLICY"] = "PASSIVE"
    return env


class Run:
    """One harness run: network, processes, job, polling, results.

    Not thread-safe; used from the main thread only. stop() may be called at
    any point (also after a failed start) and is idempotent.
    """

    def __init__(self, sc, args, prefix):
        self.sc = sc
        self.args = args
        self.prefix = prefix
        self.out = args.out
        self.bin = os.path.join(args.build, "server")
        self.cluster = None
        self.procs = {}        # name -> Popen (the latest of that name)
        self.retired = []      # earlier Popens of restarted processes
        self.out_offset = {}   # name -> size of its .out at its last start
        self.metrics = {}      # worker index -> last parse_metrics()
        self.progress = []
        self.job_id = None
        self.job_start = None
        self.opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}))

    # -- set-up --------------------------------------------------------
    def setup_network(self):
        # Two harnesses starting at once must not pick the same subnet: the
        # pick and the bridge's address (its route) happen under one lock.
        with open(LOCK_FILE, "w", encoding="ascii") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            subnet = net.pick_subnet()
            self.cluster = net.Cluster(self.prefix, subnet)
            self.cluster.create_bridge()
        self.coordinator_ns = self.cluster.add_node("c", 2)
        self.coordinator = f"{self.cluster.ip_of(2)}:{COORDINATOR_PORT}"
        self.worker_ns, self.cgroups = {}, {}
        for w in self.sc.workers:
            shaped = (w.link if (w.link.rate_mbit or w.link.delay_ms or
                                 w.link.loss_pct) else None)
            self.worker_ns[w.index] = self.cluster.add_node(
                f"w{w.index}", 10 + w.index, shaped)
            if w.cpu > 0:
                self.cgroups[w.index] = self.cluster.add_cgroup(
                    f"w{w.index}", w.cpu)
        log(f"bridge {self.cluster.bridge} on 10.77.{subnet}.0/24, "
            f"{len(self.sc.workers)} worker namespace(s), prefix "
            f"{self.prefix}")

    def start(self, name, ns, argv, cgroup_procs=None):
        logs = os.path.join(self.out, "logs")
        out_path = os.path.join(logs, name + ".out")
        # A restarted process appends: wait_listening reads from here on.
        self.out_offset[name] = (os.path.getsize(out_path)
                                 if os.path.exists(out_path) else 0)
        stdout = open(out_path, "ab")
        stderr = open(os.path.join(logs, name + ".log"), "ab")

        def enter_cgroup():
            if cgroup_procs:
                with open(cgroup_procs, "w", encoding="ascii") as f:
                    f.write(str(os.getpid()))
        proc = subprocess.Popen(["ip", "netns", "exec", ns] + argv,
                                stdout=stdout, stderr=stderr,
                                env=child_env(), preexec_fn=enter_cgroup,
                                start_new_session=True)
        stdout.close()
        stderr.close()
        self.procs[name] = proc
        return proc

    def wait_listening(self, name, seconds=30):
        path = os.path.join(self.out, "logs", name + ".out")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with open(path, "rb") as f:
                f.seek(self.out_offset.get(name, 0))
                if b"listening on port" in f.read():
                    return
            if self.procs[name].poll() is not None:
                raise HarnessError(f"{name} exited with "
                                   f"{self.procs[name].returncode} before "
                                   f"listening; see logs/{name}.log")
            time.sleep(0.1)
        raise HarnessError(f"{name} not listening after {seconds} s; see "
                           f"logs/{name}.log")

    def start_coordinator(self):
        self.start("coordinator", self.coordinator_ns, [
            os.path.join(self.bin, "gasloc-coordinator"),
            f"--listen={self.coordinator}",
            f"--db={os.path.join(self.out, 'coordinator.sqlite')}",
            f"--metrics_port={COORDINATOR_METRICS}", *INSECURE])
        self.wait_listening("coordinator")

    def start_worker(self, w):
        ip = self.cluster.ip_of(10 + w.index)
        data_dir = os.path.join(self.out, f"worker{w.index}")
        os.makedirs(data_dir, exist_ok=True)
        name = f"worker{w.index}"
        self.start(name, self.worker_ns[w.index], [
            os.path.join(self.bin, "gasloc-worker"),
            f"--coordinator={self.coordinator}",
            f"--listen={ip}:{WORKER_PORT}", f"--advertise={ip}:{WORKER_PORT}",
            f"--threads={self.sc.threads}", f"--data_dir={data_dir}",
            f"--metrics_port={WORKER_METRICS}", *INSECURE],
            self.cgroups.get(w.index))
        return name

    def ctl(self, *argv):
        done = subprocess.run(
            [os.path.join(self.bin, "gaslocctl"),
             f"--coordinator={self.coordinator}", "--output=json", *INSECURE,
             *argv],
            capture_output=True, text=True, env=child_env(), check=False)
        if done.returncode != 0:
            raise HarnessError(f"gaslocctl {' '.join(argv)}: "
                               f"{done.stderr.strip()}")
        return json.loads(done.stdout)

    def job_spec(self):
        sc, args = self.sc, self.args
        base, h, mu, lead, guard = algorithm_options(args.algorithm)
        algorithm, policy = ALGORITHMS[base]
        corpus = sc.corpus if os.path.isabs(sc.corpus) else os.path.join(
            REPO, sc.corpus)
        if args.corpus:
            corpus = os.path.abspath(args.corpus)
        if not os.path.exists(corpus):
            raise HarnessError(f"corpus {corpus} does not exist")
        outer = {"algorithm": algorithm, "localSteps": h or sc.local_steps}
        if policy:
            outer["budgetPolicy"] = policy
        if "-overlap" in base or base.endswith(("-eager", "-streaming")):
            outer["overlapExchange"] = True
        if base.endswith("-eager"):
            outer["overlapUpdate"] = "OVERLAP_UPDATE_EAGER"
        if base.endswith("-streaming"):
            outer["overlapUpdate"] = "OVERLAP_UPDATE_MERGE"
        if mu is not None:
            outer["mu"] = mu
        if lead is not None:
            outer["maxRoundLead"] = lead
        if sc.min_local_steps:
            outer["minLocalSteps"] = sc.min_local_steps
        stop = {}
        rounds = args.rounds if args.rounds is not None else sc.max_rounds
        if rounds:
            stop["maxRounds"] = str(rounds)
        if sc.max_tokens:
            stop["maxTokens"] = str(sc.max_tokens)
        if sc.max_wall_seconds:
            stop["maxWallSeconds"] = str(sc.max_wall_seconds)
        exchange = {"deadlineMs": sc.exchange_deadline_ms}
        if base.endswith("-int8"):
            exchange["encoding"] = "WIRE_ENCODING_INT8"
        if guard is not None:
            exchange["poisonDistanceRatio"] = guard
        if sc.exchange_chunk_bytes:
            exchange["chunkBytes"] = sc.exchange_chunk_bytes
        training = {"batch": sc.batch, "threads": sc.threads,
                    "seed": str(args.seed),
                    "adamw": {"lr": sc.lr, "warmupSteps": sc.warmup}}
        # Unset: the job spec's rule (docs/algorithms.md section 1, "The
        # schedule's horizon"): STOP for the bench scenarios, which set
        # max_wall_seconds, so every algorithm anneals by the wall clock
        # or its rounds, whichever ends it.
        horizon = getattr(args, "schedule_horizon", None)
        if horizon:
            training["scheduleHorizon"] = \
                "SCHEDULE_HORIZON_" + horizon.upper()
        spec = {
            "name": f"{sc.name}-{args.algorithm}-s{args.seed}",
            "model": sc.model,
            "training": training,
            "data": {"corpusPath": corpus, "evalWindows": sc.eval_windows,
                     "evalIntervalRounds": sc.eval_every},
            "outer": outer,
            "exchange": exchange,
            "stop": stop,
            "minWorkers": sum(1 for w in sc.workers if w.join_at_s == 0),
        }
        if sc.checkpoint_every:
            # Relative: each worker's own <data_dir>/ckpt.
            spec["checkpoint"] = {"directory": CHECKPOINT_DIR,
                                  "intervalRounds": sc.checkpoint_every}
        return spec

    # -- the run -------------------------------------------------------
    def scrape(self, index):
        url = (f"http://{self.cluster.ip_of(10 + index)}:{WORKER_METRICS}"
               "/metrics")
        try:
            with self.opener.open(url, timeout=2) as r:
                self.metrics[index] = results.parse_metrics(
                    r.read().decode("utf-8", "replace"))
        except OSError:
            pass  # not up yet, or gone: keep the last scrape

    def live_workers(self):
        return [w for w in self.sc.workers
                if f"worker{w.index}" in self.procs and
                self.procs[f"worker{w.index}"].poll() is None]

    def worker_events(self, w):
        """(time, what) of worker w's events; 0 = none."""
        heal_at = (w.partition_at_s + w.partition_for_s
                   if w.partition_at_s > 0 else 0)
        gone_at = max(w.leave_at_s, w.kill_at_s)
        restart_at = (gone_at + w.restart_after_s
                      if gone_at > 0 and w.restart_after_s > 0 else 0)
        return ((w.join_at_s, "join"), (w.leave_at_s, "leave"),
                (w.kill_at_s, "kill"), (w.partition_at_s, "partition"),
                (heal_at, "heal"), (restart_at, "restart"))

    def apply_events(self, elapsed, done):
        sc = self.sc
        restart_at = (sc.coordinator_kill_at_s +
                      sc.coordinator_restart_after_s
                      if sc.coordinator_kill_at_s > 0 else 0)
        for at, what in ((sc.coordinator_kill_at_s, "kill"),
                         (restart_at, "restart")):
            if at <= 0 or ("c", what) in done or elapsed < at:
                continue
            done.add(("c", what))
            if what == "kill":
                self.procs["coordinator"].kill()
                log(f"t={elapsed:.0f}s: coordinator killed (SIGKILL)")
            else:
                self.retired.append(self.procs["coordinator"])
                self.start_coordinator()
                log(f"t={elapsed:.0f}s: coordinator restarted (same "
                    "database)")
        for w in sc.workers:
            name = f"worker{w.index}"
            for at, what in self.worker_events(w):
                key = (w.index, what)
                if at <= 0 or key in done or elapsed < at:
                    continue
                done.add(key)
                if what in ("join", "restart"):
                    if name in self.procs:
                        self.retired.append(self.procs[name])
                    self.start_worker(w)
                    log(f"t={elapsed:.0f}s: worker{w.index} "
                        f"{'joins' if what == 'join' else 'restarts'}")
                elif what in ("partition", "heal"):
                    # The host end of its veth: down cuts the worker off
                    # the bridge both ways, its process and state untouched.
                    state = "down" if what == "partition" else "up"
                    net.run(["ip", "link", "set",
                             f"{self.worker_ns[w.index]}h", state])
                    what_now = ("partitioned (link down)" if state == "down"
                                else "healed (link up)")
                    log(f"t={elapsed:.0f}s: worker{w.index} {what_now}")
                elif name in self.procs and self.procs[name].poll() is None:
                    sig = signal.SIGTERM if what == "leave" else signal.SIGKILL
                    self.procs[name].send_signal(sig)
                    what_now = ("leaves (SIGTERM)" if what == "leave"
                                else "killed (SIGKILL)")
                    log(f"t={elapsed:.0f}s: worker{w.index} {what_now}")

    def run(self):
        os.makedirs(os.path.join(self.out, "logs"), exist_ok=True)
        spec = self.job_spec()  # a bad corpus fails before any set-up
        self.setup_network()
        self.start_coordinator()
        initial = [w for w in self.sc.workers if w.join_at_s == 0]
        for w in initial:
            self.start_worker(w)
        for w in initial:
            self.wait_listening(f"worker{w.index}")
        with open(os.path.join(self.out, "job.json"), "w",
                  encoding="utf-8") as f:
            json.dump(spec, f, indent=2)
        self.job_id = self.ctl("job", "start",
                               os.path.join(self.out, "job.json"))["job_id"]
        self.job_start = time.time()
        log(f"job {self.job_id} started: {spec['name']}, "
            f"{len(initial)} worker(s), coordinator {self.coordinator}")
        events, last_round, state = set(), -1, ""
        unreachable_since = None
        deadline = time.monotonic() + self.args.timeout
        while True:
            elapsed = time.time() - self.job_start
            self.apply_events(elapsed, events)
            for w in self.live_workers():
                self.scrape(w.index)
            try:
                job = self.ctl("job", "get", str(self.job_id))
                unreachable_since = None
            except HarnessError as e:
                # A coordinator restart (scenario event) or a slow moment:
                # give up only after a minute without an answer.
                unreachable_since = unreachable_since or time.monotonic()
                if time.monotonic() - unreachable_since > 60:
                    raise HarnessError(f"no answer for 60 s: {e}") from e
                time.sleep(self.args.poll)
                continue
            state = job.get("state", "")
            rounds_done = int(job.get("rounds_completed", 0))
            if rounds_done != last_round:
                last_round = rounds_done
                self.record_progress(job, elapsed)
            if state in TERMINAL:
                break
            if time.monotonic() > deadline:
                raise HarnessError(f"job {self.job_id} still {state} after "
                                   f"--timeout={self.args.timeout} s")
            time.sleep(self.args.poll)
        for w in self.live_workers():
            self.scrape(w.index)
        log(f"job {self.job_id} ended {state}: {job.get('message', '')}")
        return state

    def record_progress(self, job, elapsed):
        bpb = float(job.get("val_bpb", 0) or 0)
        row = {"elapsed_s": round(elapsed, 2), "unix": round(time.time(), 3),
               "round": int(job.get("rounds_completed", 0)),
               "tokens": int(job.get("tokens", 0) or 0),
               "val_bpb": bpb if bpb > 0 else "",
               "train_loss": job.get("train_loss", "")}
        self.progress.append(row)
        budgets = " ".join(
            f"w{i}={int(m.get('gasloc_worker_local_steps', 0))}"
            for i, m in sorted(self.metrics.items()))
        print(f"  t={elapsed:6.1f}s round {row['round']:4d} tokens "
              f"{row['tokens']:>9d} bpb {bpb if bpb > 0 else float('nan'):.4f}"
              f"  H: {budgets}", flush=True)

    # -- shutdown and results ------------------------------------------
    def stop(self):
        """SIGTERM every child, 10 s grace, then SIGKILL; reaps them."""
        procs = list(self.procs.values()) + self.retired
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in procs:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def release(self):
        """Removes what a subclass made beyond the prefix (mounts); once."""

    def write_results(self, state):
        rounds = []
        workers = []
        for w in self.sc.workers:
            path = os.path.join(self.out, "logs", f"worker{w.index}.log")
            if not os.path.exists(path):
                continue
            with open(path, encoding="utf-8", errors="replace") as f:
                ids, rows = results.parse_worker_log(f.read())
            for row in rows:
                row["worker"] = w.index
            rounds += rows
            totals = results.worker_totals(self.metrics.get(w.index, {}))
            totals.update(worker=w.index,
                          worker_ids=" ".join(str(i) for i in ids),
                          rate_mbit=w.link.rate_mbit,
                          delay_ms=w.link.delay_ms, loss_pct=w.link.loss_pct,
                          cpu=w.cpu)
            workers.append(totals)
        rounds.sort(key=lambda r: (r["round"], r["worker"]))
        results.write_csv(os.path.join(self.out, "rounds.csv"), rounds,
                          results.ROUND_FIELDS)
        results.write_csv(os.path.join(self.out, "workers.csv"), workers,
                          results.WORKER_FIELDS)
        results.write_csv(os.path.join(self.out, "progress.csv"),
                          self.progress, results.PROGRESS_FIELDS)
        ratios = [w["wire_to_compute"] for w in workers
                  if w["wire_to_compute"] != ""]
        final = self.progress[-1] if self.progress else {}
        summary = {
            "scenario": self.sc.name, "algorithm": self.args.algorithm,
            "seed": self.args.seed, "state": state, "job_id": self.job_id,
            "build": build_identity(self.bin),
            "wall_seconds": final.get("elapsed_s"),
            "rounds": final.get("round"), "tokens": final.get("tokens"),
            "final_val_bpb": final.get("val_bpb"),
            "mean_wire_to_compute": (round(sum(ratios) / len(ratios), 3)
                                     if ratios else None),
            "workers": workers,
        }
        with open(os.path.join(self.out, "summary.json"), "w",
                  encoding="utf-8") as f:
            json.dump(summary, f, indent=2)
        log(f"results in {self.out}")
        print("  worker  link_mbit  cpu  rounds  steps  wait%  idle%  "
              "sent_MB  wire/compute")

        def percent(value):
            return f"{100 * value:.1f}" if value != "" else "-"
        for w in workers:
            print(f"  w{w['worker']:<6} {w['rate_mbit']:>9} {w['cpu']:>4} "
                  f"{w['rounds']:>7} {w['inner_steps']:>6} "
                  f"{percent(w['wait_fraction']):>6} "
                  f"{percent(w['idle_fraction']):>6} "
                  f"{w['sent_bytes'] / 1e6:>8.2f}  {w['wire_to_compute']}")
        print(f"  exchange (wire) / compute time of a round, mean over "
              f"workers: {summary['mean_wire_to_compute']}")


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scenario", nargs="?", help="scenario YAML file")
    p.add_argument("--algorithm", default="gasloc",
                   type=lambda name: algorithm_choice(name) and name,
                   help=f"one of {', '.join(sorted(ALGORITHMS))}, optionally "
                        "with -h<N>: that H instead of the scenario's")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--rounds", type=int, default=None,
                   help="override the scenario's stop.max_rounds")
    p.add_argument("--schedule-horizon",
                   choices=["rounds", "tokens", "seconds", "stop"],
                   help="the job's training.schedule_horizon (default: the "
                   "job spec's rule, STOP when a scenario sets "
                   "max_wall_seconds or max_tokens)")
    p.add_argument("--corpus", help="override the scenario's corpus")
    p.add_argument("--out", help="results folder (default runs/netns-"
                   "<scenario>-<algorithm>-s<seed>-<time>)")
    p.add_argument("--build", default=os.path.join(REPO, "build", "release"))
    p.add_argument("--poll", type=float, default=1.0,
                   help="seconds between progress polls")
    p.add_argument("--timeout", type=float, default=3600,
                   help="give up on a job still running after this many s")
    p.add_argument("--cleanup", action="store_true",
                   help="remove leftovers (gl-<pid>-*) of runs whose "
                   "harness is gone, then exit")
    p.add_argument("--force", action="store_true",
                   help="with --cleanup: also those of live harnesses")
    args = p.parse_args(argv)
    if not args.cleanup and not args.scenario:
        p.error("a scenario file is required (or --cleanup)")
    return args


def check_prerequisites(args):
    if os.geteuid() != 0:
        log("needs root: network namespaces, veths, tc and cgroups are "
            "created with `ip`/`tc` as root")
        sys.exit(3)
    for tool in ("ip", "tc"):
        if not any(os.access(os.path.join(d, tool), os.X_OK)
                   for d in os.environ.get("PATH", "").split(":") +
                   ["/usr/sbin", "/sbin"]):
            log(f"`{tool}` not found (Debian package iproute2)")
            sys.exit(3)
    if args.cleanup:
        return
    for b in ("gasloc-coordinator", "gasloc-worker", "gaslocctl"):
        if not os.access(os.path.join(args.build, "server", b), os.X_OK):
            log(f"{os.path.join(args.build, 'server', b)} missing (build "
                "first, or --build DIR)")
            sys.exit(2)


def partial_results(run, state):
    """The results folder of a run that did not end normally, if it began."""
    if run.job_id is None:
        return
    try:
        run.stop()
        run.write_results(state)
    except (OSError, ValueError, KeyError) as e:
        log(f"no results folder: {e}")


def prepare(args):
    """Checks, loads the scenario and fills args.out; (scenario, rc)."""
    os.environ["PATH"] = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
    check_prerequisites(args)
    try:
        sc = scenario_file.load(args.scenario)
    except scenario_file.ScenarioError as e:
        log(str(e))
        return None, 2
    args.build = os.path.abspath(args.build)
    if not args.out:
        args.out = os.path.join(
            REPO, "runs", f"netns-{sc.name}-{args.algorithm}-s{args.seed}-"
            f"{time.strftime('%Y%m%d-%H%M%S')}")
    args.out = os.path.abspath(args.out)
    if os.path.isdir(args.out) and os.listdir(args.out):
        # Logs are appended (restarts): an old run's would mix in.
        log(f"results folder {args.out} is not empty; give a new --out")
        return None, 2
    os.makedirs(args.out, exist_ok=True)
    return sc, 0


def execute(run):
    """Runs `run` (a Run) to its end and removes all it made; exit code.

    SIGINT/SIGTERM interrupt it (130); whatever happens, its processes are
    stopped and every object named run.prefix is removed and checked gone.
    """
    def on_signal(signum, _frame):
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Interrupted(signal.Signals(signum).name)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    rc = 1
    try:
        state = run.run()
        run.stop()
        run.write_results(state)
        rc = 0 if state == "JOB_STATE_FINISHED" else 1
    except Interrupted as e:
        log(f"interrupted ({e}): stopping and cleaning up")
        rc = 130
        partial_results(run, "INTERRUPTED")
    except (HarnessError, net.NetError, OSError) as e:
        log(f"error: {e}")
        rc = 1
        partial_results(run, "HARNESS_ERROR")
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        run.stop()
        run.release()
        net.remove_prefix(run.prefix, log)
        left = [x for group in net.leftovers(run.prefix) for x in group]
        if left:
            log(f"cleanup incomplete, still there: {left}")
            rc = rc or 1
        else:
            log(f"cleaned up: no namespace, link or cgroup named "
                f"{run.prefix}*")
    return rc


def main(argv):
    args = parse_args(argv)
    if args.cleanup:
        os.environ["PATH"] = os.environ.get("PATH", "") + ":/usr/sbin:/sbin"
        check_prerequisites(args)
        n = net.remove_prefix(BASE_PREFIX, log, only_dead_owners=not
                              args.force, base_prefix=BASE_PREFIX)
        log(f"cleanup: removed {n} object(s) named {BASE_PREFIX}*")
        return 0
    sc, rc = prepare(args)
    if sc is None:
        return rc
    return execute(Run(sc, args, f"{BASE_PREFIX}{os.getpid()}-"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
