#!/usr/bin/env bash
# The stress run with faults on, across seeds and configurations: 1.2 x 10^6
# commands in all (12 runs of 10^5), every read of defined bytes checked.
# Faults in bursts of 4 outlast a source's retries: those copies are made
# from another copy, or fail their command; write-backs are made again.
# Prints one table row per run and the totals (doc/performance.md, "The
# fault sweep"); exits non-zero if any run fails (a mismatch, a hang, a
# leak).
#   bench/stress/fault_sweep.sh [path/to/memlayer-stress] [commands per run]
set -euo pipefail
stress=${1:-build/release/bench/memlayer-stress}
commands=${2:-100000}
[ -x "$stress" ] || { echo "fault_sweep: no $stress (build it: ./memlayer bench, or give its path)" >&2; exit 2; }

configs=(
  "3 devices, direct links|--devices 3 --faults 0.001 --seed 4242"
  "3 devices, direct links|--devices 3 --faults 0.001 --seed 4243"
  "3 devices, direct links|--devices 3 --faults 0.002 --seed 4244"
  "4 devices, direct links|--devices 4 --faults 0.002 --seed 4245"
  "2 devices, via host|--devices 2 --no-peer --faults 0.002 --seed 4246"
  "3 devices, via host|--devices 3 --no-peer --faults 0.002 --seed 4247"
  "4 devices, 256 KiB each (eviction-heavy)|--devices 4 --memory 256K --faults 0.005 --seed 4248"
  "4 devices, 256 KiB each (eviction-heavy)|--devices 4 --memory 256K --faults 0.01 --seed 4249"
  "3 devices, in-order queues|--devices 3 --in-order --faults 0.002 --seed 4250"
  "8 devices, direct links|--devices 8 --faults 0.002 --seed 4251"
  "3 devices, direct links, faults in bursts of 4|--devices 3 --faults 0.001 --fault-burst 4 --seed 4252"
  "4 devices, 256 KiB each, bursts of 4|--devices 4 --memory 256K --faults 0.002 --fault-burst 4 --seed 4253"
)

num() { sed -n "s/.*$1.*/\\1/p" <<<"$2" | head -1; }
echo "| configuration | flags | faults injected | retried | re-sourced | failed commands | reads checked | bytes checked | bytes lost | mismatches |"
echo "|---|---|---|---|---|---|---|---|---|---|"
total_cmd=0 total_fail=0 total_reads=0 total_bytes=0 total_lost=0 total_inj=0 total_mis=0 total_res=0
for c in "${configs[@]}"; do
  name=${c%%|*} flags=${c#*|}
  # shellcheck disable=SC2086
  out=$("$stress" $flags --commands "$commands" --quiet) || { echo "fault_sweep: FAILED: $flags" >&2; echo "$out" >&2; exit 1; }
  reads=$(num '; \([0-9]*\) reads checked' "$out")
  bytes=$(num 'reads checked (\([0-9]*\) bytes)' "$out")
  mis=$(num ' \([0-9]*\) mismatches' "$out")
  failed=$(num ' \([0-9]*\) failed commands' "$out")
  inj=$(num 'faults: \([0-9]*\) transfers' "$out")
  retried=$(num ' \([0-9]*\) tried again' "$out")
  resourced=$(num ' \([0-9]*\) copies re-sourced' "$out")
  lost=$(num ' \([0-9]*\) bytes lost' "$out")
  echo "| $name | \`$flags\` | $inj | $retried | $resourced | $failed | $reads | $bytes | $lost | $mis |"
  total_cmd=$((total_cmd + commands)) total_fail=$((total_fail + failed)) total_reads=$((total_reads + reads))
  total_bytes=$((total_bytes + bytes)) total_lost=$((total_lost + lost)) total_inj=$((total_inj + inj))
  total_mis=$((total_mis + mis)) total_res=$((total_res + resourced))
done
echo "| **all: $total_cmd commands** | | $total_inj | | $total_res | $total_fail | $total_reads | $total_bytes | $total_lost | $total_mis |"
