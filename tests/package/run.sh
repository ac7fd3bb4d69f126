#!/usr/bin/env bash
# The package test: builds knap's .deb twice (the checkout's version and an
# older one), installs it into a fresh Debian 12 root booted with
# systemd-nspawn, and checks, inside, what docs/packaging.md promises:
#   - apt installs the .deb and its dependencies (from the mirror's packages);
#   - postinst enables and starts knapd (Type=notify: active means READY=1),
#     with the socket units when the package has them;
#   - knap and kubectl (the generated kubeconfig) work; a Service applied is Ready;
#   - `systemctl restart knapd` keeps every object (same uid);
#   - journalctl -u knapd has knapd's lines with their levels (PRIORITY), each
#     line at its own level's PRIORITY;
#   - upgrade old .deb -> new .deb restarts knapd and keeps every object;
#   - remove keeps /var/lib/knap (reinstall brings the objects back); purge deletes it.
# knapd runs with --runtime none inside (a drop-in): the root shares the host's
# kernel and cgroup v1 hybrid hierarchy, and its pods would need the host's
# bridge and iptables; pods across restarts are tested on the host (tests/e2e).
#
#   tests/package/run.sh [BUILD_DIR]     (root; BUILD_DIR default build/)
# Exit: 0 passed, 1 failed, 77 skipped because systemd-nspawn cannot boot a
# root here at all (said loudly).
#
# The bookworm root is cached as /var/cache/knap-test/bookworm-<date>-<deps>.tar
# (rebuilt daily or when debian/control's Depends change), with the
# dependencies' .debs downloaded but not installed, so that the test itself needs
# no network (the container has a private network) and still proves that apt
# resolves the dependencies from the package's Depends.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
BUILD=$(realpath "${1:-${KNAP_BUILD_DIR:-$ROOT/build}}")
CACHE=${KNAP_TEST_CACHE:-/var/cache/knap-test}
start=$(date +%s)

fail() { echo "package test: FAIL: $*" >&2; exit 1; }
skip() {
  echo "################################################################" >&2
  echo "package test: SKIPPED: $*" >&2
  echo "################################################################" >&2
  exit 77
}
step() { echo "package test: [$(($(date +%s) - start))s] $*"; }

((EUID == 0)) || fail "must run as root"
for tool in mmdebstrap systemd-nspawn nsenter dpkg-buildpackage lintian; do
  command -v "$tool" >/dev/null || fail "$tool is missing; run tools/setup.sh --test (tools/packages/package.test)"
done

work=$(mktemp -d /var/tmp/knap-package-test.XXXXXX)
nspawn_pid=""
cleanup() {
  if [[ -n "$nspawn_pid" ]] && kill -0 "$nspawn_pid" 2>/dev/null; then
    kill -TERM "$nspawn_pid" 2>/dev/null  # nspawn powers the container off
    for _ in $(seq 1 300); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$nspawn_pid" 2>/dev/null
    wait "$nspawn_pid" 2>/dev/null
  fi
  if [[ -z "${KNAP_KEEP_TEST_ROOT:-}" ]]; then rm -rf "$work"; else echo "package test: kept $work"; fi
}
trap cleanup EXIT

# --- 1. the packages ------------------------------------------------------------
version=$(dpkg-parsechangelog -l debian/changelog -S Version)
old_version="${version}~old1"
step "building knap $version and $old_version from $BUILD"
tools/package.sh --build-dir "$BUILD" --out "$work/debs" >"$work/package.log" 2>&1 ||
  { cat "$work/package.log"; fail "tools/package.sh failed"; }
grep -E '^[EWI]: ' "$work/package.log" | sed 's/^/package test: lintian: /'
tools/package.sh --build-dir "$BUILD" --out "$work/debs" --version "$old_version" --no-lintian \
  >"$work/package-old.log" 2>&1 || { cat "$work/package-old.log"; fail "tools/package.sh --version failed"; }
new_deb=$work/debs/knap_${version}_amd64.deb
old_deb=$work/debs/knap_${old_version}_amd64.deb
[[ -f "$new_deb" && -f "$old_deb" ]] || fail "package.sh did not write $new_deb and $old_deb"
step "packages built: $(du -h "$new_deb" | cut -f1) each"

