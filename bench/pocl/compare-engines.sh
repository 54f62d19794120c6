#!/usr/bin/env bash
# PoCL's two migration engines side by side: ROUNDS rounds (default 3), each
# running memlayer's engine then PoCL's own, so that drift in the machine's
# speed hits both alike. Each run reports the median of 3 repetitions; the
# table gives, per benchmark, the median over the rounds and the ratio.
#
#   bench/pocl/compare-engines.sh BUILD_DIR [ROUNDS]
#
# Needs the environment of `./memlayer pocl-env` (`./memlayer bench-pocl`
# sets it, builds what this needs and calls this). Kernel enqueue times are
# per enqueue (the benchmark times batches of 64); kernel stream times per
# kernel, wall and (the "CPU" rows) the whole process's CPU time. CPU_DEVICE: PoCL's CPU
# device for the small-command run (pthread, the default, on 3.1; cpu on 7.1).
set -euo pipefail
here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
build=${1:?usage: compare-engines.sh BUILD_DIR [ROUNDS]}
rounds=${2:-3}
cpu=${CPU_DEVICE:-pthread}
bench=$build/tests/pocl
die() { echo "compare-engines: $*" >&2; exit 1; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "ROUNDS $rounds: give a number of rounds (1 or more)"
for program in memlayer-bench-pocl-migration memlayer-bench-pocl; do
  [ -x "$bench/$program" ] || die "$bench/$program not found (./memlayer bench-pocl builds it, as does ./memlayer test in build/test)"
done
[ -n "${OCL_ICD_VENDORS:-}" ] || die "OCL_ICD_VENDORS is not set: run with the environment of ./memlayer pocl-env (eval \"\$(./memlayer pocl-env)\"), or run ./memlayer bench-pocl"
[ -r "$OCL_ICD_VENDORS" ] || die "OCL_ICD_VENDORS=$OCL_ICD_VENDORS not found (./memlayer pocl-env builds PoCL and prints where it is)"
out=$(mktemp)
err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
# shellcheck source=bench-run.sh
. "$here/bench-run.sh"

run() {  # engine program devices filter: one run, medians appended to $out
  local before status=0
  before=$(wc -l <"$out")
  POCL_MEMLAYER_MIGRATION=$1 POCL_DEVICES=$3 "$bench/$2" --benchmark_filter="$4" --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true --benchmark_color=false 2>"$err" |
    awk -v e="$1" '$1 ~ /_median$/ {print e, $1, $2, $4}' >>"$out" || status=$?
  bench_run_ended compare-engines "$2 (POCL_MEMLAYER_MIGRATION=$1 POCL_DEVICES=\"$3\")" "$status" "$before"
}

for ((r = 1; r <= rounds; ++r)); do
  echo "round $r of $rounds" >&2
  for engine in 1 0; do
    run "$engine" memlayer-bench-pocl-migration "memlayer memlayer memlayer memlayer" .
    run "$engine" memlayer-bench-pocl "$cpu memlayer memlayer" 'SmallCommand/1'
  done
done

awk -f "$here/median.awk" -f /dev/stdin "$out" <<'AWK'
  {
    name = $2; sub(/_median$/, "", name)
    per = name ~ /KernelEnqueue/ ? 64 : name ~ /KernelStream/ ? 256 : 1
    add(name, $1, $3 / per)
    # A stream's CPU time is the whole process's: a row of its own.
    if (name ~ /KernelStream/) add(name " CPU", $1, $4 / per)
  }
  function add(name, engine, ns) {
    times[name, engine] = times[name, engine] " " ns
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
