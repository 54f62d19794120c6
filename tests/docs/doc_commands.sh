#!/usr/bin/env bash
# The commands README.md and doc/*.md give, checked so that a documented
# command that stops working fails CI (doc/testing.md, "The docs' commands").
#
#   doc_commands.sh check SOURCE_DIR
#   doc_commands.sh run SOURCE_DIR BUILD_DIR
#
# check: every ```sh block parses (bash -n); every `./memlayer WORD` in the
# docs, prose included, names a command `./memlayer help` lists; every
# repository script a doc names exists, is executable and parses; every
# program under build/ a doc names is a target of this tree; every relative
# link leads to a file, and its #anchor to a heading of it; no doc names a
# path outside the repository (../); README.md carries no dates.
#
# run: each ```sh block right below a line `<!-- doc-test: run -->` runs as
# written (bash -euo pipefail), in a fresh copy of the tree (the files git
# tracks, and those it does not ignore), with MEMLAYER_BUILT=BUILD_DIR so
# that ./memlayer takes its programs from that build instead of building
# (the memlayer script) and MEMLAYER_CACHE in a scratch folder. Blocks that
# build PoCL, need a GPU or run for minutes are not marked; check covers them.
set -uo pipefail

die() { echo "doc_commands: $*" >&2; exit 2; }
mode=${1:-}
src=${2:-}
[ -n "$src" ] && [ -f "$src/memlayer" ] || die "usage: doc_commands.sh check SOURCE_DIR | run SOURCE_DIR BUILD_DIR"
src=$(cd "$src" && pwd)
docs=("$src/README.md" "$src"/doc/*.md)
work=$(mktemp -d "${TMPDIR:-/tmp}/doc-commands.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# Writes each ```sh block of the docs to $work/blocks/N.sh and lists it in
# $work/blocks/index as "N FILE LINE RUN" (RUN: 1 when marked to run).
extract_blocks() {
  mkdir -p "$work/blocks"
  : >"$work/blocks/index"
  local doc
  for doc in "${docs[@]}"; do
    awk -v doc="${doc#"$src"/}" -v dir="$work/blocks" -v start="$(wc -l <"$work/blocks/index")" '
      BEGIN { n = start }
      /^<!-- doc-test: run -->$/ { marked = NR; next }
      !inside && /^```sh( |$)/ {
        inside = 1; n++; file = dir "/" n ".sh"
        printf "" > file
        print n, doc, NR, (marked == NR - 1 ? 1 : 0) >> (dir "/index")
        next
      }
      inside && /^```$/ { inside = 0; close(file); next }
      inside { print > file }
    ' "$doc"
  done
}

# The program names CMake builds in this tree.
targets() {
  grep -rhoE --include=CMakeLists.txt --include='*.cmake' '(add_executable|memlayer_test)\([A-Za-z0-9_-]+' "$src" |
    sed -E 's/^[a-z_]+\(//' | grep -v '^\$' | sort -u
}

check_block_syntax() {
  local n doc line run
  while read -r n doc line run; do
    bash -n "$work/blocks/$n.sh" 2>"$work/err" || fail "$doc:$line: the sh block does not parse: $(head -1 "$work/err")"
  done <"$work/blocks/index"
}

check_memlayer_commands() {
  local help doc word
  help=$("$src/memlayer" help) || { fail "./memlayer help failed"; return; }
  for doc in "${docs[@]}"; do
    # `./memlayer WORD`, in prose and in blocks alike.
    grep -oE '\./memlayer [a-z][a-z0-9-]*' "$doc" | sort -u | while read -r _ word; do
      grep -qE "\./memlayer $word( |$)" <<<"$help" ||
        echo "${doc#"$src"/}: ./memlayer $word: not a command ./memlayer help lists"
    done
  done >"$work/bad-commands"
  while read -r l; do fail "$l"; done <"$work/bad-commands"
}

check_scripts_and_programs() {
  local doc path name known
  known=$(targets)
  for doc in "${docs[@]}"; do
    # Repository scripts: a path into the tree ending in .sh, .awk or .py.
    grep -oE '(^|[^A-Za-z0-9_./-])(\.ci|bench|bufalloc|cmake|doc|drivers|engine|lib|migration|tests)/[A-Za-z0-9_./-]*\.(sh|awk|py)\b' "$doc" |
      sed -E 's/^[^A-Za-z.]//' | sort -u | while read -r path; do
        if [ ! -f "$src/$path" ]; then echo "${doc#"$src"/}: $path: no such file"
        elif [ "${path##*.}" = sh ] && [ ! -x "$src/$path" ]; then echo "${doc#"$src"/}: $path: not executable"
        elif [ "${path##*.}" = sh ] && ! bash -n "$src/$path" 2>/dev/null; then echo "${doc#"$src"/}: $path: does not parse"
        fi
      done
    # Programs in a build folder: build/<folder>/.../memlayer-* or *_test.
    grep -oE '\bbuild/[A-Za-z0-9_.-]+/[A-Za-z0-9_./-]*(memlayer-[a-z0-9-]+|[a-z0-9_]+_test)\b' "$doc" | sort -u |
      while read -r path; do
        name=${path##*/}
        grep -qxF "$name" <<<"$known" || echo "${doc#"$src"/}: $path: no target $name in this tree"
      done
  done >"$work/bad-paths"
  while read -r l; do fail "$l"; done <"$work/bad-paths"
}

