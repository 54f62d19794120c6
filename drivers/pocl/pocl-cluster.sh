#!/usr/bin/env bash
# A local stand-in for N machines: N PoCL-R servers (pocld) on 127.0.0.1,
# each serving its own memlayer devices, and the environment with which a
# client's PoCL sees all of them as `remote` devices (doc/scale-out.md).
#
#   pocl-cluster.sh start STATE --build DIR [--servers N] [--devices "memlayer memlayer"]
#                                [--server-env VAR=VALUE]...
#   pocl-cluster.sh env STATE     the client's environment (sh syntax)
#   pocl-cluster.sh stop STATE    stops exactly the servers `start` started
#   pocl-cluster.sh run --build DIR [start's options] -- COMMAND [ARG...]
#                                 start, run COMMAND as the client, stop
#
# STATE: a folder of the cluster's own (its servers' PIDs, ports and logs).
# DIR: a PoCL 7.1 build with the remote server and client (build-pocl.sh
# --pocl=7.1 --print-dir). Each server listens on 127.0.0.1 only, on three
# ports of its own (PORT, PORT+1, PORT+2), picked free at random unless
# --port gives the first server's. Servers are stopped by their PIDs, and
# only when the PID is still the pocld this script started (a PID reused by
# another process is left alone).
set -euo pipefail

die() { echo "pocl-cluster: $*" >&2; exit 1; }

usage() { sed -n '6,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

listening() {  # port: is something listening on it (any address)?
  [ -n "$(ss -ltnH "sport = :$1" 2>/dev/null)" ]
}

ports_free() {  # first port: are it and the next two free?
  local p
  for p in "$1" $(($1 + 1)) $(($1 + 2)); do
    if listening "$p"; then return 1; fi
  done
}

all_listening() {  # first port: do it and the next two listen?
  listening "$1" && listening $(($1 + 1)) && listening $(($1 + 2))
}

is_our_pocld() {  # pid, build dir: is that PID still our pocld?
  local exe
  exe=$(readlink "/proc/$1/exe" 2>/dev/null) || return 1
  [ "$exe" = "$2/pocld/pocld" ]
}

started_at() {  # pid: when it started (clock ticks since boot); fails once it
  # has exited. An exiting process loses /proc/PID/exe before it is reaped,
  # so "still running" is judged by this, not by is_our_pocld.
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  # shellcheck disable=SC2086
  set -- ${stat##*) }  # the fields after "PID (COMM) ": state first
  [ "$1" != Z ] && [ "$1" != X ] || return 1
  echo "${20}"  # field 22 of proc(5), starttime
}

start() {
  local state=$1; shift
  local build='' servers=2 devices='memlayer memlayer' port='' server_env=()
  while [ $# -gt 0 ]; do
    case $1 in
      --build) build=$2; shift 2 ;;
      --servers) servers=$2; shift 2 ;;
      --devices) devices=$2; shift 2 ;;
      --port) port=$2; shift 2 ;;
      --server-env) server_env+=("$2"); shift 2 ;;
      *) usage ;;
    esac
  done
  [ -n "$build" ] || die "no --build DIR (a PoCL 7.1 build folder: drivers/pocl/build-pocl.sh --pocl=7.1 --print-dir)"
  [ -d "$build" ] || die "--build $build: no such folder (a PoCL 7.1 build folder: drivers/pocl/build-pocl.sh --pocl=7.1 --print-dir)"
  [ -x "$build/pocld/pocld" ] || die "$build/pocld/pocld not found: PoCL 7.1 is built without its remote server (build-pocl.sh --pocl=7.1 builds it)"
  [ -r "$build/lib/CL/libpocl.so" ] || die "$build/lib/CL/libpocl.so not found"
  [[ $servers =~ ^[1-9][0-9]?$ ]] || die "--servers $servers: give a number from 1 to 99"
  [ -n "${devices//[[:space:]]/}" ] || die "--devices is empty: name each server's devices (e.g. \"memlayer memlayer\")"
  [ -z "$port" ] || [[ $port =~ ^[0-9]+$ && $port -ge 1024 && $port -le 65000 ]] ||
    die "--port $port: give a port from 1024 to 65000"
  mkdir -p "$state"
  [ ! -s "$state/servers" ] || die "$state already holds a running cluster (pocl-cluster.sh stop $state)"
  : > "$state/servers"

  local ndev
  ndev=$(wc -w <<<"$devices")
  local k next=${port:-0}
  for ((k = 0; k < servers; k++)); do
    local tries=0 pid p
    while :; do
      if [ -n "$port" ]; then
        p=$next
      else
        p=$((20000 + (RANDOM % 10000) * 4))
      fi
      if ports_free "$p" && ! grep -q " $p " "$state/servers"; then
        env "${server_env[@]}" POCL_BUILDING=1 OCL_ICD_VENDORS="$build/lib/CL/libpocl.so" \
          POCL_DEVICES="$devices" \
          "$build/pocld/pocld" -a 127.0.0.1 -p "$p" > "$state/server$k.log" 2>&1 < /dev/null &
        pid=$!
        # Up when it listens on its three ports; gone when a bind failed.
        local waited=0
        while kill -0 "$pid" 2>/dev/null && ! all_listening "$p" && [ $waited -lt 300 ]; do
          sleep 0.1; waited=$((waited + 1))
        done
        if kill -0 "$pid" 2>/dev/null && all_listening "$p"; then
          echo "$pid $p $ndev" >> "$state/servers"
          break
        fi
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
      fi
      tries=$((tries + 1))
      if [ -n "$port" ] || [ $tries -ge 8 ]; then
        stop "$state" >/dev/null 2>&1 || true
        die "server $k did not start on 127.0.0.1:$p (its log: $state/server$k.log)"
      fi
    done
    next=$((p + 4))
  done
  echo "$build" > "$state/build"
  env_of "$state" > "$state/client.env"
  echo "pocl-cluster: $servers server(s) on 127.0.0.1, $ndev device(s) each ($devices); client environment in $state/client.env" >&2
}

