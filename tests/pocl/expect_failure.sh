#!/usr/bin/env bash
# Runs a command that must fail: its exit status must be STATUS and its
# stderr exactly one line containing MESSAGE. Used by ctest for the build
# script's bad-input errors (tests/pocl/pocl71.cmake).
#
#   expect_failure.sh STATUS MESSAGE COMMAND [ARGS...]
set -uo pipefail
want_status=$1 want_message=$2
shift 2
err=$(mktemp)
trap 'rm -f "$err"' EXIT
"$@" >/dev/null 2>"$err"
status=$?
cat "$err" >&2
if [ "$status" -ne "$want_status" ]; then
  echo "expect_failure: exit status $status, expected $want_status" >&2
  exit 1
fi
lines=$(wc -l <"$err")
if [ "$lines" -ne 1 ]; then
  echo "expect_failure: $lines lines on stderr, expected one" >&2
  exit 1
fi
if ! grep -qF -- "$want_message" "$err"; then
  echo "expect_failure: stderr does not say: $want_message" >&2
  exit 1
fi
echo "expect_failure: exit status $status and the message, as expected"
