#!/usr/bin/env bash
# `./memlayer cluster env STATE` and `cluster stop STATE` need only the state
# folder that `cluster start` wrote: no POCL71_TARBALL, no packages, no PoCL
# build (README, doc/scale-out.md). Before, both stopped at "POCL71_TARBALL is
# not set", so `eval "$(./memlayer cluster env STATE)"` did nothing and stop
# left the servers running. The state here names one server whose PID is not
# a pocld of its build folder, so stop must leave that process alone and
# still empty the state.
#
#   cluster_env_stop_test.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: cluster_env_stop_test.sh SOURCE_DIR}
state=$(mktemp -d)
trap 'rm -rf "$state"' EXIT
sleep 600 &  # stands for a process stop must not touch
bystander=$!
trap 'kill "$bystander" 2>/dev/null || true; rm -rf "$state"' EXIT
echo "$bystander 23456 2" >"$state/servers"
echo "$state/no-build" >"$state/build"
fail() { echo "FAIL: $*" >&2; exit 1; }

env=$(env -u POCL71_TARBALL "$src/memlayer" cluster env "$state") || fail "cluster env STATE failed without POCL71_TARBALL"
echo "$env"
for want in "export POCL_REMOTE0_PARAMETERS='127.0.0.1:23456/0'" "export POCL_REMOTE1_PARAMETERS='127.0.0.1:23456/1'" \
            "export POCL_DEVICES='remote remote'" "export OCL_ICD_VENDORS='$state/no-build/lib/CL/libpocl.so'"; do
  grep -qxF "$want" <<<"$env" || fail "cluster env does not say: $want"
done

env -u POCL71_TARBALL "$src/memlayer" cluster stop "$state" || fail "cluster stop STATE failed without POCL71_TARBALL"
[ ! -s "$state/servers" ] || fail "cluster stop left $state/servers: $(cat "$state/servers")"
kill -0 "$bystander" 2>/dev/null || fail "cluster stop killed a process that is not its pocld"
echo "cluster env and stop work with only the state folder"
