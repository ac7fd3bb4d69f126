#!/usr/bin/env python3
"""TLS benchmark, side by side in one run (root, containerd): knap's router terminating TLS vs nginx
terminating TLS with the same certificate and key, both in front of the same test-app pod.

Measured with bench/tls/tls_bench (OpenSSL client, one thread per connection, no session resumption):
1. handshakes/s: new connection + full handshake + close, --conns client threads;
2. HTTPS req/s: keep-alive GETs over --conns connections (the request goes to the pod).
3. HTTP/2 req/s: h2load (nghttp2-client) over --conns connections with --streams concurrent streams
   each (nginx: `listen ... ssl http2`), and the same h2load run with --h1 (HTTP/1.1 keep-alive).
The two servers are measured in turn, --rounds times, and the medians printed. Then knap's handshake
rate with 1 vs 1,000 certificates loaded (tls_bench --self-certs 1000, in-process router).

nginx runs one worker (knap's router runs hardware_concurrency/2 = 1 loop on 2 cores), with
ssl_protocols TLSv1.2 TLSv1.3, keepalive_requests raised to 1,000,000 (its default 1,000 closes a
client connection, or ends an HTTP/2 one with GOAWAY, mid-measurement) and its defaults otherwise (session tickets on, like knap's OpenSSL
defaults); the client never resumes, so every handshake is a full one on both.

    python3 bench/serving/bench_tls.py [--build build] [--duration 5] [--rounds 3] [--conns 4]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import conftest  # noqa: E402  (the e2e harness starts and drives knapd)
from pods import require_containerd  # noqa: E402
import bench_serving  # noqa: E402  (same folder: the pod address lookup)

IMAGE = "dev.local/knap-bench:v1"
HOST = "bench.default.example.com"


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def tls_bench(build, port, mode, duration, conns):
    p = subprocess.run([f"{build}/bench/tls/tls_bench", "--port", str(port), "--sni", HOST, "--mode", mode,
                        "--seconds", str(duration), "--conns", str(conns)], capture_output=True, text=True)
    m = re.search(r"([\d.]+)/s \((\d+) in [\d.]+ s, (\d+) errors\)", p.stdout)
    assert m, f"tls_bench exited {p.returncode}: {p.stdout}{p.stderr}"
    return float(m.group(1)), int(m.group(3))


def h2load(port, duration, conns, streams, h1=False):
    """req/s and failed requests of one h2load run (HTTP/2, or HTTP/1.1 with h1)."""
    cmd = ["h2load", "-D", str(duration), "-c", str(conns), "-m", "1" if h1 else str(streams),
           "--connect-to", f"127.0.0.1:{port}", *(["--h1"] if h1 else []), f"https://{HOST}:{port}/hello"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 120)
    m = re.search(r"finished in [\d.]+s, ([\d.]+) req/s", p.stdout)
    f = re.search(r"requests: \d+ total, \d+ started, \d+ done, \d+ succeeded, (\d+) failed, (\d+) errored",
                  p.stdout)
    assert m and f, f"h2load exited {p.returncode}: {p.stdout}{p.stderr}"
    return float(m.group(1)), int(f.group(1)) + int(f.group(2))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("KNAP_BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--streams", type=int, default=10)
    args = ap.parse_args()
    require_containerd()
    build = os.path.abspath(args.build)
    conftest.BUILD, conftest.KNAPD, conftest.KNAP = build, f"{build}/daemon/knapd", f"{build}/tools/knap"
    work = tempfile.mkdtemp(prefix="knap-bench-tls-")
    ns = "knap-bench"
    certs = os.path.join(work, "tls")
    os.makedirs(certs)
    crt, key = os.path.join(certs, "bench.crt"), os.path.join(certs, "bench.key")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-days", "2", "-keyout", key, "-out", crt, "-subj", f"/CN={HOST}",
                    "-addext", f"subjectAltName=DNS:{HOST}"], check=True, capture_output=True)
    tls_port = conftest.free_port()
    k = conftest.Knapd(work, runtime="containerd", extra_config=(
        f"  containerd-namespace: {ns}\n  bridge-name: knapbench0\n  pod-subnet: 10.218.0.0/24\n"
        f"  metrics-listen: 127.0.0.1:0\n  warm-pool-size: \"0\"\n"
        f"  router-tls-listen: 127.0.0.1:{tls_port}\n  router-tls-certificates-dir: {certs}\n"
        "domain:\n  example.com: \"\"\n"))
    tar = os.path.join(work, "app.tar")
    subprocess.run([f"{build}/tools/mkimage/knap-mkimage", "--out", tar, "--name", IMAGE, "--file",
                    f"{build}/tests/apps/knap-testapp:/app/knap-testapp", "--entrypoint", "/app/knap-testapp",
                    "--user", "app", "--workdir", "/app", "--expose", "8080"], check=True, capture_output=True)
    k_cli = f"{build}/tools/knap"
    subprocess.run([k_cli, "image", "import", tar, "--namespace", ns], check=True, capture_output=True)
    nginx = None
    try:
        k.start(timeout=60)
        svc = {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": "bench"},
               "spec": {"template": {"metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "1"}},
                                     "spec": {"containers": [{"image": IMAGE}]}}}}
        subprocess.run([k_cli, "--kubeconfig", k.kubeconfig, "apply", "-f", "-", "--wait"], input=json.dumps(svc),
                       text=True, check=True, capture_output=True)
        pod_ip = bench_serving.first_pod_ip(k.data_dir)
        nport = conftest.free_port()
        conf = os.path.join(work, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"""worker_processes 1; daemon off; pid {work}/nginx.pid; error_log {work}/nginx.err;
