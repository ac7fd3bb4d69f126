#!/usr/bin/env python3
"""CPU a proxy spends on a request head that trickles in a byte at a time (a slowloris-style
client), knap's router against nginx, in one run.

Each proxy (knap: bench/tls/tls_bench --serve-pod, the Router in-process, one worker; nginx: one
worker, large_client_header_buffers raised to knap's 32 KiB head limit) gets one ~30 KiB request head
sent in 1-byte TCP segments (TCP_NODELAY, a short pause after each, so each is its own read);
the proxy process's user + system CPU time over the send is printed. Linear parsing costs about one
receive per byte; re-parsing the whole head after every read grows with the square of its size.

    python3 bench/router/bench_slow_head.py [--build build] [--bytes 30720]
"""
import argparse
import os
import shutil
import socket
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from proxy_pair import HOST, start_knap, start_nginx, start_pod, stop  # noqa: E402


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def trickle(name, pid, port, head):
    s = socket.create_connection(("127.0.0.1", port), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c0, t0 = cpu_seconds(pid), time.monotonic()
    for i in range(len(head)):
        s.send(head[i:i + 1])
        time.sleep(0.00005)
    got = b""
    while b"\r\n" not in got:
        chunk = s.recv(4096)
        if not chunk:
            break
        got += chunk
    s.close()
    status = got.split(b"\r\n", 1)[0].decode(errors="replace")
    print(f"{name:12} {len(head)} bytes in {time.monotonic() - t0:4.1f} s: proxy CPU {cpu_seconds(pid) - c0:5.2f} s "
          f"(answer: {status})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("KNAP_BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("--bytes", type=int, default=30 * 1024)
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    if shutil.which("nginx") is None:
        raise SystemExit("bench_slow_head: nginx is missing (tools/setup.sh --test)")
    head = f"GET / HTTP/1.1\r\nHost: {HOST}\r\n".encode()
    i = 0
    while len(head) < args.bytes - 40:
        head += b"X-F%05d: %s\r\n" % (i, b"v" * 20)
        i += 1
    head += b"\r\n"
    work = tempfile.mkdtemp(prefix="knap-bench-slowhead-")
    procs = []
    try:
        pod_port = start_pod(build, procs)
        knap, port, _ = start_knap(build, work, pod_port, procs)
        print("one request head sent a byte at a time")
        trickle("knap router", knap.pid, port, head)
        nginx, nport = start_nginx(work, pod_port, procs,
                                   http_extra="large_client_header_buffers 4 32k; client_header_timeout 60s;")
        trickle("nginx", nginx.pid, nport, head)
    finally:
        stop(procs)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
