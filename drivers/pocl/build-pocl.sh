#!/usr/bin/env bash
# Builds PoCL with the memlayer device driver in its tree, in a cache outside
# the checkout, and prints the build folder.
#
#   build-pocl.sh [--pocl=3.1|--pocl=7.1] [--print-dir]
#
# --pocl=3.1 (the default): Debian's pocl-source, with the memlayer driver and
# memlayer's migration engine in PoCL's core (patches/pocl-3.1-memlayer.patch), and one
# patch file per PoCL bug it fixes (the other patches/pocl-3.1-*.patch).
# --pocl=7.1: PoCL's v7.1 release tarball (POCL71_TARBALL), with the memlayer
# driver and memlayer's migration engine in PoCL's core behind a narrow hook
# (patches/pocl-7.1-memlayer-engine.patch), and one patch file per PoCL bug
# it fixes (the other patches/pocl-7.1-*.patch).
#
# The cache folder is keyed by the hash of what shapes the PoCL tree and its
# configuration: the tarball, our patch, the configure flags. A folder with that key
# is unpacked, patched and configured once (about 3 min) and built once
# (about 5 min on 2 cores for 3.1, about 10 for 7.1). memlayer's libraries
# are built and installed into the folder's memlayer/ prefix, where PoCL's
# build finds them (find_package(memlayer)); the driver sources
# (drivers/pocl/src) are synced into lib/CL/devices/memlayer/ by content, the
# engine's bridge (drivers/pocl/core) into lib/CL/memlayer-core/, and a stamp
# holding the hash of all of them skips the build when nothing changed; when something did, make
# rebuilds only what changed (seconds). So a clean clone of an unchanged
# commit builds nothing, and a fresh machine builds everything.
#
# Old folders stay until removed: `./memlayer cache` lists them, `./memlayer
# cache prune` removes those no build used lately (pocl-cache.sh).
#
# Environment: MEMLAYER_CACHE (default ~/.cache/memlayer), JOBS (default 2),
# POCL_TARBALL (3.1; default /usr/src/pocl.tar.xz), POCL71_TARBALL (7.1; no
# default: PoCL's v7.1 release tarball, pocl-7.1.tar.xz), POCL71_LLVM_CONFIG
# (7.1; default /usr/bin/llvm-config-19).
set -euo pipefail

here=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
root=$(cd "$here/../.." && pwd)
cache=${MEMLAYER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/memlayer}
jobs=${JOBS:-2}

version=3.1
print_dir=
for arg in "$@"; do
  case $arg in
    --print-dir) print_dir=1 ;;
    --pocl=3.1 | --pocl=7.1) version=${arg#--pocl=} ;;
    *) echo "build-pocl: unknown argument '$arg' (use: build-pocl.sh [--pocl=3.1|--pocl=7.1] [--print-dir])" >&2; exit 2 ;;
  esac
done

if [ "$version" = 3.1 ]; then
  tarball=${POCL_TARBALL:-/usr/src/pocl.tar.xz}
  # pocl-3.1-memlayer.patch: the driver's registration and the engine's
  # hook; each other pocl-3.1-*.patch fixes one PoCL bug, named in its file name.
  patches=("$here"/patches/pocl-3.1-*.patch)

  [ -r "$tarball" ] || { echo "build-pocl: $tarball not found (apt-get install pocl-source)" >&2; exit 1; }

  # PoCL's configuration; part of the cache key.
  pocl_flags=(
    -DCMAKE_BUILD_TYPE=RelWithDebInfo
    -DWITH_LLVM_CONFIG=/usr/bin/llvm-config-15
    -DENABLE_ICD=ON -DENABLE_LOADABLE_DRIVERS=ON
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON
    -DENABLE_MEMLAYER_DEVICE=ON
    -DENABLE_EXAMPLES=OFF
  )
  # LLVM 15 names only the CPUs it knows; on a newer one (AMD family 26, Zen 5)
  # `llc --version` says "Host CPU: (unknown)" and PoCL's configure stops. Then
  # the kernels target the x86-64 feature level the CPU's flags reach, which
  # LLVM 15 knows by name. A recognised CPU keeps PoCL's own detection (and
  # the cache key it always had).
  host_cpu=$(llc-15 --version 2>/dev/null | sed -n 's/^ *Host CPU: *//p')
  if [ "$host_cpu" = "(unknown)" ] || [ "$host_cpu" = "generic" ]; then
    has_flags() {  # every named flag is in /proc/cpuinfo's first flags line
      local flags f
      flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
      for f in "$@"; do [[ $flags == *" $f "* ]] || return 1; done
    }
    if has_flags avx512f avx512bw avx512cd avx512dq avx512vl avx2 fma bmi2; then level=x86-64-v4
    elif has_flags avx2 fma bmi1 bmi2 movbe f16c; then level=x86-64-v3
    elif has_flags sse4_2 ssse3 popcnt cx16; then level=x86-64-v2
    else level=x86-64
    fi
    cpu_note="LLVM 15 does not know this CPU ($(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2 | xargs)); PoCL's kernels target $level"
    pocl_flags+=(-DLLC_HOST_CPU=$level)
  fi
  key=$( (cat "$tarball" "${patches[@]}"; echo "${pocl_flags[*]}") | sha256sum | cut -c1-16)
  dir=$cache/pocl-3.1-$key
  top=pocl  # the tarball's top folder
  with_core=1  # memlayer's migration engine goes into PoCL's core