events {{ worker_connections 1024; }}
http {{ access_log off; keepalive_requests 1000000; upstream pod {{ server {pod_ip}:8080; keepalive 64; }}
  server {{ listen 127.0.0.1:{nport} ssl http2; server_name {HOST};
    ssl_certificate {crt}; ssl_certificate_key {key}; ssl_protocols TLSv1.2 TLSv1.3;
    location / {{ proxy_pass http://pod; proxy_http_version 1.1;
    proxy_set_header Connection ""; proxy_set_header Host $host; }} }} }}
""")
        nginx = subprocess.Popen(["nginx", "-c", conf, "-p", work], stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        assert nginx.poll() is None, "nginx did not start: " + open(f"{work}/nginx.err").read()
        servers = (("nginx (TLS, 1 worker)", nport), ("knap router", tls_port))
        runs = {name: {"handshake": [], "request": [], "h2": [], "h1": []} for name, _ in servers}
        errors = {name: 0 for name, _ in servers}
        for _ in range(args.rounds):
            for name, port in servers:
                for mode in ("handshake", "request"):
                    rate, errs = tls_bench(build, port, mode, args.duration, args.conns)
                    runs[name][mode].append(rate)
                    errors[name] += errs
                for mode in ("h2", "h1"):
                    rate, errs = h2load(port, args.duration, args.conns, args.streams, h1=mode == "h1")
                    runs[name][mode].append(rate)
                    errors[name] += errs
        print(f"TLS benchmark: knap-testapp pod, tls_bench --conns {args.conns}, {args.duration} s each, "
              f"median of {args.rounds} rounds, same run, same certificate (EC P-256), same pod")
        print(f"h2load: -c {args.conns}, HTTP/2 with -m {args.streams} streams per connection, HTTP/1.1 (--h1) "
              f"keep-alive, {args.duration} s each")
        cols = (("handshake", "handshakes/s"), ("request", "HTTPS req/s"), ("h2", "h2load h2 req/s"),
                ("h1", "h2load h1 req/s"))
        print(f"{'server':24} " + " ".join(f"{title:>16}" for _, title in cols))
        for name, _ in servers:
            print(f"{name:24} " + " ".join(f"{pct(runs[name][mode], 50):16.0f}" for mode, _ in cols))
        n, kk = "nginx (TLS, 1 worker)", "knap router"
        print(f"{'knap / nginx':24} " +
              " ".join(f"{pct(runs[kk][mode], 50) / pct(runs[n][mode], 50):16.2f}" for mode, _ in cols))
        print("client errors over the run (failed handshakes, closed keep-alive connections, failed h2load "
              "requests): " +
              ", ".join(f"{name} {n}" for name, n in errors.items()) + "\n")
        out = subprocess.run([f"{build}/bench/tls/tls_bench", "--self-certs", "1000", "--seconds",
                              str(max(1, args.duration // 2)), "--conns", "2", "--rounds", str(3 * args.rounds)],
                             capture_output=True, text=True).stdout
        print(out.strip())
    finally:
        if nginx:
            nginx.terminate()
        subprocess.run([k_cli, "--kubeconfig", k.kubeconfig, "delete", "service", "bench"], capture_output=True)
        time.sleep(3)
        k.stop()
        subprocess.run(["ctr", "-n", ns, "images", "rm", IMAGE], capture_output=True)
        subprocess.run(["ip", "link", "del", "knapbench0"], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
