#!/usr/bin/env bash
# User-space instructions per proxied request, knap's router against nginx,
# in front of the same loopback pod, in one run (valgrind's callgrind counts
# every instruction the proxy process executes, so the figure does not move
# with the machine's load, unlike req/s or CPU time).
#
#   bench/router/bench_instructions.sh [--build build] [--seconds 4] [--conns 4]
#
# knap: bench/tls/tls_bench --serve-pod (knap's Router in-process, one worker
# thread, plain HTTP and HTTPS listeners, linked like knapd) under callgrind,
# counting only inside the worker's event loop (the start-up and its
# certificate generation are left out). nginx: one worker, master_process
# off, counting inside its event loop. Both proxy to tests/apps/knap-testapp
# on 127.0.0.1 with keep-alive pod connections; HTTP is driven by wrk, HTTPS
# by tls_bench's client (keep-alive, one SNI host; the same client for both).
# Prints one line per proxy and protocol: requests served while counting,
# instructions, instructions per request. Needs valgrind, nginx, wrk, openssl
# (tools/setup.sh --test). Kernel time is not in these figures: see
# bench/serving/bench_serving.py for CPU per request and req/s.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$ROOT/build
SECS=4
CONNS=4
while (($#)); do
  case $1 in
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    --conns) CONNS=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--seconds N] [--conns N]" >&2; exit 2 ;;
  esac
done
NAME=bench_instructions
TOOLS="valgrind callgrind_annotate nginx wrk openssl"
# shellcheck source=bench/router/pod_and_tools.sh
source "$ROOT/bench/router/pod_and_tools.sh"

# The load: HTTP with wrk, HTTPS with tls_bench's keep-alive client. Prints
# the number of requests answered.
drive() {  # proto port
  if [[ $1 == http ]]; then
    wrk -t1 -c"$CONNS" -d"${SECS}s" -H "Host: $HOST" "http://127.0.0.1:$2/" >"$WORK/load"
    awk '/requests in/{print $1}' "$WORK/load"
  else
    "$TLS_BENCH" --port "$2" --sni "$HOST" --mode request --conns "$CONNS" --seconds "$SECS" >"$WORK/load"
    sed -E 's/.*\(([0-9]+) in.*/\1/' "$WORK/load" | tail -1
  fi
}

report() {  # label requests callgrind-file
  local ir
  ir=$(callgrind_annotate "$3" 2>/dev/null | awk '/PROGRAM TOTALS/{gsub(",","",$1); print $1}')
  if [[ -z $2 || $2 -eq 0 || -z $ir ]]; then
    echo "bench_instructions: no figure for $1 (requests '$2', instructions '$ir')" >&2
    exit 1
  fi
  printf "%-22s %8d requests %14d instructions %8d per request\n" "$1" "$2" "$ir" $((ir / $2))
}

wait_for() {  # file pattern
  for _ in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "bench_instructions: timed out waiting for '$2' in $1" >&2
  cat "$1" >&2
  exit 1
}

echo "user-space instructions per proxied request (callgrind), $CONNS connections, ${SECS} s of load each"

# knap's router, both protocols, one process each (so each count is one protocol's).
for proto in http https; do
  valgrind --tool=callgrind --callgrind-out-file="$WORK/knap.$proto.cg" --collect-atstart=no \
    "--toggle-collect=boost::asio::detail::scheduler::run*" \
    "$TLS_BENCH" --serve-pod "$POD_PORT" --seconds 600 --sni "$HOST" >"$WORK/knap.$proto.out" 2>"$WORK/knap.$proto.vg" &
  pid=$!
  PIDS+=($pid)
  wait_for "$WORK/knap.$proto.out" "serving http on"
  port=$(awk -v p="serving $proto on" '$0 ~ p {print $5}' "$WORK/knap.$proto.out")
  n=$(drive $proto "$port")
  kill -INT $pid  # (callgrind writes its counts as the process ends)
  sleep 0.5
  kill -TERM $pid 2>/dev/null || true
  wait $pid 2>/dev/null || true
  report "knap router $proto" "$n" "$WORK/knap.$proto.cg"
done

# nginx, one worker, the same pod; HTTPS with a self-signed certificate for the host,
# TLS 1.2 and 1.3 as knap (nginx 1.22's default protocols stop at TLS 1.2).
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 -subj "/CN=$HOST" \
  -addext "subjectAltName=DNS:$HOST" -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
for proto in http https; do
  port=$(free_port)
  listen="listen 127.0.0.1:$port;"
  [[ $proto == https ]] && listen="listen 127.0.0.1:$port ssl; ssl_certificate $WORK/cert.pem; ssl_certificate_key $WORK/key.pem; ssl_protocols TLSv1.2 TLSv1.3;"
  mkdir -p "$WORK/nginx.$proto"
  cat >"$WORK/nginx.$proto/nginx.conf" <<EOF
worker_processes 1; daemon off; master_process off; pid $WORK/nginx.$proto/nginx.pid; error_log $WORK/nginx.$proto/err;
events { worker_connections 1024; }
http { access_log off; upstream pod { server 127.0.0.1:$POD_PORT; keepalive 64; }
  server { $listen server_name $HOST; location / { proxy_pass http://pod; proxy_http_version 1.1;
    proxy_set_header Connection ""; proxy_set_header Host \$host; } } }
EOF
  valgrind --tool=callgrind --callgrind-out-file="$WORK/nginx.$proto.cg" --collect-atstart=no \
    --toggle-collect=ngx_process_events_and_timers \
    nginx -c "$WORK/nginx.$proto/nginx.conf" -p "$WORK/nginx.$proto" 2>"$WORK/nginx.$proto.vg" &
  pid=$!
  PIDS+=($pid)
  for _ in $(seq 300); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
  n=$(drive $proto "$port")
  kill -QUIT $pid
  wait $pid 2>/dev/null || true
  report "nginx $proto" "$n" "$WORK/nginx.$proto.cg"
done