# GitHub's anchor of each heading of a markdown file: lower case, spaces to
# hyphens, other punctuation dropped.
anchors() {
  awk '/^```/ { fence = !fence } !fence && /^#+ / {
         h = $0; sub(/^#+ +/, "", h); h = tolower(h)
         gsub(/[^a-z0-9 _-]/, "", h); gsub(/ /, "-", h); print h }' "$1"
}

check_links() {
  local doc link path anchor target
  for doc in "${docs[@]}"; do
    grep -oE '\]\([^) ]+\)' "$doc" | sed -E 's/^\]\(//; s/\)$//' | sort -u | while read -r link; do
      case $link in http://* | https://* | mailto:*) continue ;; esac
      path=${link%%#*}
      anchor=
      [[ $link == *"#"* ]] && anchor=${link#*#}
      if [ -z "$path" ]; then target=$doc; else target=$(dirname "$doc")/$path; fi
      if [ ! -e "$target" ]; then echo "${doc#"$src"/}: link $link: no such file"; continue; fi
      if [ -n "$anchor" ] && [ -f "$target" ] && ! anchors "$target" | grep -qxF "$anchor"; then
        echo "${doc#"$src"/}: link $link: no heading with that anchor in ${target#"$src"/}"
      fi
    done
  done >"$work/bad-links"
  while read -r l; do fail "$l"; done <"$work/bad-links"
}

check_inside_repository() {
  local doc
  for doc in "${docs[@]}"; do
    grep -nE '\.\./shared|/work/' "$doc" | sed "s|^|${doc#"$src"/}:|" | while read -r l; do
      echo "$l: names a path outside the repository"
    done
  done >"$work/outside"
  grep -nE '\b20[0-9]{2}-[01][0-9]-[0-3][0-9]\b' "$src/README.md" | sed 's|^|README.md:|; s|$|: a date (dated figures and history go in doc/performance.md)|' >>"$work/outside"
  while read -r l; do fail "$l"; done <"$work/outside"
}

# A fresh copy of the tree: what git tracks and does not ignore, or, outside
# a git checkout, everything but build folders.
copy_tree() {
  local to=$1
  mkdir -p "$to"
  if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$src" && git ls-files -co --exclude-standard -z | xargs -0 cp --parents -t "$to" 2>/dev/null)
    # Deleted but still listed files are missing: cp says so, and that is fine.
  else
    (cd "$src" && tar --exclude=./build -cf - .) | (cd "$to" && tar -xf -)
  fi
}

run_blocks() {
  local build=$1 n doc line run ran=0
  [ -d "$build" ] || die "run: $build is not a build folder"
  build=$(cd "$build" && pwd)
  copy_tree "$work/tree"
  while read -r n doc line run; do
    [ "$run" = 1 ] || continue
    echo "== $doc:$line"
    sed 's/^/   /' "$work/blocks/$n.sh"
    if (cd "$work/tree" && env -u POCL71_TARBALL MEMLAYER_BUILT="$build" MEMLAYER_CACHE="$work/cache" \
          bash -euo pipefail "$work/blocks/$n.sh") >"$work/out" 2>&1; then
      tail -3 "$work/out" | sed 's/^/   | /'
    else
      sed 's/^/   | /' "$work/out" | tail -30
      fail "$doc:$line: the block above failed"
    fi
    ran=$((ran + 1))
  done <"$work/blocks/index"
  [ "$ran" -gt 0 ] || fail "no block is marked <!-- doc-test: run -->"
  echo "doc_commands: ran $ran block(s)"
}

extract_blocks
case $mode in
  check)
    echo "doc_commands: $(wc -l <"$work/blocks/index") sh block(s) in ${#docs[@]} doc(s)"
    check_block_syntax
    check_memlayer_commands
    check_scripts_and_programs
    check_links
    check_inside_repository
    ;;
  run) run_blocks "${3:-}" ;;
  *) die "usage: doc_commands.sh check SOURCE_DIR | run SOURCE_DIR BUILD_DIR" ;;
esac
[ "$failures" -eq 0 ] || { echo "doc_commands: $failures problem(s)" >&2; exit 1; }
echo "doc_commands: $mode passed"
