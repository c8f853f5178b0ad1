#!/usr/bin/env python3
"""ctest kube_play_test: deploy/kubernetes/gasloc.yaml under `podman kube play`.

Runs the manifest with the image of scripts/build_image.sh (ctest
image_build) through tests/deploy/podman_env.sh, which sets up podman and
skips where it cannot run. The scenario:

  0. the image alone: its default command, user, HEALTHCHECK and SIGTERM;
  1. the coordinator (its Deployment and the volume claim for its SQLite
     file) and two workers come up; their probes (gasloc-healthcheck through
     grpc.health.v1) pass;
  2. a small job starts (min_workers 2) and runs;
  3. a third worker is scaled in mid-run: it joins at a round boundary
     ("joined N" in the job's MEMBERSHIP events) and trains;
  4. one of the first two is scaled out: SIGTERM, it leaves ("left N" in
     the events, state LEFT) and exits 0;
  5. the job ends FINISHED (its wall-time limit) with the remaining two;
  6. its model is exported through the coordinator (`gaslocctl job
     export --average`), which fetches it from the members presenting its
     own certificate (CN coordinator).

Mutual TLS throughout, as the manifest sets it up: every pod's init
container issues its own key and certificate from the CA in the Secret
gasloc-ca (a fresh test CA here). The test checks that no two pods hold
the same key, that each worker's certificate names worker:<pod name> and
its pod IP, that the CA key is not in the long-running containers, that
the coordinator bound every worker to its certificate's name, and that
no worker logged a refused call (PERMISSION_DENIED).

What this test changes in the manifest, each for a limit of podman 4.3 (the
rest is played as written):
  - Service objects are not played: podman has no cluster DNS, so the
    workers get a hostAliases entry for gasloc-coordinator instead;
  - podman does not scale Deployments or fill in status.podIP: each worker
    replica is played as its own one-replica copy of the worker Deployment
    (what the Deployment controller does on `kubectl scale`), with a static
    IP (--ip) that its POD_IP variable names;
  - containerPort entries are dropped: podman 4.3 publishes each one on the
    host, so two workers on one machine would collide on port 7071 (pods
    reach each other on the pod network; the test's calls run inside the
    coordinator's container);
  - the corpus claim becomes a hostPath to /usr/share/common-licenses, the
    image the locally built tag, and the CPU request one core (two cores on
    this machine kind), so the worker runs --threads=1 through
    GASLOC_THREADS = requests.cpu;
  - the Secret gasloc-ca becomes a hostPath per pod holding the keys a
    secret volume projects, as Kubernetes would;
  - downward-API variables podman 4.3 leaves empty (status.podIP,
    metadata.namespace) get the values Kubernetes would give;
  - init containers are played as podman's "always" kind (the annotation
    io.podman.annotations.init.container.type): podman 4.3 removes a
    "once" init container right after it exits and fails the whole
    `kube play` when that races its exit (containers/podman#18477, fixed
    in 4.6); the pods here start once, so both kinds run it once. The
    pods' restartPolicy becomes OnFailure: podman 4.3 applies Always to
    init containers too and reruns them after they exit 0;
  - every emptyDir becomes a fresh host folder per pod: podman 4.3 plays
    an emptyDir as a named volume shared by every pod that names it, so
    the workers would overwrite each other's keys.
Scaling out is `podman pod stop` (SIGTERM, grace period), as a Deployment
scale-down deletes a pod.
"""

import copy
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import yaml

SOURCE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
MANIFEST = os.path.join(SOURCE_DIR, "deploy", "kubernetes", "gasloc.yaml")
IMAGE = os.environ.get("GASLOC_IMAGE", "localhost/gasloc:test")
CORPUS = "/usr/share/common-licenses"
NETWORK = f"gasloc-kube-{os.getpid()}"
COORDINATOR_CTR = "gasloc-coordinator-pod-0-coordinator"
# The operator certificate the coordinator pod's init container issues.
OPERATOR_TLS = ["--tls_ca=/etc/gasloc/tls/ca.crt",
                "--tls_cert=/etc/gasloc/tls/operator.crt",
                "--tls_key=/etc/gasloc/tls/operator.key"]
