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
import re
import resource
import shutil
import socket
import ssl
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOST = "bench.example.com"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def wait_for(pred, what, timeout=10):
    limit = time.monotonic() + timeout
    while time.monotonic() < limit:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


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
        pod_port = free_port()
        procs.append(subprocess.Popen([f"{build}/tests/apps/knap-testapp", "--port-from-arg", str(pod_port)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        out = os.path.join(work, "knap.out")
        with open(out, "w") as f:
            knap = subprocess.Popen([f"{build}/bench/tls/tls_bench", "--serve-pod", str(pod_port), "--seconds",
                                     "3600", "--sni", HOST], stdout=f, stderr=subprocess.STDOUT)
        procs.append(knap)

        def knap_port():
            m = re.search(r"^serving https on port (\d+)", open(out).read(), re.M)
            return int(m.group(1)) if m else None
        port = wait_for(knap_port, "tls_bench's HTTPS listener")
        print(f"memory per idle HTTPS keep-alive connection (one request each, then held), {args.conns} connections")
        measure("knap router", knap.pid, port, args.conns)

        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                        "-nodes", "-days", "1", "-subj", f"/CN={HOST}", "-keyout", f"{work}/key.pem", "-out",
                        f"{work}/cert.pem"], check=True, capture_output=True)
        nport = free_port()
        with open(f"{work}/nginx.conf", "w") as f:
            f.write(f"""worker_processes 1; daemon off; master_process off; pid {work}/nginx.pid; error_log {work}/nginx.err;
events {{ worker_connections {args.conns + 200}; }}
http {{ access_log off; keepalive_timeout 300s; upstream pod {{ server 127.0.0.1:{pod_port}; keepalive 64; }}
  server {{ listen 127.0.0.1:{nport} ssl; ssl_certificate {work}/cert.pem; ssl_certificate_key {work}/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3;
    location / {{ proxy_pass http://pod; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_set_header Host $host; }} }} }}
""")
        nginx = subprocess.Popen(["nginx", "-c", f"{work}/nginx.conf", "-p", work], stderr=subprocess.DEVNULL)
        procs.append(nginx)

        def nginx_up():
            try:
                socket.create_connection(("127.0.0.1", nport), timeout=1).close()
                return True
            except OSError:
                return False
        wait_for(nginx_up, "nginx")
        measure("nginx", nginx.pid, nport, args.conns)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
