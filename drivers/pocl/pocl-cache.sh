#!/usr/bin/env bash
# The PoCL build caches of build-pocl.sh: one folder per PoCL tree and
# configuration (pocl-VERSION-KEY, 0.3-0.6 GB each), which build-pocl.sh
# never removes. A new patch or flag makes a new key, so older folders pile up.
#
#   pocl-cache.sh [list]        each folder: its size, when a build last used
#                               it, and whether this checkout's build uses it
#   pocl-cache.sh prune [DAYS]  removes each folder this checkout does not use
#                               and that no build used for DAYS days
#                               (default 14; 0: every folder not in use here)
#
# "Used by this checkout": the folder build-pocl.sh --print-dir names for
# PoCL 3.1, and for PoCL 7.1 when POCL71_TARBALL is set (without it no 7.1
# folder counts as in use, and only DAYS protects them). Other checkouts on
# the machine (another branch, a CI clone) share the cache and may use other
# folders: DAYS keeps what they built recently. A folder whose build is
# running (its lock is held) is never removed.
#
# Environment: MEMLAYER_CACHE (default ~/.cache/memlayer), as build-pocl.sh.
set -euo pipefail

here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
cache=${MEMLAYER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/memlayer}

die() { echo "pocl-cache: $*" >&2; exit 1; }

# The folders this checkout's build-pocl.sh uses, one a line.
in_use() {
  local d
  if d=$("$here/build-pocl.sh" --pocl=3.1 --print-dir 2>/dev/null); then dirname "$d"; fi
  if [ -n "${POCL71_TARBALL:-}" ] && d=$("$here/build-pocl.sh" --pocl=7.1 --print-dir 2>/dev/null); then
    dirname "$d"
  fi
}

# When a build last used a folder (seconds since the epoch): build-pocl.sh
# touches last-used on every run; older folders have only their stamp.
last_used() {  # folder
  local f
  for f in "$1/last-used" "$1/build/.memlayer-stamp" "$1"; do
    [ -e "$f" ] && { stat -c %Y "$f"; return; }
  done
}

folders() {  # every cache folder, one a line
  [ -d "$cache" ] || return 0
  find "$cache" -mindepth 1 -maxdepth 1 -type d -name 'pocl-*' | sort
}

list() {
  local used now d age size mark
  used=$(in_use)
  now=$(date +%s)
  echo "PoCL build caches in $cache:"
  while read -r d; do
    [ -n "$d" ] || continue
    age=$(( (now - $(last_used "$d")) / 86400 ))
    size=$(du -sh "$d" 2>/dev/null | cut -f1)
    mark=""
    grep -qxF "$d" <<<"$used" && mark="  (this checkout's)"
    printf '  %-32s %6s  last used %3d day(s) ago%s\n' "$(basename "$d")" "$size" "$age" "$mark"
  done < <(folders)
}

prune() {  # days
  local days=$1 used now d key lock removed=0
  [[ $days =~ ^[0-9]+$ ]] || die "prune $days: give a number of days (0 or more)"
  used=$(in_use)
  now=$(date +%s)
  while read -r d; do
    [ -n "$d" ] || continue
    if grep -qxF "$d" <<<"$used"; then continue; fi
    if [ $(( (now - $(last_used "$d")) / 86400 )) -lt "$days" ]; then continue; fi
    key=$(basename "$d"); key=${key##*-}; key=${key%.tmp}
    lock=$cache/.pocl-$key.lock
    # Held while build-pocl.sh builds that tree: leave it to the build.
    if ! (exec 9>"$lock"; flock -n 9 && rm -rf "$d"); then
      echo "pocl-cache: $(basename "$d") is being built; left alone" >&2
      continue
    fi
    compgen -G "$cache/pocl-*-$key*" >/dev/null || rm -f "$lock"
    echo "pocl-cache: removed $(basename "$d")"
    removed=$((removed + 1))
  done < <(folders)
  echo "pocl-cache: $removed folder(s) removed"
}

cmd=${1:-list}
case $cmd in
  list) [ $# -le 1 ] || die "list takes no arguments"; list ;;
  prune) [ $# -le 2 ] || die "prune takes one argument: DAYS"; prune "${2:-14}" ;;
  *) die "unknown command '$cmd' (use: pocl-cache.sh [list] | pocl-cache.sh prune [DAYS])" ;;
esac
