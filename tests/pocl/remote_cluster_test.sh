#!/usr/bin/env bash
# pocl-cluster.sh and PoCL 7.1's remote server and client, as a user of the
# local stand-in for N machines meets them (doc/scale-out.md):
# - every socket a server listens on is bound to 127.0.0.1, the address it
#   was given (7.1's pocld bound its peer port on every address:
#   patches/pocl-7.1-pocld-peer-port-listens-on-its-address.patch);
# - a client whose stdin is /dev/null lists the servers' memlayer devices
#   (7.1's client polled its stdin and reconnected forever:
#   patches/pocl-7.1-remote-client-leaves-stdin-alone.patch);
# - `stop` ends exactly the servers `start` started: another pocld of the
#   same build keeps running.
#
#   remote_cluster_test.sh POCL71_BUILD_DIR
set -euo pipefail
build=$1
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
cluster=$here/../../drivers/pocl/pocl-cluster.sh
state=$(mktemp -d "${TMPDIR:-/tmp}/remote-cluster-test.XXXXXX")
decoy=
cleanup() {
  "$cluster" stop "$state" >/dev/null 2>&1 || true
  [ -z "$decoy" ] || kill "$decoy" 2>/dev/null || true
  rm -rf "$state"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# Running: a process that has not exited (an exited server nobody reaped yet
# is a zombie, still known to kill -0).
running() { [ -r "/proc/$1/status" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status"; }

"$cluster" start "$state" --build "$build" --servers 2 --devices "memlayer memlayer"
[ "$(wc -l < "$state/servers")" -eq 2 ] || fail "two servers expected in $state/servers"

while read -r pid port ndev; do
  sockets=$(ss -ltnpH | grep "pid=$pid," | awk '{print $4}' || true)
  n=$(wc -w <<<"$sockets")
  [ "$n" -eq 3 ] || fail "server $pid listens on $n sockets, 3 expected: $sockets"
  for s in $sockets; do
    [[ $s == 127.0.0.1:* ]] || fail "server $pid (started for 127.0.0.1:$port) listens on $s"
  done
  echo "server $pid listens on: $sockets"
done < "$state/servers"

listing=$( (eval "$("$cluster" env "$state")"; timeout 120 clinfo -l < /dev/null) ) ||
  fail "clinfo with stdin at /dev/null did not end (status $?)"
echo "$listing"
devices=$(grep -c "Device #.*memlayer-" <<<"$listing" || true)
[ "$devices" -eq 4 ] || fail "the client lists $devices memlayer devices, 4 expected"

# A pocld of the same build that the cluster did not start.
port=$((40000 + RANDOM % 5000 * 4))
POCL_BUILDING=1 OCL_ICD_VENDORS="$build/lib/CL/libpocl.so" POCL_DEVICES=memlayer \
  "$build/pocld/pocld" -a 127.0.0.1 -p "$port" > "$state/decoy.log" 2>&1 < /dev/null &
decoy=$!
pids=$(awk '{print $1}' "$state/servers")
"$cluster" stop "$state"
for pid in $pids; do
  ! running "$pid" || fail "server $pid still runs after stop"
done
running "$decoy" || fail "stop ended a pocld it had not started (PID $decoy)"
echo "stop ended servers $(echo $pids) and left PID $decoy alone"
