"""Network namespaces, veths, a private bridge, tc shaping and cgroup CPU caps.

Every object the harness creates is named with one prefix, "gl-<pid>-"
(<pid> = the harness's process id), so remove_prefix() can find and delete
them all: on a normal exit, on an error, on SIGINT/SIGTERM, and later with
`netns_cluster.py --cleanup` for the leftovers of a run that was killed.

    bridge            gl-<pid>-br      10.77.<k>.1/24 on the host side
    namespace         gl-<pid>-c       the coordinator, 10.77.<k>.2, unshaped
    namespace         gl-<pid>-w<i>    worker i, 10.77.<k>.<10+i>
    veth (host end)   gl-<pid>-<node>h enslaved to the bridge; its egress is
                                       the node's download, shaped
    veth (ns end)     eth0 in the ns   its egress is the node's upload, shaped
    cgroup (cpu)      gl-<pid>-w<i>    cpu.cfs_quota_us (v1) or cpu.max (v2)

Shaping on each shaped veth end: root netem (delay) with a tbf child
(rate), or tbf alone when there is no delay; loss is an iptables statistic
DROP rule on the packets arriving at the namespace's eth0 (some kernels, this
project's machines among them, are built without netem: a delay then fails
with a clear error, rate and loss still work). Traffic between two
workers crosses the sender's ns end and the receiver's host end, so a pair
moves data at the slower of the two rates.

Not thread-safe: one Cluster per harness process, used from its main thread.
"""
import os
import signal
import subprocess
import time

BRIDGE_SUFFIX = "br"
CGROUP_V1_CPU = "/sys/fs/cgroup/cpu"
CGROUP_V2 = "/sys/fs/cgroup"


class NetError(RuntimeError):
    """A command that sets up or removes the cluster's network failed."""


def run(args, netns=None, check=True):
    """Runs a command (inside netns when given); returns its stdout."""
    if netns:
        args = ["ip", "netns", "exec", netns] + args
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if check and done.returncode != 0:
        raise NetError(f"`{' '.join(args)}` failed ({done.returncode}): "
                       f"{done.stderr.strip()}")
    return done.stdout


def cgroup_root():
    """The writable cpu cgroup root and its version, or (None, reason)."""
    quota = os.path.join(CGROUP_V1_CPU, "cpu.cfs_quota_us")
    if os.path.exists(quota) and os.access(CGROUP_V1_CPU, os.W_OK):
        return CGROUP_V1_CPU, "v1"
    controllers = os.path.join(CGROUP_V2, "cgroup.controllers")
    if os.path.exists(controllers):
        with open(controllers, encoding="ascii") as f:
            if "cpu" in f.read().split() and os.access(CGROUP_V2, os.W_OK):
                return CGROUP_V2, "v2"
    return None, ("no writable cpu cgroup (neither v1 "
                  f"{CGROUP_V1_CPU}/cpu.cfs_quota_us nor v2 cpu.max)")


def pick_subnet():
    """The first 10.77.<k>.0/24 that no route on the host uses yet."""
    routes = run(["ip", "-4", "route", "show"])
    for k in range(0, 256):
        if f"10.77.{k}." not in routes:
            return k
    raise NetError("every 10.77.<k>.0/24 subnet is in use on this host")