NAMESPACE = "default"
WALL_SECONDS = 40
START = time.monotonic()


def log(message):
    print(f"[{time.monotonic() - START:6.1f} s] {message}", flush=True)


def podman(*args, check=True, timeout=120, input_text=None):
    run = subprocess.run(["podman", *args], capture_output=True, text=True,
                         timeout=timeout, input=input_text)
    if check and run.returncode != 0:
        raise RuntimeError(f"podman {' '.join(args)} failed ({run.returncode}):"
                           f"\n{run.stdout}\n{run.stderr}")
    return run


def ctl(*args, input_text=None):
    """gaslocctl inside the coordinator's container (the image's CLI)."""
    run = podman("exec", "-i", COORDINATOR_CTR, "gaslocctl",
                 "--coordinator=127.0.0.1:7070", *OPERATOR_TLS, "--output=json", *args,
                 input_text=input_text)
    return json.loads(run.stdout)


def wait_for(what, predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class Cluster:
    def __init__(self, workdir):
        self.workdir = workdir
        with open(MANIFEST, encoding="utf-8") as f:
            self.docs = [d for d in yaml.safe_load_all(f) if d]
        self.kinds = {(d["kind"], d["metadata"]["name"]): d for d in self.docs}
        podman("network", "create", NETWORK)
        subnet = podman("network", "inspect", NETWORK, "--format",
                        "{{range .Subnets}}{{.Subnet}}{{end}}").stdout.strip()
        self.net = ipaddress.ip_network(subnet)
        self.coordinator_ip = str(self.net[10])
        self.worker_pods = []
        os.chmod(workdir, 0o755)
        # Bearer tokens for the image's default command (image_alone).
        self.tokens = os.path.join(workdir, "tokens")
        os.makedirs(self.tokens)
        os.chmod(self.tokens, 0o755)
        for key in ("operator", "worker"):
            path = os.path.join(self.tokens, key)
            with open(path, "w", encoding="utf-8") as f:
                f.write(os.urandom(32).hex() + "\n")
            os.chmod(path, 0o644)
        # The Secret gasloc-ca (which the manifest leaves to the operator):
        # a fresh CA, made as the manifest's header says.
        self.ca = os.path.join(workdir, "ca")
        os.makedirs(self.ca)
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
             "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
             "-subj", "/CN=gasloc kube_play_test CA",
             "-keyout", os.path.join(self.ca, "ca.key"),
             "-out", os.path.join(self.ca, "ca.crt"),
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
            check=True, capture_output=True)

    def mount_ca(self, pod, name):
        """Replaces the secret volume `ca` with a hostPath holding what
        Kubernetes would project from the Secret gasloc-ca: the keys its
        `items` list (all of them without `items`), readable by the pod's
        user as defaultMode 0440 with fsGroup makes them."""
        for v in pod["volumes"]:
            if v["name"] == "ca":
                secret = v["secret"]
                assert secret["secretName"] == "gasloc-ca", v
                items = secret.get("items") or [
                    {"key": k, "path": k} for k in os.listdir(self.ca)]
                folder = os.path.join(self.workdir, f"ca-{name}")
                os.makedirs(folder)
                os.chmod(folder, 0o755)
                for item in items:
                    target = os.path.join(folder, item["path"])
                    shutil.copyfile(os.path.join(self.ca, item["key"]), target)
                    os.chmod(target, 0o644)
                v.clear()
                v.update({"name": "ca",
                          "hostPath": {"path": folder, "type": "Directory"}})

    @staticmethod
    def keep_init_containers(deployment):
        """Podman 4.3's init-container race (module docstring). Podman
        reads a Deployment's annotations from its own metadata, not its
        pod template's."""
        annotations = deployment["metadata"].setdefault("annotations", {})
        annotations["io.podman.annotations.init.container.type"] = "always"

    def private_empty_dirs(self, pod, name):
        """Podman 4.3's shared emptyDir (module docstring): each becomes a
        fresh folder of this pod's, owned by the pod's user."""
        user = pod["securityContext"]["runAsUser"]
        group = pod["securityContext"].get("fsGroup", user)
        for v in pod["volumes"]:
            if "emptyDir" in v:
                folder = os.path.join(self.workdir, f"{v['name']}-{name}")
                os.makedirs(folder)
                os.chown(folder, user, group)
                os.chmod(folder, 0o700)
                v.pop("emptyDir")
                v["hostPath"] = {"path": folder, "type": "Directory"}

    @staticmethod
    def set_downward_env(pod, values):
        """Gives the downward-API variables podman leaves empty the values
        Kubernetes would, in every container (init containers too)."""
        for c in pod.get("initContainers", []) + pod["containers"]:
            c["image"] = IMAGE
            for e in c.get("env", []):
                ref = e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
                if ref in values:
                    e.pop("valueFrom")
                    e["value"] = values[ref]

    def play(self, name, docs, ip):
        path = os.path.join(self.workdir, name + ".yaml")
        with open(path, "w", encoding="utf-8") as f:
            yaml.safe_dump_all(docs, f)
        podman("kube", "play", "--network", NETWORK, "--ip", ip, path)

    def start_coordinator(self):
        claim = self.kinds[("PersistentVolumeClaim", "gasloc-coordinator-state")]
        deployment = copy.deepcopy(self.kinds[("Deployment", "gasloc-coordinator")])
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        container.pop("ports", None)
        pod = deployment["spec"]["template"]["spec"]
        self.keep_init_containers(deployment)
        pod["restartPolicy"] = "OnFailure"
        self.private_empty_dirs(pod, "coordinator")
        self.set_downward_env(pod, {"metadata.namespace": NAMESPACE})
        self.mount_ca(pod, "coordinator")
        self.play("coordinator", [claim, deployment], self.coordinator_ip)

    def scale_workers_to(self, n):
        """Plays worker replicas until there are n (the controller's job)."""
        template = self.kinds[("Deployment", "gasloc-worker")]
        while len(self.worker_pods) < n:
            i = len(self.worker_pods)
            ip = str(self.net[11 + i])
            d = copy.deepcopy(template)
            d["metadata"]["name"] = f"gasloc-worker-{i}"
            d["spec"]["replicas"] = 1
            pod = d["spec"]["template"]["spec"]
            pod["hostAliases"] = [{"ip": self.coordinator_ip,
                                   "hostnames": ["gasloc-coordinator"]}]
            for v in pod["volumes"]:
                if v["name"] == "corpus":
                    v.clear()
                    v.update({"name": "corpus",
                              "hostPath": {"path": CORPUS, "type": "Directory"}})
            self.keep_init_containers(d)
            pod["restartPolicy"] = "OnFailure"
            self.private_empty_dirs(pod, f"worker-{i}")
            self.mount_ca(pod, f"worker-{i}")
            self.set_downward_env(pod, {"status.podIP": ip})
            c = pod["containers"][0]
            c.pop("ports", None)
            c["resources"]["requests"]["cpu"] = "1"
            c["resources"]["limits"]["cpu"] = "1"
            self.play(f"worker-{i}", [d], ip)
            self.worker_pods.append((f"gasloc-worker-{i}-pod-0", ip))
            log(f"worker replica {i} played at {ip}")

    def healthy(self, container):
        return podman("healthcheck", "run", container, check=False).returncode == 0

    def teardown(self):
        pods = podman("pod", "ps", "--format", "{{.Name}}", check=False).stdout.split()
        if pods:
            podman("pod", "stop", "-t", "20", *pods, check=False)
            podman("pod", "rm", "-f", *pods, check=False)
        podman("volume", "rm", "-f", "gasloc-coordinator-state", check=False)
        podman("network", "rm", "-f", NETWORK, check=False)


