#!/usr/bin/env bash
# PoCL's two migration engines side by side: ROUNDS rounds (default 3), each
# running memlayer's engine then PoCL's own, so that drift in the machine's
# speed hits both alike. Each run reports the median of 3 repetitions; the
# table gives, per benchmark, the median over the rounds and the ratio.
#
#   bench/pocl/compare-engines.sh BUILD_DIR [ROUNDS]
#
# Needs the environment of `./memlayer pocl-env` (`./memlayer bench-pocl`
# sets it and calls this). Kernel enqueue times are per enqueue (the
# benchmark times batches of 64).
set -euo pipefail
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
build=${1:?usage: compare-engines.sh BUILD_DIR [ROUNDS]}
rounds=${2:-3}
bench=$build/tests/pocl
out=$(mktemp)
trap 'rm -f "$out"' EXIT

run() {  # engine program devices filter
  POCL_MEMLAYER_MIGRATION=$1 POCL_DEVICES=$3 "$bench/$2" --benchmark_filter="$4" --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true --benchmark_color=false 2>/dev/null | awk -v e="$1" '$1 ~ /_median$/ {print e, $1, $2}' >>"$out"
}

for ((r = 1; r <= rounds; ++r)); do
  echo "round $r of $rounds" >&2
  for engine in 1 0; do
    run "$engine" memlayer-bench-pocl-migration "memlayer memlayer memlayer memlayer" .
    run "$engine" memlayer-bench-pocl "pthread memlayer memlayer" 'SmallCommand/1'
  done
done

awk -f "$here/median.awk" -f /dev/stdin "$out" <<'AWK'
  {
    name = $2; sub(/_median$/, "", name)
    ns = $3 / (name ~ /KernelEnqueue/ ? 64 : 1)
    times[name, $1] = times[name, $1] " " ns
    if (!(name in seen)) { seen[name] = 1; order[++count] = name }
  }
  END {
    printf "%-46s %14s %14s %8s\n", "benchmark (median over rounds)", "PoCL engine", "memlayer", "ratio"
    for (i = 1; i <= count; ++i) {
      name = order[i]; p = median(times[name, 0]); m = median(times[name, 1])
      printf "%-46s %11.3f us %11.3f us %7.2fx\n", name, p / 1000, m / 1000, m / p
    }
    print "ratio: memlayer time / PoCL time (below 1: memlayer faster)"
  }
AWK