class Cluster:
    """The bridge, the nodes' namespaces and cgroups of one harness run."""

    def __init__(self, prefix, subnet):
        self.prefix = prefix
        self.subnet = subnet
        self.bridge = prefix + BRIDGE_SUFFIX
        self.host_ip = f"10.77.{subnet}.1"

    def ip_of(self, host_index):
        return f"10.77.{self.subnet}.{host_index}"

    def create_bridge(self):
        run(["ip", "link", "add", self.bridge, "type", "bridge"])
        run(["ip", "addr", "add", f"{self.host_ip}/24", "dev", self.bridge])
        run(["ip", "link", "set", self.bridge, "up"])

    def add_node(self, node, host_index, link=None):
        """Namespace prefix+node with address .host_index on the bridge.

        link (scenario.Link or None) shapes both directions. Returns the
        namespace name.
        """
        ns = self.prefix + node
        host_end, ns_end = ns + "h", ns + "n"
        if len(host_end) > 15:
            raise NetError(f"interface name {host_end} is longer than 15 "
                           "characters (shorter prefix or fewer workers)")
        run(["ip", "netns", "add", ns])
        run(["ip", "link", "add", host_end, "type", "veth", "peer", "name",
             ns_end])
        run(["ip", "link", "set", ns_end, "netns", ns])
        run(["ip", "link", "set", ns_end, "name", "eth0"], netns=ns)
        run(["ip", "addr", "add", f"{self.ip_of(host_index)}/24", "dev",
             "eth0"], netns=ns)
        run(["ip", "link", "set", "eth0", "up"], netns=ns)
        run(["ip", "link", "set", "lo", "up"], netns=ns)
        run(["ip", "link", "set", host_end, "master", self.bridge])
        run(["ip", "link", "set", host_end, "up"])
        if link is not None:
            shape(host_end, link, netns=None)
            shape("eth0", link, netns=ns)
            if link.loss_pct > 0:
                drop_randomly(ns, link.loss_pct)
        return ns

    def add_cgroup(self, node, cpu):
        """A cpu cgroup capped at cpu cores; returns its cgroup.procs path."""
        root, version = cgroup_root()
        if root is None:
            raise NetError(f"cannot cap CPU at {cpu} cores: {version}")
        path = os.path.join(root, self.prefix + node)
        os.mkdir(path)
        period = 100000
        quota = max(1000, int(cpu * period))
        if version == "v1":
            _write(os.path.join(path, "cpu.cfs_period_us"), str(period))
            _write(os.path.join(path, "cpu.cfs_quota_us"), str(quota))
        else:
            _write(os.path.join(path, "cpu.max"), f"{quota} {period}")
        return os.path.join(path, "cgroup.procs")


def shape(dev, link, netns):
    """Egress shaping of dev: netem delay (if any), then tbf at the rate."""
    tc = ["tc", "qdisc", "add", "dev", dev]
    parent = ["root"]
    if link.delay_ms > 0:
        try:
            run(tc + ["root", "handle", "1:", "netem", "delay",
                      f"{link.delay_ms}ms", "limit", "100000"], netns=netns)
        except NetError as e:
            if "unknown" in str(e):
                raise NetError(
                    f"delay_ms={link.delay_ms} needs the netem qdisc, which "
                    "this kernel lacks (CONFIG_NET_SCH_NETEM); use "
                    "delay_ms: 0 here") from e
            raise
        parent = ["parent", "1:", "handle", "2:"]
    if link.rate_mbit > 0:
        rate_bytes = link.rate_mbit * 1e6 / 8
        # Burst: 10 ms at the rate, at least 64 KiB (a GSO packet must fit
        # or tbf drops it); queue: 200 ms at the rate.
        burst = max(65536, int(rate_bytes * 0.01))
        run(tc + parent + ["tbf", "rate", f"{link.rate_mbit}mbit", "burst",
                           str(burst), "latency", "200ms"], netns=netns)


def drop_randomly(netns, loss_pct):
    """Drops loss_pct % of the packets arriving at netns's eth0.

    iptables' statistic match rather than netem loss, which some kernels
    (this project's machines) lack. Only arriving packets: a DROP in the
    sender's own OUTPUT chain is reported to its TCP stack as a local
    failure and resent at once, so it is no loss at all (iperf3: 0
    retransmits). Packets are counted after GRO, so the loss comes in
    bursts of segments. The rule lives and dies with the namespace.
    """
    run(["iptables", "-A", "INPUT", "-i", "eth0", "-m", "statistic",
         "--mode", "random", "--probability", f"{loss_pct / 100:.6f}",
         "-j", "DROP"], netns=netns)


