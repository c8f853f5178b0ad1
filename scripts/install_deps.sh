#!/usr/bin/env bash
# Installs every Debian 12 package gasloc builds, tests or runs with.
# Idempotent: packages already present are skipped, so a second run is fast.
# Nothing is downloaded from anywhere but Debian's package archive.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config git
  # RPC and serialisation
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  # Status, flags, synchronisation
  libabsl-dev
  # kernels (oneDNN 2.6; OpenMP runtime comes with g++)
  libdnnl-dev ocl-icd-opencl-dev opencl-headers
  # metrics; the Prometheus server and promtool for the observability tests
  prometheus-cpp-dev prometheus
  # coordinator state
  libsqlite3-dev sqlite3
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # the raw-TCP baseline of gasloc-bench exchange (issue 5 names iperf3)
  iperf3
  # independent reference model for parity tests and speed comparisons
  python3 python3-torch python3-numpy libopenblas0-openmp
  # container image and Kubernetes test (scripts/build_image.sh,
  # tests/deploy/kube_play_test.py): buildah builds the image offline,
  # podman plays the manifest, runc runs it (crun fails where cgroups are
  # hybrid), catatonit is a pod's infra process, python3-yaml edits the
  # manifest for podman's limits
  podman buildah runc catatonit python3-yaml
  # Python client (deploy/python): gRPC and protobuf runtimes for the stubs
  # protoc and grpc_python_plugin (protobuf-compiler-grpc) generate
  python3-grpcio python3-protobuf
  # network-namespace harness (scripts/netns_cluster.py, docs/
  # heterogeneity.md): ip and tc build and shape the links, iptables drops
  # packets for a scenario's loss; gnuplot draws scripts/netns_compare.py's
  # bpb curves (PNG) and bench/measure_outer.sh's (with error bars)
  iproute2 iptables gnuplot-nox
  # systemd-analyze verify of deploy/systemd (slim images lack systemd)
  systemd
  # test CA and certificates for mutual TLS (scripts/make_test_certs.sh:
  # tests/server/auth_test, scripts/local_cluster.sh)
  openssl
  # libFuzzer targets of the decoders and request handlers (tests/fuzz,
  # preset fuzz): libFuzzer and its sanitizers ship with Debian's clang
  clang libclang-rt-14-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install_deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install_deps: installing ${#missing[@]} package(s): ${missing[*]}"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"

# Debian starts the packaged Prometheus service on install (port 9090). The
# tests run their own Prometheus on free ports with temporary storage and do
# not need it: stop and disable it if we just installed it.
if [[ " ${missing[*]} " == *" prometheus "* ]] && [ -d /run/systemd/system ]; then
  $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
  echo "install_deps: stopped and disabled the packaged prometheus service" \
       "(gasloc's tests start their own; re-enable: systemctl enable --now prometheus)"
fi
