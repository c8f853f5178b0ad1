#!/usr/bin/env bash
# Builds the gasloc container image offline: no base image, no registry.
#
#   scripts/build_image.sh [--build DIR] [--tag NAME] [--archive FILE]
#     --build DIR     build folder holding (or to receive) the binaries
#                     (default build/release). Missing binaries are built
#                     there (configured as Release without tests if the
#                     folder is not configured yet).
#     --tag NAME      image name (default gasloc:0.1.0, stored as
#                     localhost/gasloc:0.1.0)
#     --archive FILE  also write the image as an OCI archive, for machines
#                     that should load it without a registry
#                     (podman load -i FILE; ctr -n k8s.io images import FILE)
#
# The image (deploy/image/Containerfile) is FROM scratch: gasloc's binaries,
# /bin/sh (dash), openssl and gasloc-issue-cert (deploy/image) plus exactly the shared libraries they load, copied
# from this Debian machine (their ldd closure, with the dynamic loader), a
# passwd/group with the unprivileged user gasloc (uid/gid 10001) and its
# state folder. buildah builds it with --isolation=chroot, which needs no
# container runtime.
# Needs: buildah (scripts/install_deps.sh), root or a user with subuids.
set -euo pipefail
cd "$(dirname "$0")/.."

build=build/release
tag=gasloc:0.1.0
archive=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --tag) tag="$2"; shift 2 ;;
    --archive) archive="$2"; shift 2 ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build_image: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
command -v buildah > /dev/null ||
  { echo "build_image: buildah not found (run scripts/install_deps.sh)" >&2; exit 2; }

binaries=(gasloc-coordinator gasloc-worker gaslocctl gasloc-train gasloc-healthcheck)
missing=()
for b in "${binaries[@]}"; do
  [ -x "$build/server/$b" ] || missing+=("$b")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ ! -f "$build/CMakeCache.txt" ]; then
    echo "build_image: configuring $build (Release, no tests)"
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DGASLOC_BUILD_TESTS=OFF -DGASLOC_BUILD_BENCH=OFF > /dev/null
  fi
  echo "build_image: building ${missing[*]} in $build"
  cmake --build "$build" -j "$(nproc)" --target "${missing[@]}"
fi

context="$build/image-context"
rm -rf "$context"
mkdir -p "$context/rootfs/usr/local/bin" "$context/rootfs/usr/lib/x86_64-linux-gnu" \
         "$context/rootfs/lib64" "$context/rootfs/etc" "$context/rootfs/tmp" \
         "$context/rootfs/data" "$context/state"
chmod 1777 "$context/rootfs/tmp"

# The binaries without their debug sections (the build folder keeps them).
for b in "${binaries[@]}"; do
  objcopy --strip-debug "$build/server/$b" "$context/rootfs/usr/local/bin/$b"
done

# A POSIX shell (dash, libc only) as /bin/sh: podman runs the exec probes of
# a Kubernetes manifest as shell commands (CMD-SHELL health checks).
mkdir -p "$context/rootfs/bin"
cp -L /bin/dash "$context/rootfs/bin/sh"
# gasloc-issue-cert and the openssl command it runs: the Kubernetes
# manifest's init containers issue each pod its own certificate.
command -v openssl > /dev/null ||
  { echo "build_image: openssl not found (run scripts/install_deps.sh)" >&2; exit 2; }
openssl_bin="$(command -v openssl)"
cp -L "$openssl_bin" "$context/rootfs/usr/local/bin/openssl"
install -m 0755 deploy/image/gasloc-issue-cert "$context/rootfs/usr/local/bin/gasloc-issue-cert"

# Their shared-library closure: ldd resolves it transitively. Libraries go
# to /usr/lib/x86_64-linux-gnu, a directory the loader searches without a
# cache; the loader goes where the binaries' PT_INTERP names it.
libs=$(ldd "${binaries[@]/#/$build/server/}" /bin/dash "$openssl_bin" |
       awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// && $1 !~ /:$/ {print $1}' | sort -u)
interp=""
for lib in $libs; do
  case "$(basename "$lib")" in
    ld-linux-*) interp="$lib"; continue ;;
  esac
  cp -L "$lib" "$context/rootfs/usr/lib/x86_64-linux-gnu/$(basename "$lib")"
done
[ -n "$interp" ] || { echo "build_image: no dynamic loader in ldd's output" >&2; exit 1; }
mkdir -p "$context/rootfs$(dirname "$interp")"
cp -L "$interp" "$context/rootfs$interp"

cat > "$context/rootfs/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/usr/sbin/nologin
gasloc:x:10001:10001:gasloc:/var/lib/gasloc:/usr/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
EOF
cat > "$context/rootfs/etc/group" <<'EOF'
root:x:0:
gasloc:x:10001:
nogroup:x:65534:
EOF
echo "hosts: files dns" > "$context/rootfs/etc/nsswitch.conf"
cp deploy/image/Containerfile "$context/Containerfile"

# Smoke test before packaging (as root: chroot into the root filesystem):
# every binary starts with nothing but the copied libraries.
if [ "$(id -u)" -eq 0 ]; then
  for b in "${binaries[@]}"; do
    OMP_WAIT_POLICY=PASSIVE chroot "$context/rootfs" "/usr/local/bin/$b" --version > /dev/null ||
      { echo "build_image: $b does not start inside the image's root filesystem" >&2; exit 1; }
  done
  chroot "$context/rootfs" /usr/local/bin/openssl version > /dev/null ||
    { echo "build_image: openssl does not start inside the image's root filesystem" >&2; exit 1; }
fi

old_id=$(buildah images --quiet --noheading "$tag" 2>/dev/null | head -1 || true)
version=$("$build/server/gaslocctl" --version 2>/dev/null | awk '{print $NF}' || echo unknown)
echo "build_image: building $tag ($(du -sh "$context/rootfs" | cut -f1) root filesystem)"
# --format docker: OCI image configs have no HEALTHCHECK.
buildah bud --isolation=chroot --format docker --quiet \
  --label org.opencontainers.image.title=gasloc \
  --label org.opencontainers.image.version="$version" \
  -t "$tag" -f "$context/Containerfile" "$context" > /dev/null
new_id=$(buildah images --quiet --noheading "$tag" | head -1)
# The image this one replaced, unless a container still uses it.
if [ -n "$old_id" ] && [ "$old_id" != "$new_id" ]; then
  buildah rmi "$old_id" > /dev/null 2>&1 || true
fi
if [ -n "$archive" ]; then
  rm -f "$archive"
  buildah push --quiet "$tag" "oci-archive:$archive:$tag"
  echo "build_image: wrote $archive"
fi
echo "build_image: built $tag (image $new_id)"