def _write(path, text):
    with open(path, "w", encoding="ascii") as f:
        f.write(text)


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_pid(name, prefix):
    """The harness pid in a name "gl-<pid>-...", or None."""
    rest = name[len(prefix):] if name.startswith(prefix) else ""
    head = rest.split("-", 1)[0] if prefix.endswith("-") else ""
    return int(head) if head.isdigit() else None


def mounts(prefix):
    """(source, mount point) of the mounts named prefix* (the soak's tmpfs)."""
    found = []
    try:
        with open("/proc/mounts", encoding="utf-8") as f:
            for line in f:
                source, point = line.split()[:2]
                if source.startswith(prefix):
                    found.append((source, point.replace("\\040", " ")))
    except OSError:
        pass
    return found


def leftovers(prefix):
    """(namespaces, links, cgroups, mounts) named prefix*."""
    namespaces = [line.split()[0] for line in
                  run(["ip", "netns", "list"]).splitlines() if line.strip()]
    links = []
    for line in run(["ip", "-o", "link", "show"]).splitlines():
        # "12: gl-1-w1h@if11: <...>" -> gl-1-w1h
        name = line.split(":", 2)[1].strip().split("@")[0]
        links.append(name)
    cgroups = []
    for root in (CGROUP_V1_CPU, CGROUP_V2):
        if os.path.isdir(root):
            cgroups += [os.path.join(root, d) for d in os.listdir(root)
                        if os.path.isdir(os.path.join(root, d))]
    return ([n for n in namespaces if n.startswith(prefix)],
            [n for n in links if n.startswith(prefix)],
            [c for c in cgroups if os.path.basename(c).startswith(prefix)],
            mounts(prefix))


def remove_prefix(prefix, log, only_dead_owners=False, base_prefix=None):
    """Kills the processes in, and deletes, everything named prefix*.

    only_dead_owners: skip objects whose "gl-<pid>-" owner is alive (another
    harness run); base_prefix is then the part before <pid> ("gl-").
    Returns the number of objects removed. Errors are logged, not raised,
    so one stuck object does not keep the others.
    """
    def skip(name):
        if not only_dead_owners:
            return False
        pid = owner_pid(name, base_prefix)
        return pid is not None and pid != os.getpid() and _pid_alive(pid)

    removed = 0
    namespaces, links, cgroups, mounted = leftovers(prefix)
    for ns in namespaces:
        if skip(ns):
            log(f"keeping {ns}: its harness is still running")
            continue
        pids = [int(p) for p in run(["ip", "netns", "pids", ns],
                                    check=False).split()]
        _stop_pids(pids, log, f"namespace {ns}")
        try:
            run(["ip", "netns", "del", ns])
            removed += 1
        except NetError as e:
            log(f"cannot delete namespace {ns}: {e}")
    # Deleting a namespace deletes its veth pairs; what is left is the
    # bridge and host ends of namespaces deleted by hand.
    for name in leftovers(prefix)[1]:
        if skip(name):
            continue
        try:
            run(["ip", "link", "del", name])
            removed += 1
        except NetError as e:
            # A namespace's veth pair goes away a moment after the
            # namespace: already gone is fine.
            if "Cannot find device" not in str(e):
                log(f"cannot delete link {name}: {e}")
    for path in cgroups:
        if skip(os.path.basename(path)):
            continue
        procs_file = os.path.join(path, "cgroup.procs")
        try:
            with open(procs_file, encoding="ascii") as f:
                pids = [int(p) for p in f.read().split()]
            _stop_pids(pids, log, f"cgroup {path}")
            os.rmdir(path)
            removed += 1
        except OSError as e:
            log(f"cannot remove cgroup {path}: {e}")
    for source, point in mounted:
        if skip(source):
            continue
        try:
            run(["umount", "-l", point])
            removed += 1
        except NetError as e:
            log(f"cannot unmount {point}: {e}")
    return removed


def _stop_pids(pids, log, where):
    """SIGTERM, up to 5 s, then SIGKILL for each pid (all started by us)."""
    if not pids:
        return
    log(f"stopping {len(pids)} process(es) left in {where}: {pids}")
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(_pid_alive(p) for p in pids):
        time.sleep(0.1)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
