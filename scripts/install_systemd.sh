#!/usr/bin/env bash
# Installs gasloc as systemd services on this machine (deploy/systemd).
#
#   sudo scripts/install_systemd.sh [--role coordinator|worker|both]
#        [--coordinator HOST:PORT] [--build DIR] [--root DIR] [--no-start]
#     --role R           which unit to enable and start (default worker)
#     --coordinator A    sets GASLOC_COORDINATOR in a new
#                        /etc/default/gasloc-worker (default localhost:7070)
#     --build DIR        build folder with the binaries (default build/release;
#                        scripts/build.sh builds it)
#     --root DIR         install into DIR instead of / (staging, tests): no
#                        user is created and nothing is started
#     --no-start         install only; do not enable or start anything
#
# Installs the binaries to /usr/local/bin, both units to
# /etc/systemd/system, their settings files to /etc/default (only where none
# exists yet: an operator's settings are never overwritten), and
# docs/operations.md to /usr/local/share/doc/gasloc; creates the system user
# and group gasloc; then daemon-reload, enable and (re)start the role's
# unit. Running it again upgrades the binaries in place: a restarted
# coordinator resumes its jobs, a restarted worker rejoins at the next
# round (docs/operations.md, "Upgrading").
set -euo pipefail
cd "$(dirname "$0")/.."

role=worker
coordinator=""
build=build/release
root=""
start=1
while [ $# -gt 0 ]; do
  case "$1" in
    --role) role="$2"; shift 2 ;;
    --coordinator) coordinator="$2"; shift 2 ;;
    --build) build="$2"; shift 2 ;;
    --root) root="$(realpath -m "$2")"; start=0; shift 2 ;;
    --no-start) start=0; shift ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install_systemd: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$role" in
  coordinator) units=(gasloc-coordinator) ;;
  worker) units=(gasloc-worker) ;;
  both) units=(gasloc-coordinator gasloc-worker) ;;
  *) echo "install_systemd: --role must be coordinator, worker or both" >&2; exit 2 ;;
esac
if [ -z "$root" ] && [ "$(id -u)" -ne 0 ]; then
  echo "install_systemd: run as root (or pass --root DIR to stage)" >&2; exit 2
fi
binaries=(gasloc-coordinator gasloc-worker gaslocctl gasloc-healthcheck)
for b in "${binaries[@]}"; do
  [ -x "$build/server/$b" ] ||
    { echo "install_systemd: $build/server/$b missing (build first: scripts/build.sh)" >&2; exit 2; }
done

install -d "$root/usr/local/bin" "$root/etc/systemd/system" "$root/etc/default" \
           "$root/usr/local/share/doc/gasloc"
for b in "${binaries[@]}"; do
  # Through a temporary name and a rename: a running daemon keeps its
  # (old) file, the next start gets the new one.
  install -m 0755 "$build/server/$b" "$root/usr/local/bin/.$b.new"
  mv -f "$root/usr/local/bin/.$b.new" "$root/usr/local/bin/$b"
done
for unit in gasloc-coordinator gasloc-worker; do
  install -m 0644 "deploy/systemd/$unit.service" "$root/etc/systemd/system/$unit.service"
  if [ ! -e "$root/etc/default/$unit" ]; then
    install -m 0644 "deploy/systemd/$unit.env" "$root/etc/default/$unit"
    if [ "$unit" = gasloc-worker ] && [ -n "$coordinator" ]; then
      sed -i "s|^GASLOC_COORDINATOR=.*|GASLOC_COORDINATOR=$coordinator|" \
        "$root/etc/default/$unit"
    fi
  elif [ "$unit" = gasloc-worker ] && [ -n "$coordinator" ]; then
    echo "install_systemd: $root/etc/default/$unit exists; left as it is" \
         "(set GASLOC_COORDINATOR=$coordinator there yourself)" >&2
  fi
done
install -m 0644 docs/operations.md "$root/usr/local/share/doc/gasloc/operations.md"

if [ -n "$root" ]; then
  echo "install_systemd: staged under $root"
  exit 0
fi
if ! getent group gasloc > /dev/null; then groupadd --system gasloc; fi
if ! getent passwd gasloc > /dev/null; then
  useradd --system --gid gasloc --home-dir /var/lib/gasloc --no-create-home \
          --shell /usr/sbin/nologin --comment "gasloc daemons" gasloc
fi
if [ ! -d /run/systemd/system ]; then
  echo "install_systemd: installed; systemd is not running here, so nothing was started"
  exit 0
fi
systemctl daemon-reload
if [ "$start" = 1 ]; then
  for unit in "${units[@]}"; do
    systemctl enable "$unit.service"
    systemctl restart "$unit.service"
    echo "install_systemd: $unit started (journalctl -u $unit -f)"
  done
else
  echo "install_systemd: installed; start with: systemctl enable --now ${units[*]/%/.service}"
fi
