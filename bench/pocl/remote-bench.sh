#!/usr/bin/env bash
# memlayer devices behind PoCL 7.1's remote servers (doc/scale-out.md): PoCL
# 7.1's two migration engines side by side on four servers on 127.0.0.1, one
# memlayer device each, and the enqueue cost on a remote device against a
# local one. ROUNDS rounds (default 3), each running memlayer's engine then
# 7.1's own; each run reports the median of 3 repetitions; the table gives
# the median over the rounds.
#
#   bench/pocl/remote-bench.sh POCL71_BUILD_DIR BENCH_DIR [ROUNDS]
#
# POCL71_BUILD_DIR: a built PoCL 7.1 (drivers/pocl/build-pocl.sh --pocl=7.1
# builds it and prints the folder; ./memlayer bench-remote does all of this).
# BENCH_DIR: a memlayer build folder with tests/pocl/memlayer-bench-pocl-migration
# (./memlayer test builds it in build/test). The servers' memlayer devices
# compute on the CPU, as does the client: on a small machine the times are
# loopback and CPU bound; compare the rows, not the absolute times.
set -euo pipefail
pocl=${1:?usage: remote-bench.sh POCL71_BUILD_DIR BENCH_DIR [ROUNDS]}
bench=${2:?usage: remote-bench.sh POCL71_BUILD_DIR BENCH_DIR [ROUNDS]}/tests/pocl/memlayer-bench-pocl-migration
rounds=${3:-3}
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
cluster=$here/../../drivers/pocl/pocl-cluster.sh
[ -x "$bench" ] || { echo "remote-bench: $bench not found (./memlayer bench-remote builds it, as does ./memlayer test in build/test)" >&2; exit 1; }
[ -x "$pocl/pocld/pocld" ] || { echo "remote-bench: $pocl/pocld/pocld not found: give a built PoCL 7.1 folder (./memlayer bench-remote builds one)" >&2; exit 1; }
out=$(mktemp)
err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
# shellcheck source=bench-run.sh
. "$here/bench-run.sh"

run() {  # where engine filter: one run, medians appended to $out
  local where=$1 engine=$2 filter=$3 before status=0
  before=$(wc -l <"$out")
  local cmd=("$bench" --benchmark_filter="$filter" --benchmark_repetitions=3 --benchmark_min_time=0.1
             --benchmark_report_aggregates_only=true --benchmark_color=false)
  if [ "$where" = remote ]; then
    POCL_MEMLAYER_MIGRATION=$engine "$cluster" run --build "$pocl" --servers 4 --devices memlayer -- "${cmd[@]}" 2>"$err"
  else
    POCL_MEMLAYER_MIGRATION=$engine POCL_BUILDING=1 OCL_ICD_VENDORS="$pocl/lib/CL/libpocl.so" \
      POCL_DEVICES="memlayer memlayer memlayer memlayer" "${cmd[@]}" 2>"$err"
  fi | awk -v w="$where" -v e="$engine" '$1 ~ /_median$/ {
         # name, time, unit, cpu, unit, repetitions, then the counter
         # column: bytes_moved for the sub-buffer steps
         print w, e, $1, $2, ($1 ~ /SubBuffer/ ? $7 : "") }' >>"$out" || status=$?
  bench_run_ended remote-bench "the $where run (POCL_MEMLAYER_MIGRATION=$engine)" "$status" "$before"
}

for ((r = 1; r <= rounds; ++r)); do
  echo "round $r of $rounds" >&2
  for engine in 1 0; do
    run remote "$engine" .
    run local "$engine" KernelEnqueue
  done
done

awk -f "$here/median.awk" -f /dev/stdin "$out" <<'AWK'
  function num(x) { if (x ~ /k$/) return x * 1000; if (x ~ /M$/) return x * 1e6; return x + 0 }
  {
    name = $3; sub(/_median$/, "", name)
    ns = $4 / (name ~ /KernelEnqueue/ ? 64 : 1)
    key = $1 " " name
    times[key, $2] = times[key, $2] " " ns
    if ($5 != "") moved[key, $2] = num($5)
    if (!(key in seen)) { seen[key] = 1; order[++count] = key }
  }
  END {
    printf "%-40s %13s %13s %8s %14s %14s\n", "benchmark (median over rounds)", "7.1 engine", "memlayer", "ratio", "7.1 bytes/step", "memlayer b/step"
    for (i = 1; i <= count; ++i) {
      k = order[i]; p = median(times[k, 0]); m = median(times[k, 1])
      printf "%-40s %10.1f us %10.1f us %7.2fx %14s %14s\n", k, p / 1000, m / 1000, m / p,
             ((k, 0) in moved) ? sprintf("%.0f", moved[k, 0]) : "", ((k, 1) in moved) ? sprintf("%.0f", moved[k, 1]) : ""
    }
    print "remote: 4 servers on 127.0.0.1, one memlayer device each; local: 4 memlayer devices in one process"
    print "ratio: memlayer time / 7.1 engine time (below 1: memlayer faster); KernelEnqueue times are per enqueue"
  }
AWK