# --- 2. the root ------------------------------------------------------------------
deps=$(dpkg-deb -f "$new_deb" Depends)
key="$(date +%Y%m%d)-$(echo "$deps" | sha256sum | cut -c1-12)"
tarball=$CACHE/bookworm-$key.tar
mkdir -p "$CACHE"
if [[ ! -f "$tarball" ]]; then
  step "creating the bookworm root $tarball"
  partial=$CACHE/.partial-$$.tar  # the name ends in .tar: mmdebstrap picks the format from it
  mapfile -t mirrors < <(python3 tests/package/mirrors.py) || fail "no Debian mirror in this machine's apt sources"
  # Download (not install) what `apt install knap.deb` will need: the .deb's dependencies.
  # shellcheck disable=SC2016
  mmdebstrap --variant=apt --include=systemd,systemd-sysv,dbus --skip=cleanup/apt \
    --customize-hook='mkdir -p "$1/tmp/knap" && cp '"$new_deb"' "$1/tmp/knap/knap.deb"' \
    --customize-hook='chroot "$1" apt-get install -y --download-only -o APT::Install-Recommends=true /tmp/knap/knap.deb' \
    --customize-hook='rm -rf "$1/tmp/knap"' \
    bookworm "$partial" "${mirrors[@]}" >"$work/mmdebstrap.log" 2>&1 ||
    { tail -30 "$work/mmdebstrap.log"; rm -rf "$partial"; fail "mmdebstrap failed"; }
  mv "$partial" "$tarball"
  # Keep the newest three roots.
  ls -1t "$CACHE"/bookworm-*.tar | tail -n +4 | xargs -r rm -f
fi
rootfs=$work/root
mkdir -p "$rootfs"
tar -C "$rootfs" -xf "$tarball" || fail "cannot unpack $tarball"
cp "$new_deb" "$old_deb" "$rootfs/root/"
cp "$(command -v kubectl)" "$rootfs/usr/local/bin/kubectl" 2>/dev/null || fail "kubectl is not installed on the host"
cp tests/package/service.yaml "$rootfs/root/service.yaml"
# Only the control plane inside (see the header); set before install, so knapd's first start uses it.
mkdir -p "$rootfs/etc/systemd/system/knapd.service.d"
printf '[Service]\nExecStart=\nExecStart=/usr/bin/knapd --runtime none\n' \
  >"$rootfs/etc/systemd/system/knapd.service.d/runtime-none.conf"
step "root ready"

# --- 3. boot ----------------------------------------------------------------------
# --register=no --keep-unit: the host does not run systemd (no machined, no bus).
systemd-nspawn -q --register=no --keep-unit --private-network -b -D "$rootfs" \
  >"$work/boot.log" 2>&1 </dev/null &
nspawn_pid=$!
pid1=""
for _ in $(seq 1 300); do
  kill -0 "$nspawn_pid" 2>/dev/null || break
  for c in $(pgrep -P "$nspawn_pid"); do
    [[ "$(cat /proc/"$c"/comm 2>/dev/null)" == systemd ]] && pid1=$c
  done
  [[ -n "$pid1" ]] && break
  sleep 0.1
done
if [[ -z "$pid1" ]]; then
  tail -20 "$work/boot.log" >&2
  skip "systemd-nspawn cannot boot a Debian root on this machine (log above)"
fi
ct() { nsenter -t "$pid1" -m -u -i -n -p -- env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive "$@"; }
state=""
for _ in $(seq 1 120); do
  state=$(ct systemctl is-system-running 2>/dev/null)
  [[ "$state" == running || "$state" == degraded ]] && break
  sleep 1
done
if [[ "$state" != running && "$state" != degraded ]]; then
  tail -20 "$work/boot.log" >&2
  skip "systemd in the nspawn root did not reach its targets (state \"$state\")"
fi
step "booted systemd $(ct systemctl --version | head -1 | cut -d' ' -f2) ($state)"

# --- 4. checks inside ---------------------------------------------------------------
if ! ct bash -s -- "$version" "$old_version" <tests/package/inside.sh; then
  ct journalctl -u knapd --no-pager -n 40 2>/dev/null | sed 's/^/package test: journal: /' >&2
  fail "checks inside the root failed (above)"
fi
step "passed"
