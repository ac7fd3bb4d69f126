#!/usr/bin/env bash
# Installs everything knap needs to build, run and test on Debian 12, and
# starts containerd when it is not running. Idempotent; run as root.
#
#   tools/setup.sh            build + runtime packages, containerd started
#   tools/setup.sh --test     also the packages the test suites use
set -euo pipefail

# Package lists live in tools/packages/: *.build are needed to build and run,
# *.test only by the test suites. One file per area, so lists grow without conflicts.
here="$(cd "$(dirname "$0")" && pwd)"
read_list() { cat "$here"/packages/*."$1" 2>/dev/null | sed 's/#.*//' | tr -s ' \n' ' '; }
PACKAGES="$(read_list build)"
TEST_PACKAGES="$(read_list test)"

want="$PACKAGES"
[[ "${1:-}" == "--test" ]] && want="$want $TEST_PACKAGES"

missing=()
for p in $want; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# nginx and docker-registry must not hold ports on their own: tests start their own instances.
for svc in nginx docker-registry; do
  if command -v systemctl >/dev/null && systemctl is-active -q "$svc" 2>/dev/null; then
    systemctl stop "$svc" || true
  fi
done

# containerd: CI machines have no systemd, so start it as a plain background process.
if ! ctr version >/dev/null 2>&1; then
  echo "setup: starting containerd"
  mkdir -p /var/log/knap
  nohup containerd >/var/log/knap/containerd.log 2>&1 &
  for _ in $(seq 1 100); do
    ctr version >/dev/null 2>&1 && break
    sleep 0.1
  done
  ctr version >/dev/null 2>&1 || { echo "setup: containerd did not start, see /var/log/knap/containerd.log" >&2; exit 1; }
fi