class Watch(threading.Thread):
    """`gaslocctl job watch` in the coordinator's container, one JSON
    JobEvent per line, collected until the job ends."""

    def __init__(self, job_id):
        super().__init__(daemon=True)
        self.events = []
        self.process = subprocess.Popen(
            ["podman", "exec", COORDINATOR_CTR, "gaslocctl",
             "--coordinator=127.0.0.1:7070", *OPERATOR_TLS, "--output=json", "job", "watch",
             str(job_id)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        self.start()

    def run(self):
        for line in self.process.stdout:
            if line.strip():
                self.events.append(json.loads(line))

    def descriptions(self, kind):
        return [e.get("description", "") for e in self.events
                if e.get("kind") == kind]


def job_spec():
    return {
        "name": "kube-play",
        "model": {"layers": 1, "d_model": 32, "heads": 2, "context": 32},
        "training": {"batch": 8, "adamw": {"lr": 3e-3, "warmup_steps": 5}},
        "data": {"corpus_path": "/data", "eval_windows": 16,
                 "eval_interval_rounds": 5},
        "outer": {"algorithm": "ALGORITHM_GASLOC", "local_steps": 20},
        "exchange": {"deadline_ms": 5000, "chunk_bytes": 16384},
        "checkpoint": {"directory": "/var/lib/gasloc/checkpoints",
                       "interval_rounds": 10},
        "stop": {"max_wall_seconds": WALL_SECONDS},
        "min_workers": 2,
    }


def workers_by_ip(include_gone=False):
    args = ["workers", "--all"] if include_gone else ["workers"]
    listed = ctl(*args).get("workers", [])
    return {w["info"]["address"].rsplit(":", 1)[0]: w for w in listed}


def read_in_container(container, path):
    """A file's text from a container (the image has no cat: sh reads it)."""
    return podman("exec", container, "/bin/sh", "-c",
                  f'while IFS= read -r l; do echo "$l"; done < {path}').stdout


def certificate_facts(pem):
    """Subject, subject alternative names and public key of a PEM
    certificate, as openssl prints them."""
    run = subprocess.run(["openssl", "x509", "-noout", "-subject", "-ext",
                          "subjectAltName", "-pubkey"], input=pem,
                         capture_output=True, text=True, check=True)
    text = run.stdout
    subject = next(l for l in text.splitlines() if l.startswith("subject="))
    key = text[text.index("-----BEGIN PUBLIC KEY-----"):]
    return subject.split("CN = ", 1)[1].strip(), text, key


def check_certificates(cluster):
    """Every pod holds a key of its own, issued by its init container:
    workers worker:<name> for their pod IP, bound to that name by the
    coordinator; the CA key is in no long-running container."""
    keys = {}
    cn, text, key = certificate_facts(
        read_in_container(COORDINATOR_CTR, "/etc/gasloc/tls/tls.crt"))
    assert cn == "coordinator" and "DNS:gasloc-coordinator" in text, text
    keys[key] = COORDINATOR_CTR
    registered = workers_by_ip()
    for pod, ip in cluster.worker_pods:
        ctr = pod + "-worker"
        cn, text, key = certificate_facts(
            read_in_container(ctr, "/etc/gasloc/tls/tls.crt"))
        assert cn.startswith("worker:") and f"IP Address:{ip}" in text, text
        assert key not in keys, f"{ctr} holds the same key as {keys[key]}"
        keys[key] = ctr
        identity = registered[ip]["info"].get("identity")
        assert identity == cn.split(":", 1)[1], \
            f"{ctr}: certificate {cn}, registered as {identity!r}"
    for ctr in [COORDINATOR_CTR] + [p + "-worker" for p, _ in cluster.worker_pods]:
        gone = podman("exec", ctr, "/bin/sh", "-c", "test ! -e /etc/gasloc/ca",
                      check=False)
        assert gone.returncode == 0, f"{ctr} can see the CA's Secret"
    log(f"{len(keys)} pods, {len(keys)} distinct keys; workers bound to "
        f"their certificates' names; the CA key only in init containers")


def image_alone(tokens):
    """The image by itself: its default command (the coordinator, with the
    token files mounted at /etc/gasloc/tokens) runs as gasloc, its
    HEALTHCHECK passes, SIGTERM stops it with exit 0."""
    name = f"gasloc-image-{os.getpid()}"
    podman("run", "-d", "--name", name, "-v",
           f"{tokens}:/etc/gasloc/tokens:ro", IMAGE)
    try:
        wait_for("the image's HEALTHCHECK",
                 lambda: podman("healthcheck", "run", name,
                                check=False).returncode == 0, 30)
        user = podman("top", name, "user").stdout.split()[-1]
        assert user == "gasloc", f"the image's command runs as {user}"
        podman("stop", "-t", "15", name)
        code = podman("inspect", name, "--format",
                      "{{.State.ExitCode}}").stdout.strip()
        assert code == "0", f"the coordinator exited {code} on SIGTERM"
    finally:
        podman("rm", "-f", "-v", name, check=False)
    log("image alone: healthy, user gasloc, SIGTERM exits 0")


def scenario(cluster):
    image_alone(cluster.tokens)
    cluster.start_coordinator()
    wait_for("the coordinator's gRPC health probe",
             lambda: cluster.healthy(COORDINATOR_CTR), 60)
    user = podman("top", COORDINATOR_CTR, "huser", "user").stdout.split()
    assert user[-1] in ("gasloc", "10001"), f"coordinator runs as {user}"
    log(f"coordinator healthy at {cluster.coordinator_ip} (user {user[-1]})")

    cluster.scale_workers_to(2)
    for pod, ip in cluster.worker_pods:
        wait_for(f"{pod}'s health probe",
                 lambda pod=pod: cluster.healthy(pod + "-worker"), 60)
    workers = wait_for("two registered workers",
                       lambda: len(workers_by_ip()) == 2 and workers_by_ip(), 60)
    for pod, ip in cluster.worker_pods:
        assert ip in workers, f"no worker advertises its pod IP {ip}: {workers}"
        # The shell expanded the downward-API variables: the pod IP, and the
        # CPU request as the thread count.
        args = podman("top", pod + "-worker", "args").stdout
        assert f"--advertise={ip}:7071" in args and "--threads=1 " in args + " ", args
    log(f"2 workers registered: {sorted(workers)} (advertised = pod IPs)")

    job = ctl("job", "start", "-", input_text=json.dumps(job_spec()))
    job_id = int(job["job_id"])
    watch = Watch(job_id)
    wait_for("the job to run",
             lambda: ctl("job", "get", str(job_id))["state"] == "JOB_STATE_RUNNING",
             60)
    log(f"job {job_id} RUNNING")

    # Scale in: a third worker joins at a round boundary and trains.
    cluster.scale_workers_to(3)
    third_ip = cluster.worker_pods[2][1]
    third = wait_for("the third worker to register",
                     lambda: workers_by_ip().get(third_ip), 60)
    third_id = int(third["worker_id"])
    wait_for(f"'joined {third_id}' in the job's events",
             lambda: any(f"joined {third_id}" in d
                         for d in watch.descriptions("JOB_EVENT_KIND_MEMBERSHIP")),
             60)

    def third_trained():
        w = workers_by_ip().get(third_ip, {})
        progress = w.get("progress", {})
        return (int(progress.get("job_id", 0)) == job_id and
                int(progress.get("total_inner_steps", 0)) > 0)
    wait_for("the third worker to train", third_trained, 60)
    log(f"worker {third_id} joined and trains")
    check_certificates(cluster)

    # Scale out: the first worker gets SIGTERM, leaves, exits 0.
    first_pod, first_ip = cluster.worker_pods[0]
    first_id = int(workers_by_ip()[first_ip]["worker_id"])
    podman("pod", "stop", "-t", "60", first_pod)
    code = podman("inspect", first_pod + "-worker", "--format",
                  "{{.State.ExitCode}}").stdout.strip()
    assert code == "0", f"the scaled-out worker exited with {code}"
    gone = workers_by_ip(include_gone=True)[first_ip]
    assert gone["state"] == "WORKER_STATE_LEFT", f"scaled-out worker: {gone['state']}"
    wait_for(f"'left {first_id}' in the job's events",
             lambda: any(f"left {first_id}" in d
                         for d in watch.descriptions("JOB_EVENT_KIND_MEMBERSHIP")),
             60)
    log(f"worker {first_id} left cleanly (exit 0, state LEFT)")

    # The job finishes with the other two.
    try:
        code = watch.process.wait(timeout=WALL_SECONDS + 60)
    except subprocess.TimeoutExpired:
        watch.process.kill()
        raise AssertionError("job watch did not end")
    watch.join(timeout=10)
    final = ctl("job", "get", str(job_id))
    assert final["state"] == "JOB_STATE_FINISHED", \
        f"job ended {final['state']}: {final.get('message')}"
    assert code == 0, f"gaslocctl job watch exited {code}"
    members = sorted(int(w) for w in final.get("worker_ids", []))
    assert first_id not in members and third_id in members, members
    for description in watch.descriptions("JOB_EVENT_KIND_MEMBERSHIP"):
        log(f"event: {description}")
    log(f"job {job_id} FINISHED: {final.get('rounds_completed')} rounds, "
        f"{final.get('tokens')} tokens, val_bpb {final.get('val_bpb')}, "
        f"workers {members}")

    # The trained model leaves through the coordinator, which fetches it
    # from the members with the coordinator token: both ends read that key
    # of the Secret as the manifest projects it.
    out = f"/var/lib/gasloc/export-{job_id}"
    exported = ctl("job", "export", str(job_id), f"--out={out}", "--average")
    assert exported["out"] == out and exported["bytes"] > 0, exported
    assert sorted(exported["worker_ids"]) == members, exported
    # The image has no ls: the shell lists the folder.
    files = podman("exec", COORDINATOR_CTR, "/bin/sh", "-c",
                   f"cd {out} && echo *").stdout.split()
    assert {"config.json", "model.safetensors"} <= set(files), files
    log(f"job {job_id} exported through the coordinator: "
        f"{exported['bytes']} bytes from workers {exported['worker_ids']}")
    # No call between the pods was refused: every peer admitted the
    # identities the coordinator scheduled.
    for pod, _ in cluster.worker_pods:
        logs = podman("logs", pod + "-worker", check=False)
        assert "PERMISSION_DENIED" not in logs.stdout + logs.stderr, \
            f"{pod} logged a refused call:\n{logs.stdout}{logs.stderr}"


def remove_stale_networks():
    """Networks of earlier runs whose process is gone (a run killed by its
    timeout cannot tear down); network configurations are host-wide."""
    names = podman("network", "ls", "--format", "{{.Name}}").stdout.split()
    for name in names:
        if not name.startswith("gasloc-kube-"):
            continue
        pid = name.rsplit("-", 1)[1]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            podman("network", "rm", "-f", name, check=False)


def main():
    workdir = tempfile.mkdtemp(prefix="gasloc-kube-play-")
    remove_stale_networks()
    # This storage belongs to the tests (podman_env.sh): anything left from
    # an interrupted run goes first.
    for pod in podman("pod", "ps", "--format", "{{.Name}}").stdout.split():
        podman("pod", "rm", "-f", pod, check=False)
    podman("volume", "rm", "-f", "gasloc-coordinator-state", check=False)
    cluster = Cluster(workdir)
    try:
        scenario(cluster)
    except Exception:
        for pod, _ in [("gasloc-coordinator-pod-0", "")] + cluster.worker_pods:
            ctr = pod + ("-coordinator" if "coordinator" in pod else "-worker")
            out = podman("logs", "--tail", "15", ctr, check=False)
            print(f"--- {ctr}:\n{out.stdout}{out.stderr}", file=sys.stderr)
        raise
    finally:
        cluster.teardown()
        subprocess.run(["rm", "-rf", workdir], check=False)
    log("kube_play_test passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