env_of() {  # state: the client's environment
  local state=$1 build pid p ndev d i=0 names=()
  build=$(cat "$state/build" 2>/dev/null || true)
  [ -s "$state/servers" ] || die "$state holds no running cluster"
  echo "export POCL_BUILDING=1"
  echo "export OCL_ICD_VENDORS='$build/lib/CL/libpocl.so'"
  while read -r pid p ndev; do
    for ((d = 0; d < ndev; d++)); do
      echo "export POCL_REMOTE${i}_PARAMETERS='127.0.0.1:$p/$d'"
      names+=(remote)
      i=$((i + 1))
    done
  done < "$state/servers"
  echo "export POCL_DEVICES='${names[*]}'"
}

stop() {
  local state=$1 build pid p ndev since left=()
  [ -f "$state/servers" ] || die "$state holds no cluster"
  build=$(cat "$state/build" 2>/dev/null || true)
  while read -r pid p ndev; do
    if [ -n "$build" ] && is_our_pocld "$pid" "$build" && since=$(started_at "$pid"); then
      kill "$pid" 2>/dev/null || true
      left+=("$pid:$since")
    fi
  done < "$state/servers"
  local waited=0 entry alive
  while :; do
    alive=()
    for entry in "${left[@]}"; do
      [ "$(started_at "${entry%%:*}" || true)" = "${entry#*:}" ] && alive+=("${entry%%:*}")
    done
    [ ${#alive[@]} -eq 0 ] && break
    if [ $waited -ge 50 ]; then kill -9 "${alive[@]}" 2>/dev/null || true; fi
    [ $waited -ge 80 ] && die "servers ${alive[*]} do not stop"
    sleep 0.1; waited=$((waited + 1))
  done
  : > "$state/servers"
}

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
  start) [ $# -ge 1 ] || usage; start "$@" ;;
  env) [ $# -eq 1 ] || usage; env_of "$1" ;;
  stop) [ $# -eq 1 ] || usage; stop "$1" ;;
  run)
    opts=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do opts+=("$1"); shift; done
    [ $# -ge 2 ] || usage
    shift
    state=$(mktemp -d "${TMPDIR:-/tmp}/pocl-cluster.XXXXXX")
    trap 'stop "$state" >/dev/null 2>&1 || true; rm -rf "$state"' EXIT
    start "$state" "${opts[@]}"
    status=0
    # The client's stdin is /dev/null, as under a test runner or nohup.
    (eval "$(env_of "$state")"; export POCL_CLUSTER_STATE="$state"; "$@" < /dev/null) || status=$?
    if [ $status -ne 0 ]; then
      for log in "$state"/server*.log; do
        [ -s "$log" ] && { echo "--- $(basename "$log") (last lines)"; tail -15 "$log"; } >&2
      done
    fi
    exit $status
    ;;
  *) usage ;;
esac
