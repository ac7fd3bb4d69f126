#!/usr/bin/env bash
# Installs what knap needs, builds it, starts knapd on its embedded defaults
# (state in /var/lib/knap, API on 127.0.0.1:6443 and a root-only unix socket,
# router on 127.0.0.1:8080) and deploys a demo Service. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${KNAP_BUILD_DIR:-$PWD/build}

start=$(date +%s)
tools/setup.sh
export CCACHE_BASEDIR=$PWD CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
[[ -f "$BUILD/build.ninja" ]] || meson setup "$BUILD" --buildtype=release >/dev/null
# Only what the demo runs: not the unit tests and benchmarks (tools/test.sh builds those).
ninja -C "$BUILD" daemon/knapd tools/knap tools/mkimage/knap-mkimage tests/apps/knap-testapp

RUNTIME=${KNAP_RUNTIME:-auto}
mkdir -p /var/lib/knap /var/log/knap
# The API speaks TLS with the CA knapd creates under /var/lib/knap/pki; /readyz is open without credentials.
ready() { [[ -f /var/lib/knap/pki/ca.crt ]] && curl -sf --cacert /var/lib/knap/pki/ca.crt https://127.0.0.1:6443/readyz >/dev/null; }
if ! ready; then
  nohup "$BUILD/daemon/knapd" --runtime "$RUNTIME" >/var/log/knap/knapd.log 2>&1 &
  for _ in $(seq 1 100); do ready && break; sleep 0.1; done
fi
ready || { echo "knapd did not start; see /var/log/knap/knapd.log"; exit 1; }

# The demo image: the project's own test app, packed as an OCI image and imported.
if [[ -x "$BUILD/tools/mkimage/knap-mkimage" && -x "$BUILD/tests/apps/knap-testapp" ]]; then
  "$BUILD/tools/mkimage/knap-mkimage" --out "$BUILD/demo-image.tar" --name dev.local/knap-demo:v1 \
    --file "$BUILD/tests/apps/knap-testapp:/app:0755" --entrypoint /app >/dev/null
  "$BUILD/tools/knap" image import "$BUILD/demo-image.tar" 2>/dev/null || true
fi

"$BUILD/tools/knap" apply -f tools/demo-service.yaml --wait --timeout 120
echo
echo "demo ready in $(($(date +%s) - start))s"
echo "knapd is running (log: /var/log/knap/knapd.log). Try:"
echo "  $BUILD/tools/knap get services"
echo "  $BUILD/tools/knap describe service demo"
echo "  kubectl --kubeconfig /var/lib/knap/kubeconfig get ksvc"
echo "  curl http://demo.default.localhost:8080/"
