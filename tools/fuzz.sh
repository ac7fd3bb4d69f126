#!/bin/sh
# Builds every libFuzzer target (executables named fuzz_*, -Dfuzz=true under
# clang with AddressSanitizer + UndefinedBehaviorSanitizer) in build-fuzz/ and
# runs each for a bounded time over its corpus.
#
#   tools/fuzz.sh [SECONDS_PER_TARGET]      default 60
#   FUZZ_JOBS=2 tools/fuzz.sh 600           parallel workers per target
#   FUZZ_TARGETS="fuzz_patch fuzz_admission" tools/fuzz.sh 600   only these
#   FUZZ_FAST=1 tools/fuzz.sh 600           coverage-guided, no ASan/UBSan, in
#                                           build-fuzz-fast/ (several times the
#                                           executions a second; crashes, hangs and
#                                           -rss_limit_mb still count, leaks and
#                                           silent memory errors do not)
#
# Seed inputs live in tests/fuzz/corpus/<target without fuzz_>/ (the router's
# in its own folder, see tests/fuzz/meson.build); inputs a run discovers go to
# build-fuzz/corpus/<target>/ and are not committed. An input that crashes,
# leaks or runs over 1 s (-timeout=1) fails the run and is written to
# build-fuzz/artifacts/. The summary line per target gives the executions.
set -eu
here=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-60}
jobs=${FUZZ_JOBS:-1}
if [ -n "${FUZZ_FAST:-}" ]; then
  build="$here/build-fuzz-fast"
  sanitize=none
else
  build="$here/build-fuzz"
  sanitize=address,undefined
fi
export CCACHE_BASEDIR="$here" CCACHE_NOHASHDIR=1
if [ ! -f "$build/build.ninja" ]; then
  CC=clang CXX=clang++ meson setup "$build" "$here" --buildtype=debugoptimized -Dfuzz=true \
    -Dcontainerd=disabled -Db_sanitize=$sanitize -Db_lundef=false >/dev/null
fi
# ninja names an executable by its path under the build dir (tests/fuzz/fuzz_patch).
paths=$(meson introspect --targets "$build" | python3 -c '
import json, os, sys
b = os.path.realpath(sys.argv[1])
print(" ".join(sorted(os.path.relpath(t["filename"][0], b) for t in json.load(sys.stdin)
                      if t["name"].startswith("fuzz_") and t["type"] == "executable" and not t["name"].endswith("_test"))))' "$build")
if [ -n "${FUZZ_TARGETS:-}" ]; then
  paths=$(for p in $paths; do for t in $FUZZ_TARGETS; do if [ "$(basename "$p")" = "$t" ]; then echo "$p"; fi; done; done)
fi
[ -n "$paths" ] || { echo "fuzz.sh: no fuzz_* targets${FUZZ_TARGETS:+ named $FUZZ_TARGETS}" >&2; exit 1; }
nice -n 5 ninja -C "$build" -j2 $paths >/dev/null
targets=$(for p in $paths; do basename "$p"; done)
mkdir -p "$build/artifacts"
total=0
status=0
for t in $targets; do
  bin=$(find "$build" -name "$t" -type f -perm -u+x | head -1)
  seeds="$here/tests/fuzz/corpus/${t#fuzz_}"
  [ -d "$seeds" ] || seeds=$(find "$here" -path "$here/build*" -prune -o -type d -path "*corpus/${t#fuzz_}" -print | head -1)
  work="$build/corpus/$t"
  mkdir -p "$work"
  log="$build/$t.log"
  parallel=""
  [ "$jobs" -gt 1 ] && parallel="-jobs=$jobs -workers=$jobs"
  # shellcheck disable=SC2086 # $parallel is two flags or none
  if (cd "$build" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
     "$bin" -max_total_time="$secs" -timeout=1 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 \
       $parallel -artifact_prefix="$build/artifacts/$t-" "$work" ${seeds:+"$seeds"} >"$log" 2>&1); then
    result=ok
  else
    result=FAILED
    status=1
  fi
  execs=$(grep -h 'stat::number_of_executed_units' "$log" "$build"/fuzz-*.log 2>/dev/null | awk '{s+=$2} END {print s+0}')
  rm -f "$build"/fuzz-*.log
  total=$((total + execs))
  echo "$t: $result, $execs executions in ${secs}s (log $log)"
done
echo "total: $total executions; crashes/timeouts: $(ls "$build/artifacts" | wc -l)"
exit $status
