#!/usr/bin/env bash
# Installs everything knap needs to build, run and test on Debian 12, and
# starts containerd when it is not running. Idempotent; run as root.
#
#   tools/setup.sh            build + runtime packages, containerd started
#   tools/setup.sh --test     also the packages the test suites use
set -euo pipefail

PACKAGES="meson ninja-build g++ pkg-config libboost-dev libboost-system-dev libsqlite3-dev sqlite3 \
libyaml-cpp-dev nlohmann-json3-dev libgtest-dev libgmock-dev libgrpc++-dev protobuf-compiler-grpc \
libprotobuf-dev protobuf-compiler libcurl4-openssl-dev libssl-dev zlib1g-dev \
golang-github-containerd-containerd-dev golang-github-gogo-protobuf-dev golang-github-gogo-googleapis-dev \
containerd runc containernetworking-plugins iproute2 iptables curl ca-certificates ccache"
TEST_PACKAGES="python3 python3-pytest docker-registry skopeo umoci apache2-utils nginx-light wrk hey"

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
