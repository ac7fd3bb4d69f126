#!/usr/bin/env python3
"""Memory per idle HTTPS keep-alive connection, knap's router against nginx, in one run.

Each server (knap: bench/tls/tls_bench --serve-pod, the Router in-process, one worker; nginx: one
worker, TLS 1.2 and 1.3, the same kind of EC P-256 certificate) proxies to the same loopback
tests/apps/knap-testapp. The client opens --conns TLS connections, sends one GET on each, reads the
response and keeps the connection open; the server's RSS before and after, divided by the number
of connections, is what one idle keep-alive connection holds.

    python3 bench/tls/bench_idle_connections.py [--build build] [--conns 1000]
"""
import argparse
import os
import resource
import shutil
import socket
import ssl
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from proxy_pair import HOST, start_knap, start_nginx, start_pod, stop  # noqa: E402


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def measure(name, pid, port, conns):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE

    def one():
        s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=30), server_hostname=HOST)
        s.sendall(f"GET / HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = s.recv(4096)
            if not chunk:
                raise RuntimeError(f"{name} closed a connection before answering")
            got += chunk
        if not got.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"{name} answered {got[:40]!r}")
        return s

    for _ in range(20):  # warm: pools, caches, first allocations
        one().close()
    time.sleep(0.3)
    before = rss_kib(pid)
    held = [one() for _ in range(conns)]
    time.sleep(0.5)
    after = rss_kib(pid)
    for s in held:
        s.close()
    print(f"{name:12} RSS {before:7d} KiB -> {after:7d} KiB with {conns} idle connections: "
          f"{(after - before) / conns:5.1f} KiB per connection")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("KNAP_BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("--conns", type=int, default=1000)
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < args.conns + 100:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, args.conns * 2 + 100), hard))
    for tool in ("nginx", "openssl"):
        if shutil.which(tool) is None:
            raise SystemExit(f"bench_idle_connections: {tool} is missing (tools/setup.sh --test)")
    work = tempfile.mkdtemp(prefix="knap-bench-idle-")
    procs = []
    try:
        pod_port = start_pod(build, procs)
        knap, _, port = start_knap(build, work, pod_port, procs)
        print(f"memory per idle HTTPS keep-alive connection (one request each, then held), {args.conns} connections")
        measure("knap router", knap.pid, port, args.conns)
        nginx, nport = start_nginx(work, pod_port, procs, tls=True,
                                   events=f"worker_connections {args.conns + 200};",
                                   http_extra="keepalive_timeout 300s;")
        measure("nginx", nginx.pid, nport, args.conns)
    finally:
        stop(procs)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
