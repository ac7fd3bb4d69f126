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
import re
import shutil
import socket
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOST = "bench.example.com"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_for(pred, what, timeout=10):
    limit = time.monotonic() + timeout
    while time.monotonic() < limit:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


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
        pod_port = free_port()
        procs.append(subprocess.Popen([f"{build}/tests/apps/knap-testapp", "--port-from-arg", str(pod_port)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        out = os.path.join(work, "knap.out")
        with open(out, "w") as f:
            knap = subprocess.Popen([f"{build}/bench/tls/tls_bench", "--serve-pod", str(pod_port), "--seconds",
                                     "3600", "--sni", HOST], stdout=f, stderr=subprocess.STDOUT)
        procs.append(knap)

        def knap_port():
            m = re.search(r"^serving http on port (\d+)", open(out).read(), re.M)
            return int(m.group(1)) if m else None
        port = wait_for(knap_port, "tls_bench's HTTP listener")
        print("one request head sent a byte at a time")
        trickle("knap router", knap.pid, port, head)

        nport = free_port()
        with open(f"{work}/nginx.conf", "w") as f:
            f.write(f"""worker_processes 1; daemon off; master_process off; pid {work}/nginx.pid; error_log {work}/nginx.err;
events {{ worker_connections 1024; }}
http {{ access_log off; large_client_header_buffers 4 32k; client_header_timeout 60s;
  upstream pod {{ server 127.0.0.1:{pod_port}; keepalive 64; }}
  server {{ listen 127.0.0.1:{nport};
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
        trickle("nginx", nginx.pid, nport, head)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
