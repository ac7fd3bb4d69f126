# Sourced by bench/router/bench_instructions.sh and bench_syscalls.sh after
# they set NAME (for messages), BUILD and TOOLS (commands they need): checks
# the tools and the build, makes WORK (removed at exit, with every process
# in PIDS killed), and starts tests/apps/knap-testapp on 127.0.0.1:POD_PORT.
# Sets TLS_BENCH, HOST, free_port.
for tool in $TOOLS; do
  command -v "$tool" >/dev/null || { echo "$NAME: $tool is missing (tools/setup.sh --test)" >&2; exit 1; }
done
TLS_BENCH=$BUILD/bench/tls/tls_bench
APP=$BUILD/tests/apps/knap-testapp
[[ -x $TLS_BENCH && -x $APP ]] || { echo "$NAME: build $BUILD first (ninja -C $BUILD)" >&2; exit 1; }

WORK=$(mktemp -d "/tmp/knap-$NAME.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
HOST=bench.example.com

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
POD_PORT=$(free_port)
"$APP" --port-from-arg "$POD_PORT" >/dev/null 2>&1 &
PIDS+=($!)