else
  # PoCL 7.1: the user's copy of the v7.1 release tarball; LLVM 19.
  tarball=${POCL71_TARBALL:-}
  [ -n "$tarball" ] || { echo "build-pocl: POCL71_TARBALL is not set (download pocl-7.1.tar.xz from https://github.com/pocl/pocl/releases/tag/v7.1 and set POCL71_TARBALL to its path)" >&2; exit 1; }
  [ -r "$tarball" ] || { echo "build-pocl: POCL71_TARBALL=$tarball not found (download pocl-7.1.tar.xz from https://github.com/pocl/pocl/releases/tag/v7.1)" >&2; exit 1; }
  # PoCL 7.1's top CMakeLists.txt says its version.
  top_cmake=$(tar -xJOf "$tarball" pocl-7.1/CMakeLists.txt 2>/dev/null || true)
  if ! grep -q '^set(MAJOR_VERSION 7)$' <<<"$top_cmake" || ! grep -q '^set(MINOR_VERSION 1)$' <<<"$top_cmake"; then
    echo "build-pocl: POCL71_TARBALL=$tarball is not a PoCL 7.1 tarball (no pocl-7.1/CMakeLists.txt of version 7.1; download pocl-7.1.tar.xz from https://github.com/pocl/pocl/releases/tag/v7.1)" >&2
    exit 1
  fi
  llvm_config=${POCL71_LLVM_CONFIG:-/usr/bin/llvm-config-19}
  [ -x "$llvm_config" ] || { echo "build-pocl: $llvm_config not found: PoCL 7.1 needs LLVM 19 (./memlayer deps-pocl71, or apt-get install llvm-19-dev clang-19 libclang-19-dev libclang-cpp19-dev libzstd-dev libedit-dev)" >&2; exit 1; }
  # The fixes first, then the driver's registration, then the engine's hook
  # (made against a tree with the fixes applied), then the remote driver's
  # opt-in to the engine's byte ranges.
  patches=()
  for p in "$here"/patches/pocl-7.1-*.patch; do
    case $p in *-memlayer-*) ;; *) patches+=("$p") ;; esac
  done
  patches+=("$here"/patches/pocl-7.1-memlayer-driver.patch "$here"/patches/pocl-7.1-memlayer-engine.patch
            "$here"/patches/pocl-7.1-memlayer-remote.patch)
  pocl_flags=(
    -DCMAKE_BUILD_TYPE=RelWithDebInfo
    -DWITH_LLVM_CONFIG="$llvm_config"
    -DENABLE_ICD=ON -DENABLE_LOADABLE_DRIVERS=ON
    -DCMAKE_POSITION_INDEPENDENT_CODE=ON
    -DENABLE_MEMLAYER_DEVICE=ON
    -DENABLE_MEMLAYER_ENGINE=ON
    -DENABLE_EXAMPLES=OFF
    # PoCL-R: the remote client driver in libpocl and the pocld server, which
    # serves the devices its POCL_DEVICES names (memlayer's; doc/scale-out.md)
    -DENABLE_REMOTE_CLIENT=ON -DENABLE_REMOTE_SERVER=ON
  )
  key=$( (cat "$tarball" "${patches[@]}"; echo "${pocl_flags[*]}") | sha256sum | cut -c1-16)
  dir=$cache/pocl-7.1-$key
  top=pocl-7.1
  with_core=1
fi
if [ -n "$print_dir" ]; then
  echo "$dir/build"
  exit 0
fi

mkdir -p "$cache"
exec 9>"$cache/.pocl-$key.lock"
flock 9  # one build of a tree at a time (parallel CI jobs, two build folders)

if [ ! -d "$dir/src" ]; then
  echo "build-pocl: unpacking and patching PoCL into $dir"
  rm -rf "$dir.tmp"
  mkdir -p "$dir.tmp"
  tar -xJf "$tarball" -C "$dir.tmp"
  mv "$dir.tmp/$top" "$dir.tmp/src"
  for p in "${patches[@]}"; do patch -s -p1 -d "$dir.tmp/src" < "$p"; done
  rm -rf "$dir"
  mv "$dir.tmp" "$dir"
