#!/usr/bin/env bash
# ctest systemd_units_verify: stages deploy/systemd with
# scripts/install_systemd.sh --root (binaries, units, settings files) and runs
# `systemd-analyze verify --root` on both units. Needs no running systemd:
# verify loads the units offline, from the staged root, which also gets a
# copy of the distribution's units (sysinit.target and the like). Any
# output (an unknown directive, a missing executable) fails the test. Then
# `systemd-analyze security --offline` rates the hardening section: an
# exposure above 3.0 of 10 fails (the units score 1.5 and 1.8). Last, the
# coordinator's TasksMax must leave room for the fleet it is sized for: its
# synchronous gRPC server holds a thread per waiting long poll, about one
# per worker (993 threads at 1,000 simulated workers, docs/benchmarks.md),
# and docs/operations.md sizes a coordinator for 1,000 to 2,000 workers.
#   systemd_verify_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src="$1"
build="$2"
command -v systemd-analyze > /dev/null ||
  { echo "systemd-analyze not found: run scripts/install_deps.sh (package systemd)" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
bash "$src/scripts/install_systemd.sh" --build "$build" --root "$tmp/root" > /dev/null
mkdir -p "$tmp/root/usr/lib/systemd"
cp -r /lib/systemd/system "$tmp/root/usr/lib/systemd/"
units=(gasloc-coordinator.service gasloc-worker.service)
status=0
out="$(systemd-analyze verify --man=no --root="$tmp/root" "${units[@]}" 2>&1)" || status=$?
if [ "$status" -ne 0 ] || [ -n "$out" ]; then
  echo "systemd-analyze verify failed (exit $status):"
  echo "$out"
  exit 1
fi
echo "systemd-analyze verify: ${units[*]} clean"
for unit in "${units[@]}"; do
  if ! report="$(systemd-analyze security --offline=true --threshold=30 \
                   --root="$tmp/root" "$unit" 2>&1)"; then
    echo "$report"
    echo "$unit: exposure above 3.0 (systemd-analyze security)"
    exit 1
  fi
  echo "$report" | tail -1
done
tasks="$(sed -n 's/^TasksMax=//p' "$src/deploy/systemd/gasloc-coordinator.service")"
if ! [[ "$tasks" =~ ^[0-9]+$ ]] || [ "$tasks" -lt 4096 ]; then
  echo "gasloc-coordinator.service: TasksMax=$tasks leaves no room for" \
       "2,000 workers' long polls (a thread each): at least 4096"
  exit 1
fi
echo "gasloc-coordinator.service: TasksMax=$tasks"
