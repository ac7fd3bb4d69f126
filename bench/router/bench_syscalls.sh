#!/usr/bin/env bash
# Syscalls and CPU per proxied request, knap's router against nginx, in
# front of the same loopback pod, in one run: perf's syscall tracepoints
# and task-clock on the proxy process while wrk drives it (unlike req/s,
# the syscall counts do not move with the machine's load).
#
#   bench/router/bench_syscalls.sh [--build build] [--seconds 4] [--conns 32] [--rounds 2]
#
# knap: bench/tls/tls_bench --serve-pod (knap's Router in-process, one
# worker thread, linked like knapd); nginx: one worker, keep-alive upstream
# pool; both to tests/apps/knap-testapp on 127.0.0.1. The two alternate,
# --rounds times. Needs perf, nginx, wrk (tools/setup.sh --test); root.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$ROOT/build
SECS=4
CONNS=32
ROUNDS=2
while (($#)); do
  case $1 in
    --build) BUILD=$(cd "$2" && pwd); shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    --conns) CONNS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    *) echo "usage: $0 [--build DIR] [--seconds N] [--conns N] [--rounds N]" >&2; exit 2 ;;
  esac
done
NAME=bench_syscalls
TOOLS="perf nginx wrk"
# shellcheck source=bench/router/pod_and_tools.sh
source "$ROOT/bench/router/pod_and_tools.sh"

"$TLS_BENCH" --serve-pod "$POD_PORT" --seconds 3600 --sni "$HOST" >"$WORK/knap.out" 2>&1 &
KNAP=$!
PIDS+=($KNAP)
for _ in $(seq 100); do grep -q 'serving http on' "$WORK/knap.out" && break; sleep 0.1; done
KNAP_PORT=$(awk '/serving http on/{print $5}' "$WORK/knap.out")
NGINX_PORT=$(free_port)
cat >"$WORK/nginx.conf" <<EOC
worker_processes 1; daemon off; master_process off; pid $WORK/nginx.pid; error_log $WORK/nginx.err;
events { worker_connections 1024; }
http { access_log off; upstream pod { server 127.0.0.1:$POD_PORT; keepalive 64; }
  server { listen 127.0.0.1:$NGINX_PORT; location / { proxy_pass http://pod; proxy_http_version 1.1;
    proxy_set_header Connection ""; proxy_set_header Host \$host; } } }
EOC
nginx -c "$WORK/nginx.conf" -p "$WORK" 2>/dev/null &
NGINX=$!
PIDS+=($NGINX)
sleep 0.5

EVENTS=task-clock
for s in recvfrom recvmsg read readv sendto sendmsg write writev epoll_wait epoll_ctl getsockopt setsockopt; do
  EVENTS+=",syscalls:sys_enter_$s"
done
echo "per proxied request, wrk -t1 -c$CONNS, ${SECS} s per round, $ROUNDS rounds alternating"
for round in $(seq "$ROUNDS"); do
  for who in "knap router:$KNAP:$KNAP_PORT" "nginx:$NGINX:$NGINX_PORT"; do
    IFS=: read -r name pid port <<<"$who"
    wrk -t1 -c"$CONNS" -d1s -H "Host: $HOST" "http://127.0.0.1:$port/" >/dev/null  # warm the pools
    perf stat -e "$EVENTS" -p "$pid" -o "$WORK/perf" -- sleep "$SECS" &
    stat_pid=$!
    wrk -t1 -c"$CONNS" -d"${SECS}s" --latency -H "Host: $HOST" "http://127.0.0.1:$port/" >"$WORK/wrk"
    wait $stat_pid
    n=$(awk '/requests in/{print $1}' "$WORK/wrk")
    [[ -n $n && $n -gt 0 ]] || { echo "bench_syscalls: no requests answered by $name" >&2; exit 1; }
    awk -v name="$name" -v n="$n" -v rps="$(awk '/Requests\/sec/{print $2}' "$WORK/wrk")" \
      -v p99="$(awk '/ 99%/{print $2}' "$WORK/wrk")" '
      /task-clock/ { gsub(",", "", $1); cpu = $1 * 1000 / n }
      /syscalls:/ { gsub(",", "", $1); sub("syscalls:sys_enter_", "", $2); if ($1 > 0) { calls = calls sprintf(" %s %.2f", $2, $1 / n); total += $1 / n } }
      END { printf "%-12s %7.0f req/s  p99 %-7s  CPU %5.1f us  syscalls %.2f:%s\n", name, rps, p99, cpu, total, calls }' "$WORK/perf"
  done
done
