#!/usr/bin/env bash
# The podman set-up of the image and Kubernetes tests, then their command.
#
#   podman_env.sh BUILD_DIR --build-image      ctest image_build
#   podman_env.sh BUILD_DIR COMMAND [ARGS...]  ctest kube_play_test
#
# Podman and buildah get a test-local configuration, through
# CONTAINERS_CONF and CONTAINERS_STORAGE_CONF (nothing under /etc changes):
#   - runtime runc (crun fails on hosts whose cgroups are in hybrid mode),
#   - default_ulimits = [] (containers keep the host's RLIMIT_NOFILE: raising
#     it is not permitted in every sandbox),
#   - cgroupfs and a file events log (no running systemd needed),
#   - storage of their own under BUILD_DIR/podman (graph) and
#     /run/gasloc-podman-HASH (run state), so the tests see and clean only
#     their own images, pods and volumes.
# The image is tagged localhost/gasloc:test (GASLOC_IMAGE).
#
# Exits 77 (ctest SKIP_RETURN_CODE) with one line saying why when podman
# cannot run here: not installed, not root, or a pod does not start.
set -euo pipefail
build="$(realpath "$1")"
shift
src="$(cd "$(dirname "$0")/../.." && pwd)"

skip() { echo "SKIPPED: $*" >&2; exit 77; }

[ "$(id -u)" -eq 0 ] || skip "the podman tests run as root (rootless podman needs subuids; not set up here)"
for tool in podman buildah runc catatonit; do
  command -v "$tool" > /dev/null ||
    skip "$tool is not installed (scripts/install_deps.sh installs podman, buildah, runc, catatonit)"
done

state="$build/podman"
hash="$(echo -n "$build" | sha1sum | cut -c1-10)"
run="/run/gasloc-podman-$hash"
mkdir -p "$state/storage" "$run"
cat > "$state/containers.conf" <<EOF
[containers]
default_ulimits = []

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
tmp_dir = "$run/libpod"
EOF
cat > "$state/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$state/storage"
runroot = "$run/storage"
EOF
export CONTAINERS_CONF="$state/containers.conf"
export CONTAINERS_STORAGE_CONF="$state/storage.conf"
export GASLOC_IMAGE="localhost/gasloc:test"

podman info > "$state/podman-info.txt" 2>&1 ||
  skip "podman info fails here: $(tail -1 "$state/podman-info.txt")"

if [ "${1:-}" = "--build-image" ]; then
  exec bash "$src/scripts/build_image.sh" --build "$build" --tag "$GASLOC_IMAGE"
fi

# Can this machine start a pod at all (runtime, cgroups, the catatonit
# infra container)? If not, skip rather than fail.
probe="gasloc-probe-$$"
if ! out="$(podman pod create --name "$probe" 2>&1 && podman pod start "$probe" 2>&1)"; then
  podman pod rm -f "$probe" > /dev/null 2>&1 || true
  skip "podman cannot start a pod here: $(echo "$out" | grep -v '^[0-9a-f]\{64\}$' | tail -1)"
fi
podman pod rm -f "$probe" > /dev/null 2>&1 || true
podman image exists "$GASLOC_IMAGE" ||
  { echo "image $GASLOC_IMAGE missing: the image_build test builds it" >&2; exit 1; }
exec "$@"
