#!/bin/bash
# Checks every tracked C++ file against the repository's .clang-format (issue 15).
#
#   tools/check_format.sh              every tracked *.cc / *.h; exit 1 naming each
#                                      file that differs
#   tools/check_format.sh --fix        formats them in place instead of checking
#   tools/check_format.sh FILE...      only these files (with or without --fix)
#   tools/check_format.sh --self-test  proves the check fails on a misformatted
#                                      file by name, passes on formatted ones, and
#                                      that --fix formats
#   --root DIR                         another tree (the self-test uses it)
#
# Uses Debian's clang-format (tools/packages/format.test). Outside a git
# checkout (an unpacked source tarball) every *.cc / *.h under the root except
# build dirs is checked. Exit 77 (meson: skipped, not passed) when clang-format
# is not installed.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
fix=0
self_test=0
files=()
while [ $# -gt 0 ]; do
  case "$1" in
    --fix) fix=1 ;;
    --self-test) self_test=1 ;;
    --root) root="$(cd "$2" && pwd)"; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "check_format.sh: unknown argument: $1" >&2; exit 2 ;;
    *) files+=("$1") ;;
  esac
  shift
done

CLANG_FORMAT="${CLANG_FORMAT:-clang-format}"
if ! command -v "$CLANG_FORMAT" >/dev/null 2>&1; then
  echo "check_format.sh: $CLANG_FORMAT is not installed (Debian package clang-format, tools/packages/format.test)" >&2
  exit 77
fi

if [ "$self_test" = 1 ]; then
  tmp="$(mktemp -d /tmp/knap-format-XXXXXX)"
  trap 'rm -rf "$tmp"' EXIT
  cp "$root/.clang-format" "$tmp/.clang-format"
  mkdir -p "$tmp/a"
  printf 'int f(int x) {\n  return x + 1;\n}\n' >"$tmp/a/good.cc"
  "$0" --root "$tmp" >"$tmp/out" 2>&1 || {
    echo "self-test FAILED: a formatted file was refused:"; cat "$tmp/out"; exit 1; }
  printf 'int   f( int x ){return x+1;}\n' >"$tmp/a/bad.cc"
  rc=0; "$0" --root "$tmp" >"$tmp/out" 2>&1 || rc=$?
  if [ "$rc" != 1 ] || ! grep -q '^a/bad.cc' "$tmp/out" || grep -q '^a/good.cc' "$tmp/out"; then
    echo "self-test FAILED: a misformatted file must fail the check by name (exit $rc):"; cat "$tmp/out"; exit 1
  fi
  "$0" --root "$tmp" --fix >/dev/null
  "$0" --root "$tmp" >"$tmp/out" 2>&1 || {
    echo "self-test FAILED: --fix did not format the file:"; cat "$tmp/out"; exit 1; }
  echo "self-test ok: formatted files pass; a misformatted file fails by name; --fix formats"
  exit 0
fi

cd "$root"
if [ ${#files[@]} = 0 ]; then
  if git -C "$root" rev-parse --show-toplevel 2>/dev/null | grep -qxF "$root"; then
    mapfile -t files < <(git -C "$root" ls-files '*.cc' '*.h')
  else
    mapfile -t files < <(find . -path './build*' -prune -o -type f \( -name '*.cc' -o -name '*.h' \) -print |
                         sed 's|^\./||' | sort)
  fi
fi

if [ "$fix" = 1 ]; then
  [ ${#files[@]} = 0 ] || "$CLANG_FORMAT" --style=file -i "${files[@]}"
  echo "formatted ${#files[@]} file(s) with $("$CLANG_FORMAT" --version | head -1)"
  exit 0
fi

# One clang-format process for all files (one per file took over 30 s for
# the tree on a busy 2-core machine): --dry-run --Werror names each
# violation as "FILE:LINE:COL: error: ...".
bad=0
present=()
for f in "${files[@]}"; do
  if [ -f "$f" ]; then
    present+=("$f")
  else
    echo "$f: no such file"
    bad=$((bad + 1))
  fi
done
if [ ${#present[@]} -gt 0 ]; then
  report="$("$CLANG_FORMAT" --style=file --dry-run --Werror "${present[@]}" 2>&1)" && rc=0 || rc=$?
  mapfile -t differing < <(printf '%s\n' "$report" |
    sed -n 's/^\(.*\):[0-9][0-9]*:[0-9][0-9]*: error: code should be clang-formatted.*/\1/p' | sort -u)
  if [ "$rc" != 0 ] && [ ${#differing[@]} = 0 ]; then
    echo "check_format.sh: $CLANG_FORMAT failed:"; printf '%s\n' "$report" | head -20; exit 1
  fi
  for f in "${differing[@]}"; do
    echo "$f: differs from .clang-format (tools/check_format.sh --fix, or clang-format -i $f)"
    bad=$((bad + 1))
  done
fi
if [ "$bad" -gt 0 ]; then
  echo "$bad of ${#files[@]} file(s) differ from .clang-format"
  exit 1
fi
echo "${#files[@]} file(s) match .clang-format"
