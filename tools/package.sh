#!/usr/bin/env bash
# Builds the Debian package knap_<version>_amd64.deb from this checkout
# (debian/, debhelper compat 13) and checks it with lintian. Builds only the
# installed programs (knapd, knap, knap-mkimage, knap-logdrain). Run on Debian 12
# with tools/packages/package.test installed (tools/setup.sh --test).
#
#   tools/package.sh [--build-dir DIR] [--version V] [--out DIR] [--no-lintian]
#
#   --build-dir DIR  reuse a meson build dir (tools/test.sh's build/); default:
#                    build-package/, a release build with Debian's hardening flags
#   --version V      package version instead of debian/changelog's (the package
#                    test builds an older version to upgrade from)
#   --out DIR        where the .deb goes (default out/)
# The last line printed is the path of the .deb.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=""
VERSION=""
OUT=$ROOT/out
LINTIAN=1
while (($#)); do
  case "$1" in
    --build-dir) BUILD=$(realpath "$2"); shift 2 ;;
    --version) VERSION=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --no-lintian) LINTIAN=0; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    *) echo "package.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
for tool in dpkg-buildpackage dh lintian; do
  command -v "$tool" >/dev/null || { echo "package.sh: $tool is missing; run tools/setup.sh --test" >&2; exit 1; }
done

export CCACHE_BASEDIR=$ROOT CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
if [[ -z "$BUILD" ]]; then
  BUILD=$ROOT/build-package
  if [[ ! -f "$BUILD/build.ninja" ]]; then
    CXXFLAGS="$(dpkg-buildflags --get CPPFLAGS) $(dpkg-buildflags --get CXXFLAGS)" \
      LDFLAGS="$(dpkg-buildflags --get LDFLAGS)" \
      meson setup "$BUILD" --buildtype=release >/dev/null
  fi
fi
[[ -f "$BUILD/build.ninja" ]] || { echo "package.sh: $BUILD is not a meson build dir" >&2; exit 1; }
ninja -C "$BUILD" -j"${KNAP_JOBS:-2}" daemon/knapd tools/knap tools/mkimage/knap-mkimage runtime/logdrain/knap-logdrain

[[ -n "$VERSION" ]] || VERSION=$(dpkg-parsechangelog -l debian/changelog -S Version)
[[ "$VERSION" =~ ^[0-9][A-Za-z0-9.+~]*$ ]] || { echo "package.sh: bad version \"$VERSION\"" >&2; exit 2; }

# dpkg-buildpackage works in a staging copy of debian/ and writes next to it,
# so the checkout stays clean.
stage=$(mktemp -d /tmp/knap-package.XXXXXX)
trap 'rm -rf "$stage"' EXIT
src=$stage/knap-$VERSION
mkdir -p "$src"
cp -r debian "$src/"
if [[ "$VERSION" != "$(dpkg-parsechangelog -l debian/changelog -S Version)" ]]; then
  { printf 'knap (%s) unstable; urgency=medium\n\n  * Built by tools/package.sh --version %s.\n\n -- %s  %s\n\n' \
      "$VERSION" "$VERSION" "$(dpkg-parsechangelog -l debian/changelog -S Maintainer)" "$(date -R)"
    cat debian/changelog; } >"$src/debian/changelog"
fi
(cd "$src" && KNAP_BUILD_DIR=$BUILD KNAP_SOURCE_DIR=$ROOT dpkg-buildpackage -b -uc -us >"$stage/build.log" 2>&1) || {
  tail -40 "$stage/build.log" >&2
  echo "package.sh: dpkg-buildpackage failed" >&2
  exit 1
}
mkdir -p "$OUT"
deb=$OUT/knap_${VERSION}_amd64.deb
cp "$stage/knap_${VERSION}_amd64.deb" "$deb"

if ((LINTIAN)); then
  # Errors fail the build; warnings are listed (docs/packaging.md explains each).
  lintian --fail-on error "$deb" || {
    echo "package.sh: lintian reports errors" >&2
    exit 1
  }
fi
echo "$deb"