fi
# When a build last used this folder: ./memlayer cache (pocl-cache.sh)
# prunes folders no build used for a while.
touch "$dir/last-used"

# Sync a file into the tree only when its content differs, so make sees
# unchanged files as unchanged.
dest=$dir/src/lib/CL/devices/memlayer
sync_file() {  # source, destination
  if ! cmp -s "$1" "$2"; then
    mkdir -p "$(dirname "$2")"
    cp "$1" "$2"
  fi
}
sync_tree() {  # source folder, destination folder
  local f
  (cd "$1" && find . -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.c' \) | sort) |
    while read -r f; do sync_file "$1/$f" "$2/$f"; done
}
# memlayer's libraries (bufalloc, devmem, migration, engine), built and
# installed into the cache folder's memlayer/ prefix, where PoCL's build finds
# them with find_package(memlayer) (pocl-tree.cmake, core-tree.cmake). Hidden
# symbols: linked into libpocl and the driver, they export nothing. Make and
# install rewrite only what changed, so PoCL relinks only then.
prefix=$dir/memlayer
# A build folder belongs to one checkout: another one's (a CI clone) starts
# it afresh.
if ! grep -qxF "CMAKE_HOME_DIRECTORY:INTERNAL=$root" "$dir/memlayer-build/CMakeCache.txt" 2>/dev/null; then
  rm -rf "$dir/memlayer-build"
  cmake -S "$root" -B "$dir/memlayer-build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" \
    -DCMAKE_INSTALL_LIBDIR=lib -DMEMLAYER_BUILD_TESTS=OFF -DMEMLAYER_BUILD_BENCH=OFF -DMEMLAYER_BUILD_TOOLS=OFF \
    -DMEMLAYER_BUILD_CUDA=OFF -DCMAKE_CXX_VISIBILITY_PRESET=hidden -DCMAKE_VISIBILITY_INLINES_HIDDEN=ON \
    > "$dir/memlayer-configure.log" 2>&1 || { tail -30 "$dir/memlayer-configure.log" >&2; exit 1; }
fi
if ! { cmake --build "$dir/memlayer-build" -j "$jobs" && cmake --install "$dir/memlayer-build"; } > "$dir/memlayer-build.log" 2>&1; then
  grep -E "error|Error" "$dir/memlayer-build.log" | head -40 >&2
  exit 1
fi

# The driver's own sources, the PoCL device driver, into PoCL's tree.
sync_file "$here/pocl-tree.cmake" "$dest/CMakeLists.txt"
sync_tree "$here/src" "$dest"
stamped=(devices/memlayer)
if [ -n "$with_core" ]; then
  # The engine's bridge goes into PoCL's core library (libpocl) for both
  # versions; core-tree.cmake tells the bridge PoCL's version and links the
  # engine. PoCL 3.1's C hook (pocl_memlayer_migration.h) names the
  # migration C API's types: those two C headers go beside it.
  core=$dir/src/lib/CL/memlayer-core
  sync_file "$here/core-tree.cmake" "$core/CMakeLists.txt"
  sync_tree "$here/core" "$core"
  if [ "$version" = 3.1 ]; then
    sync_file "$root/bufalloc/include/memlayer/status.h" "$core/memlayer-src/include/memlayer/status.h"
    sync_file "$root/migration/include/memlayer/migration.h" "$core/memlayer-src/include/memlayer/migration.h"
  fi
  stamped+=(memlayer-core)
fi

stamp=$( (cd "$dir/src/lib/CL" && find "${stamped[@]}" -type f | sort | xargs cat; find "$prefix" -type f | sort | xargs cat) |
  sha256sum | cut -c1-16)
if [ -f "$dir/build/.memlayer-stamp" ] && [ "$(cat "$dir/build/.memlayer-stamp")" = "$stamp" ]; then
  echo "$dir/build"
  exit 0
fi

if [ ! -f "$dir/build/CMakeCache.txt" ]; then
  [ -z "${cpu_note:-}" ] || echo "build-pocl: $cpu_note"
  echo "build-pocl: configuring PoCL (a few minutes, once per machine)"
  # From inside the cache: PoCL's LLVM checks compile into the working
  # directory (compile_test_* files).
  (cd "$dir" && cmake -S "$dir/src" -B "$dir/build" "${pocl_flags[@]}") > "$dir/configure.log" 2>&1 ||
    { tail -40 "$dir/configure.log" >&2; exit 1; }
fi
echo "build-pocl: building PoCL $version and the memlayer driver"
if ! cmake --build "$dir/build" -j "$jobs" > "$dir/build.log" 2>&1; then
  grep -E "error|Error" "$dir/build.log" | head -40 >&2
  tail -20 "$dir/build.log" >&2
  exit 1
fi
echo "$stamp" > "$dir/build/.memlayer-stamp"
echo "$dir/build"
