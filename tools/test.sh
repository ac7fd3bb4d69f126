#!/usr/bin/env bash
# Builds knap and runs every test: unit tests (meson/GoogleTest) and the
# end-to-end suites (pytest: real knapd, kubectl, containerd, runc, CNI), then
# the package test (tests/package/run.sh: the .deb on a booted Debian 12 root).
# Installs what it needs first (tools/setup.sh --test). Run as root.
#
#   tools/test.sh              everything
#   tools/test.sh --unit       unit tests only
#   KNAP_E2E_ARGS="-k kubectl" tools/test.sh   pass arguments to pytest
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${KNAP_BUILD_DIR:-$ROOT/build}

tools/setup.sh --test || exit 1

# meson uses ccache when it is installed; make its cache hit across clones in
# different folders (CI builds a fresh clone every run).
export CCACHE_BASEDIR=$ROOT CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}

if [[ ! -f "$BUILD/build.ninja" ]]; then
  meson setup "$BUILD" --buildtype=debugoptimized >/dev/null || { echo "meson setup failed"; exit 1; }
fi
ninja -C "$BUILD" || { echo "build failed"; exit 1; }

unit_rc=0
meson test -C "$BUILD" --print-errorlogs --num-processes 2 || unit_rc=$?

e2e_rc=0
if [[ "${1:-}" != "--unit" ]]; then
  KNAP_BUILD_DIR="$BUILD" /usr/bin/python3 -m pytest -q -p no:cacheprovider ${KNAP_E2E_ARGS:-} tests/e2e || e2e_rc=$?
fi

package_rc=0
if [[ "${1:-}" != "--unit" ]]; then
  tests/package/run.sh "$BUILD" || package_rc=$?
  if ((package_rc == 77)); then
    echo "package test SKIPPED: systemd-nspawn cannot boot a Debian root on this machine (see above)"
    package_rc=0
  fi
fi

if ((unit_rc != 0 || e2e_rc != 0 || package_rc != 0)); then
  echo "FAILED: unit tests rc=$unit_rc, end-to-end tests rc=$e2e_rc, package test rc=$package_rc"
  exit 1
fi
echo "all tests passed"
