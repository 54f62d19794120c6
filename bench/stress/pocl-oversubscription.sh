#!/usr/bin/env bash
# Throughput against oversubscription on PoCL: the OpenCL stress program
# (tests/pocl/cl_stress.cpp, --stats 1) on memlayer devices whose global
# memory is the working set (21 buffers of 1 MiB) divided by R, for R from
# 0.5 (no pressure) to 8, the same seed and ops each time. ROUNDS rounds
# (default 3), each running every R in turn, so that drift in the machine's
# speed hits every R alike. Prints one table row per R (doc/performance.md,
# "Oversubscription on PoCL"): the median ops/s over the rounds and its
# ratio to R = 0.5, bytes moved per byte of working set (the same in every
# round: the run is seeded), evictions; exits non-zero if a run fails (a
# mismatch, an OpenCL error).
#   bench/stress/pocl-oversubscription.sh [path/to/memlayer-cl-stress] [ops] [devices]
# Needs the environment of `./memlayer pocl-env` (eval "$(./memlayer pocl-env)").
set -euo pipefail
stress=${1:-build/test/tests/pocl/memlayer-cl-stress}
ops=${2:-3000}
devices=${3:-2}
buffers=21
elements=262144  # 1 MiB per buffer
die() { echo "pocl-oversubscription: $*" >&2; exit 1; }
[ -x "$stress" ] || die "no $stress (./memlayer test builds it in build/test, or give its path)"
[ -n "${OCL_ICD_VENDORS:-}" ] || die "OCL_ICD_VENDORS is not set: run with the environment of ./memlayer pocl-env (eval \"\$(./memlayer pocl-env)\")"
[[ $devices =~ ^[1-9]$ ]] || die "devices $devices: give 1 to 9"

num() { sed -n "s|.*$1.*|\\1|p" <<<"$2" | head -1; }

ws=$((buffers * elements * 4))
rounds=${ROUNDS:-3}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || die "ROUNDS $rounds: give a number of rounds (1 or more)"
ratios=(0.5 1 1.5 2 3 4 6 8)
names=$(printf 'memlayer %.0s' $(seq "$devices"))
declare -A rates per evictions mismatches
status=0
for ((round = 1; round <= rounds; ++round)); do
  for r in "${ratios[@]}"; do
    kib=$(awk -v w="$ws" -v r="$r" 'BEGIN { printf "%d", w / r / 1024 }')
    params=()
    for ((d = 0; d < devices; ++d)); do params+=("POCL_MEMLAYER${d}_PARAMETERS=global_mem=${kib}K"); done
    out=$(env POCL_DEVICES="${names% }" "${params[@]}" "$stress" --ops "$ops" --seed 11 --buffers "$buffers" \
      --elements "$elements" --stats 1 2>&1) || status=1
    rate=$(num ' \([0-9]*\) ops/s' "$out")
    [ -n "$rate" ] || { echo "$out" >&2; die "the run at ${r}x printed no rate"; }
    rates[$r]+="$rate "
    per[$r]=$(num 'moved \([0-9.]*\) bytes per byte' "$out")
    evictions[$r]=$(num '; \([0-9]*\) evictions' "$out")
    mismatches[$r]=$(num ' \([0-9]*\) mismatches' "$out")
    [ "${mismatches[$r]}" = 0 ] || status=1
  done
done

median() { tr ' ' '\n' <<<"$1" | grep . | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "working set $ws bytes, $devices memlayer devices, $ops ops, median of $rounds rounds"
echo "| working set / device memory | device memory | ops/s | vs. no pressure | bytes moved per byte of working set | evictions | mismatches |"
echo "|---|---|---|---|---|---|---|"
base=$(median "${rates[${ratios[0]}]}")
for r in "${ratios[@]}"; do
  kib=$(awk -v w="$ws" -v r="$r" 'BEGIN { printf "%d", w / r / 1024 }')
  rate=$(median "${rates[$r]}")
  vs=$(awk -v a="$rate" -v b="$base" 'BEGIN { printf "%.2f", a / b }')
  echo "| ${r}x | ${kib} KiB | $rate | $vs | ${per[$r]} | ${evictions[$r]} | ${mismatches[$r]} |"
done
exit $status
