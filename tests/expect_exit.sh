#!/usr/bin/env bash
# Runs a command and checks how it ended, for ctest entries whose program
# must exit with a given status and say given things (a bad input named, a
# device left out, a run's summary): its exit status must be STATUS, and its
# output (stdout and stderr) must contain each TEXT, a fixed string. With
# --one-line-error, stderr must be exactly one line and hold each TEXT (the
# build scripts' one-line errors, tests/pocl/pocl71.cmake).
#
#   expect_exit.sh STATUS [--one-line-error] [TEXT...] -- COMMAND [ARGS...]
set -uo pipefail
usage() { echo "usage: expect_exit.sh STATUS [--one-line-error] [TEXT...] -- COMMAND [ARGS...]" >&2; exit 2; }
[ $# -ge 3 ] || usage
want_status=$1
shift
[[ $want_status =~ ^[0-9]+$ ]] || usage
one_line=
if [ "$1" = --one-line-error ]; then one_line=1; shift; fi
texts=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do texts+=("$1"); shift; done
[ $# -ge 2 ] || usage
shift  # --
out=$(mktemp) err=$(mktemp)
trap 'rm -f "$out" "$err"' EXIT
"$@" >"$out" 2>"$err"
status=$?
cat "$out"
cat "$err" >&2
failed=
if [ "$status" -ne "$want_status" ]; then
  echo "expect_exit: exit status $status, expected $want_status" >&2
  failed=1
fi
where=("$out" "$err")
if [ -n "$one_line" ]; then
  where=("$err")
  lines=$(wc -l <"$err")
  if [ "$lines" -ne 1 ]; then
    echo "expect_exit: $lines lines on stderr, expected one" >&2
    failed=1
  fi
fi
for t in "${texts[@]}"; do
  if ! grep -qF -- "$t" "${where[@]}"; then
    echo "expect_exit: the output does not say: $t" >&2
    failed=1
  fi
done
[ -z "$failed" ] || exit 1
echo "expect_exit: exit status $status and what it had to say, as expected"
