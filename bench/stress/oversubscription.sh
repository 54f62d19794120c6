#!/usr/bin/env bash
# Throughput against oversubscription: the stress run on sim devices whose
# memory is the working set (the buffers at the start) divided by R, for R
# from 0.5 (no pressure) to 8, the same seed and commands each time. Prints
# one table row per R (doc/performance.md, "Oversubscription"): commands/s
# and its ratio to R = 0.5, bytes migrated per byte of working set,
# evictions, compactions, failed commands, commands refused for device
# memory (whose room was held behind user events not set yet / that fit)
# and mismatches; exits non-zero if a run fails (a mismatch, a failed
# command, a refused command that fit, a hang).
#   bench/stress/oversubscription.sh [path/to/memlayer-stress] [commands] [devices]
set -euo pipefail
stress=${1:-build/release/bench/memlayer-stress}
commands=${2:-100000}
devices=${3:-3}
[ -x "$stress" ] || { echo "oversubscription: no $stress (build it: ./memlayer run --help, or give its path)" >&2; exit 2; }

num() { sed -n "s|.*$1.*|\\1|p" <<<"$2" | head -1; }

probe=$("$stress" --devices "$devices" --commands 1 --memory 64M --quiet --seed 11)
ws=$(num 'working set \([0-9]*\) bytes' "$probe")
[ -n "$ws" ] || { echo "oversubscription: $stress printed no working set" >&2; exit 2; }
echo "working set $ws bytes, $devices devices, $commands commands"
echo "| working set / device memory | device memory | commands/s | vs. no pressure | bytes migrated per byte of working set | evictions | compactions | failed commands | refused: behind user events / that fit | mismatches |"
echo "|---|---|---|---|---|---|---|---|---|---|"
base=""
status=0
for r in 0.5 1 1.5 2 3 4 6 8; do
  kib=$(awk -v w="$ws" -v r="$r" 'BEGIN { printf "%d", w / r / 1024 }')
  out=$("$stress" --devices "$devices" --commands "$commands" --memory "${kib}K" --quiet --seed 11) || status=1
  rate=$(num '  \([0-9]*\) commands/s' "$out")
  [ -n "$base" ] || base=$rate
  per=$(num 'migrated \([0-9.]*\) bytes per byte' "$out")
  ev=$(num 'evictions \([0-9]*\),' "$out")
  co=$(num 'compactions \([0-9]*\);' "$out")
  fc=$(num ' \([0-9]*\) failed commands' "$out")
  mm=$(num ' \([0-9]*\) mismatches' "$out")
  rg=$(num ', \([0-9]*\) whose room was held' "$out")
  rf=$(num ', \([0-9]*\) that fit' "$out")
  vs=$(awk -v a="$rate" -v b="$base" 'BEGIN { printf "%.2f", a / b }')
  echo "| ${r}x | ${kib} KiB | $rate | $vs | $per | $ev | $co | $fc | $rg / $rf | $mm |"
  [ "$fc" = 0 ] && [ "$mm" = 0 ] && [ "$rf" = 0 ] || status=1
done
exit $status
