#!/usr/bin/env bash
# ./memlayer cache prune DAYS (drivers/pocl/pocl-cache.sh) on a scratch cache:
# it removes the folders this checkout does not use and no build used for
# DAYS days, and keeps this checkout's folder however old, a folder used
# lately (another checkout's), and one whose build holds its lock.
#
#   pocl_cache_test.sh SOURCE_DIR
set -euo pipefail
src=${1:?usage: pocl_cache_test.sh SOURCE_DIR}
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
export MEMLAYER_CACHE=$cache
unset POCL71_TARBALL
fail() { echo "FAIL: $*" >&2; exit 1; }

ours=$(dirname "$("$src/drivers/pocl/build-pocl.sh" --pocl=3.1 --print-dir)")
[ "$(dirname "$ours")" = "$cache" ] || fail "build-pocl.sh --print-dir names $ours, not a folder of MEMLAYER_CACHE"
mkdir -p "$ours/build" "$cache/pocl-3.1-0000000000000old/build" "$cache/pocl-7.1-00000000000recent" \
         "$cache/pocl-7.1-000000000000busy" "$cache/pocl-7.1-00000000000old.tmp"
touch -d '40 days ago' "$ours/build/.memlayer-stamp" "$cache/pocl-3.1-0000000000000old/build/.memlayer-stamp" \
      "$cache/pocl-7.1-000000000000busy" "$cache/pocl-7.1-00000000000old.tmp"
touch "$cache/pocl-7.1-00000000000recent/last-used"
touch "$cache/.pocl-0000000000000old.lock"

"$src/memlayer" cache | tee "$cache.list"
grep -q "$(basename "$ours") .*(this checkout's)" "$cache.list" || fail "cache does not mark this checkout's folder"
rm -f "$cache.list"

# A build of the busy tree holds its lock for the whole prune.
exec 9>"$cache/.pocl-000000000000busy.lock"
flock 9
"$src/memlayer" cache prune 14
exec 9>&-

[ -d "$ours" ] || fail "prune removed this checkout's folder"
[ -d "$cache/pocl-7.1-00000000000recent" ] || fail "prune removed a folder used today"
[ -d "$cache/pocl-7.1-000000000000busy" ] || fail "prune removed a folder whose lock a build holds"
[ ! -e "$cache/pocl-3.1-0000000000000old" ] || fail "prune kept a folder no build used for 40 days"
[ ! -e "$cache/pocl-7.1-00000000000old.tmp" ] || fail "prune kept an unpacking left over 40 days ago"
[ ! -e "$cache/.pocl-0000000000000old.lock" ] || fail "prune kept the lock file of a folder it removed"
echo "prune removed what it should and kept the rest"
