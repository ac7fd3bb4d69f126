#!/bin/bash
# Checks C++ files against the repository's .clang-format (issue 15).
#
#   tools/check_format.sh              the files listed in tools/format-clean.txt
#                                      (they must stay formatted); exit 1 naming each
#                                      file that differs
#   tools/check_format.sh --all        every tracked *.cc / *.h: how many differ
#                                      (exit 1 when any does)
#   tools/check_format.sh --fix [...]  formats the listed (or, with --all, every)
#                                      file in place instead of checking
#   tools/check_format.sh --self-test  proves the check fails on a misformatted
#                                      listed file, a listed file that is missing,
#                                      and passes on formatted ones
#   --root DIR / --list FILE           another tree / clean list (the self-test uses them)
#
# Uses Debian's clang-format (tools/packages/format.test). The clean list
# holds paths relative to the root, one a line; '#' starts a comment. A file
# joins it once it is formatted (--fix); when every file is, --all is the check.
# Exit 77 (meson: skipped, not passed) when clang-format is not installed.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
list=""
all=0
fix=0
self_test=0
while [ $# -gt 0 ]; do
  case "$1" in
    --all) all=1 ;;
    --fix) fix=1 ;;
    --self-test) self_test=1 ;;
    --root) root="$(cd "$2" && pwd)"; shift ;;
    --list) list="$2"; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "check_format.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$list" ] || list="$root/tools/format-clean.txt"

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
  printf 'int   f( int x ){return x+1;}\n' >"$tmp/a/bad.cc"
  printf '# formatted files\na/good.cc\n' >"$tmp/clean.txt"
  "$0" --root "$tmp" --list "$tmp/clean.txt" >"$tmp/out" 2>&1 || {
    echo "self-test FAILED: a formatted listed file was refused:"; cat "$tmp/out"; exit 1; }
  printf 'a/bad.cc\n' >>"$tmp/clean.txt"
  rc=0; "$0" --root "$tmp" --list "$tmp/clean.txt" >"$tmp/out" 2>&1 || rc=$?
  if [ "$rc" != 1 ] || ! grep -q '^a/bad.cc' "$tmp/out" || grep -q '^a/good.cc' "$tmp/out"; then
    echo "self-test FAILED: a misformatted listed file must fail the check by name (exit $rc):"; cat "$tmp/out"; exit 1
  fi
  printf 'a/bad.cc\n' >"$tmp/clean.txt"
  "$0" --root "$tmp" --list "$tmp/clean.txt" --fix >/dev/null
  "$0" --root "$tmp" --list "$tmp/clean.txt" >"$tmp/out" 2>&1 || {
    echo "self-test FAILED: --fix did not format the file:"; cat "$tmp/out"; exit 1; }
  printf 'a/missing.cc\n' >"$tmp/clean.txt"
  rc=0; "$0" --root "$tmp" --list "$tmp/clean.txt" >"$tmp/out" 2>&1 || rc=$?
  if [ "$rc" != 1 ] || ! grep -q 'a/missing.cc' "$tmp/out"; then
    echo "self-test FAILED: a listed file that does not exist must fail the check (exit $rc):"; cat "$tmp/out"; exit 1
  fi
  echo "self-test ok: formatted files pass; a misformatted or missing listed file fails by name; --fix formats"
  exit 0
fi

cd "$root"
files=()
if [ "$all" = 1 ]; then
  if git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    mapfile -t files < <(git -C "$root" ls-files '*.cc' '*.h')
  else
    mapfile -t files < <(find . -path ./build -prune -o -type f \( -name '*.cc' -o -name '*.h' \) -print | sed 's|^\./||' | sort)
  fi
else
  [ -f "$list" ] || { echo "check_format.sh: no clean list $list" >&2; exit 2; }
  mapfile -t files < <(sed 's/#.*//; s/[[:space:]]*$//; /^$/d' "$list")
fi

if [ "$fix" = 1 ]; then
  for f in "${files[@]}"; do "$CLANG_FORMAT" --style=file -i "$f"; done
  echo "formatted ${#files[@]} file(s) with $("$CLANG_FORMAT" --version | head -1)"
  exit 0
fi

bad=0
for f in "${files[@]}"; do
  if [ ! -f "$f" ]; then
    echo "$f: listed in $(basename "$list") but missing"
    bad=$((bad + 1))
    continue
  fi
  if ! "$CLANG_FORMAT" --style=file "$f" | cmp -s - "$f"; then
    echo "$f: differs from .clang-format (tools/check_format.sh --fix, or clang-format -i $f)"
    bad=$((bad + 1))
  fi
done
if [ "$bad" -gt 0 ]; then
  echo "$bad of ${#files[@]} file(s) differ from .clang-format"
  exit 1
fi
echo "${#files[@]} file(s) match .clang-format"
