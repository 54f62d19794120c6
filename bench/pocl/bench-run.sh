# Sourced by compare-engines.sh and remote-bench.sh: the end of one
# benchmark run whose medians were appended to $out and whose stderr went
# to $err. A run that failed or printed no median stops the script, saying
# which run and showing the run's own stderr (the script would otherwise
# print a table of nothing).
#
#   bench_run_ended SCRIPT WHAT STATUS LINES_BEFORE
bench_run_ended() {
  if [ "$3" -ne 0 ] || [ "$(wc -l <"$out")" -eq "$4" ]; then
    echo "$1: $2 failed (status $3) or measured nothing; its stderr:" >&2
    tail -30 "$err" >&2
    exit 1
  fi
}
