"""What the namespace-harness tests check after a run, shared by them.

skip_unless_namespaces() exits 77 (ctest SKIP_RETURN_CODE) with the reason
when this machine cannot create network namespaces; leftovers(prefix)
lists everything named prefix* that a harness run may create (namespaces,
links, cgroups, mounts); processes_using(path) the processes whose command
line names path. Plain functions, no state.
"""
import os
import subprocess
import sys

SKIP = 77


def skip_unless_namespaces():
    if os.geteuid() != 0:
        print("SKIP: not root; network namespaces need root")
        sys.exit(SKIP)
    probe = f"gltest-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True,
                          text=True, check=False)
    if made.returncode != 0:
        print(f"SKIP: `ip netns add` fails here: {made.stderr.strip()}")
        sys.exit(SKIP)
    subprocess.run(["ip", "netns", "del", probe], check=False)


def leftovers(prefix):
    """Everything named prefix* that the harness may create."""
    found = []
    found += [l.split()[0] for l in subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True,
        check=True).stdout.splitlines() if l.startswith(prefix)]
    for line in subprocess.run(["ip", "-o", "link", "show"],
                               capture_output=True, text=True,
                               check=True).stdout.splitlines():
        name = line.split(":", 2)[1].strip().split("@")[0]
        if name.startswith(prefix):
            found.append(name)
    for root in ("/sys/fs/cgroup/cpu", "/sys/fs/cgroup"):
        if os.path.isdir(root):
            found += [os.path.join(root, d) for d in os.listdir(root)
                      if d.startswith(prefix)]
    with open("/proc/mounts", encoding="utf-8") as f:
        found += [line.split()[1] for line in f
                  if line.split()[0].startswith(prefix)]
    return found


def processes_using(path):
    """Pids whose command line mentions path (the run's results folder)."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if path.encode() in f.read():
                    pids.append(int(pid))
        except OSError:
            pass
    return pids


def report(failures):
    """Prints each failure and the verdict; the test's exit code."""
    for f in failures:
        print(f"FAIL: {f}")
    print("PASS" if not failures else f"{len(failures)} failure(s)")
    return 1 if failures else 0
