#!/usr/bin/env python3
"""Serving benchmark, side by side in one run on the same test app (root):

1. requests/s and latency p50/p99 with wrk -c32: direct to the pod, through
   nginx as a keep-alive reverse proxy, and through knap's router; and the
   latency each proxy adds over direct at one connection (wrk -c1). The three
   paths are measured in turn, --rounds times, and the medians printed, so
   a noisy neighbour on the machine hits all three alike;
2. cold start (request at zero pods -> first byte) p50/p99 over N trials,
   next to `ctr run --rm` of the same image, with no warm pool
   (bench_coldstart.py compares the pool modes).

    python3 bench/serving/bench_serving.py [--build build] [--trials 20] [--duration 5] [--rounds 3] [--no-cold]
"""
import argparse
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import conftest  # noqa: E402  (the e2e harness starts and drives knapd)
from pods import require_containerd  # noqa: E402

IMAGE = "dev.local/knap-bench:v1"



def first_pod_ip(data_dir):
    """The address of a running pod of knapd's (its pods/<id>/meta.json)."""
    pods = []
    for meta in os.listdir(os.path.join(data_dir, "pods")):
        with open(os.path.join(data_dir, "pods", meta, "meta.json")) as f:
            pods.append(json.load(f))
    return next(p.get("ip") for p in pods if p.get("ip"))

def cpu_seconds(pids):
    """User + system CPU time of these processes (all their threads), in seconds."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def wrk(url, host, duration, conns=32):
    cmd = ["wrk", "-t1", f"-c{conns}", f"-d{duration}s", "--latency", url]
    if host:
        cmd[1:1] = ["-H", f"Host: {host}"]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    wrk.last_requests = int(re.search(r"(\d+) requests in", out).group(1))

    def lat(label):
        m = re.search(rf"{label}%\s+([\d.]+)(us|ms|s)", out)
        v = float(m.group(1))
        return v / 1000 if m.group(2) == "us" else v * 1000 if m.group(2) == "s" else v
    return rps, lat("50"), lat("99")


def get(port, host, path="/"):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("GET", path, headers={"Host": host})
    r = c.getresponse()
    r.read()
    c.close()
    return r.status


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("KNAP_BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-cold", action="store_true", help="skip the cold-start part")
    args = ap.parse_args()
    require_containerd()
    build = os.path.abspath(args.build)
    conftest.BUILD, conftest.KNAPD, conftest.KNAP = build, f"{build}/daemon/knapd", f"{build}/tools/knap"
    work = tempfile.mkdtemp(prefix="knap-bench-serving-")
    ns = "knap-bench"
    k = conftest.Knapd(work, runtime="containerd", extra_config=(
        f"  containerd-namespace: {ns}\n  bridge-name: knapbench0\n  pod-subnet: 10.218.0.0/24\n"
        "  metrics-listen: 127.0.0.1:0\n  warm-pool-size: \"0\"\n"
        "autoscaler:\n  stable-window: 6s\n  panic-window-percentage: \"20\"\n  scale-to-zero-grace-period: 1s\n"))
    tar = os.path.join(work, "app.tar")
    subprocess.run([f"{build}/tools/mkimage/knap-mkimage", "--out", tar, "--name", IMAGE, "--file",
                    f"{build}/tests/apps/knap-testapp:/app/knap-testapp", "--entrypoint", "/app/knap-testapp",
                    "--user", "app", "--workdir", "/app", "--expose", "8080"], check=True, capture_output=True)
    subprocess.run([k_cli := f"{build}/tools/knap", "image", "import", tar, "--namespace", ns], check=True,
                   capture_output=True)
    nginx = None
    try:
        k.start(timeout=60)
        svc = {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": "bench"},
               "spec": {"template": {"metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "1"}},
                                     "spec": {"containers": [{"image": IMAGE}]}}}}
        subprocess.run([k_cli, "--kubeconfig", k.kubeconfig, "apply", "-f", "-", "--wait"], input=json.dumps(svc), text=True,
                       check=True, capture_output=True)
        pod_ip = first_pod_ip(k.data_dir)
        # nginx as a keep-alive reverse proxy to the same pod, one worker (like knap's data plane on one box).
        nport = conftest.free_port()
        conf = os.path.join(work, "nginx.conf")
        with open(conf, "w") as f:
            f.write(f"""worker_processes 1; daemon off; pid {work}/nginx.pid; error_log {work}/nginx.err;
events {{ worker_connections 1024; }}
http {{ access_log off; upstream pod {{ server {pod_ip}:8080; keepalive 64; }}
  server {{ listen 127.0.0.1:{nport}; location / {{ proxy_pass http://pod; proxy_http_version 1.1;
    proxy_set_header Connection ""; proxy_set_header Host $host; }} }} }}
""")
        nginx = subprocess.Popen(["nginx", "-c", conf, "-p", work], stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        host = "bench.default.localhost"
        nginx_pids = [nginx.pid] + [int(p) for p in subprocess.run(
            ["pgrep", "-P", str(nginx.pid)], capture_output=True, text=True).stdout.split()]
        paths = (("direct to pod", f"http://{pod_ip}:8080/", None, []),
                 ("nginx reverse proxy", f"http://127.0.0.1:{nport}/", host, nginx_pids),
                 ("knap router", f"http://127.0.0.1:{k.router_port}/", host, [k.proc.pid]))
        runs = {name: {"c32": [], "c1": [], "cpu": []} for name, _, _, _ in paths}
        for _ in range(args.rounds):
            for name, url, h, pids in paths:
                c0 = cpu_seconds(pids)
                runs[name]["c32"].append(wrk(url, h, args.duration, 32))
                # The proxy's CPU per request: what the machine's load changes least.
                runs[name]["cpu"].append((cpu_seconds(pids) - c0) / wrk.last_requests * 1e6)
                runs[name]["c1"].append(wrk(url, h, args.duration, 1))

        def med(name, conns, i):
            return pct([r[i] for r in runs[name][conns]], 50)
        print(f"serving benchmark: knap-testapp, wrk -t1 -d{args.duration}s, median of {args.rounds} rounds, "
              "same run, same pod")
        print(f"{'path':22} {'c32 req/s':>10} {'p50 ms':>8} {'p99 ms':>8} {'c1 p50 ms':>10} {'c1 added ms':>12}"
              f" {'proxy CPU us/req':>17}")
        direct_c1 = med("direct to pod", "c1", 1)
        for name, _, _, pids in paths:
            c1 = med(name, "c1", 1)
            cpu = f"{pct(runs[name]['cpu'], 50):17.1f}" if pids else f"{'-':>17}"
            print(f"{name:22} {med(name, 'c32', 0):10.0f} {med(name, 'c32', 1):8.2f} {med(name, 'c32', 2):8.2f} "
                  f"{c1:10.3f} {c1 - direct_c1:12.3f} {cpu}")
        print(f"load average at the end: {os.getloadavg()[0]:.1f} (req/s and latency are comparable only on an "
              "idle machine; CPU per request much less depends on it)")
        if args.no_cold:
            return

        # Cold start: a revision that scales to zero, woken by one request each trial.
        cold = dict(svc, metadata={"name": "cold"})
        cold["spec"] = {"template": {"metadata": {"annotations": {"autoscaling.knative.dev/min-scale": "0"}},
                                     "spec": {"containers": [{"image": IMAGE}]}}}
        subprocess.run([k_cli, "--kubeconfig", k.kubeconfig, "apply", "-f", "-", "--wait"], input=json.dumps(cold), text=True,
                       check=True, capture_output=True)
        api = "/apis/serving.knative.dev/v1/namespaces/default/revisions/cold-00001"
        times = []
        for _ in range(args.trials):
            k.wait_for(lambda: k.get_json(api).get("status", {}).get("actualReplicas", 1) == 0, timeout=120,
                       what="scale to zero")
            time.sleep(0.5)
            t0 = time.perf_counter()
            assert get(k.router_port, "cold.default.localhost") == 200
            times.append(time.perf_counter() - t0)
        ctr = []
        for i in range(args.trials):
            t0 = time.perf_counter()
            subprocess.run(["ctr", "-n", ns, "run", "--rm", IMAGE, f"knap-bench-ctr-{i}", "/app/knap-testapp",
                            "--fail-start"], capture_output=True)
            ctr.append(time.perf_counter() - t0)
        print(f"\ncold start over {args.trials} trials (seconds)      p50      p99")
        print(f"{'knap: request at zero -> first byte':40} {pct(times, 50):8.3f} {pct(times, 99):8.3f}")
        print(f"{'ctr run --rm (process start and exit)':40} {pct(ctr, 50):8.3f} {pct(ctr, 99):8.3f}")
    finally:
        if nginx:
            nginx.terminate()
        subprocess.run([f"{build}/tools/knap", "--kubeconfig", k.kubeconfig, "delete", "service", "bench", "cold"],
                       capture_output=True)
        time.sleep(3)
        k.stop()
        subprocess.run(["ctr", "-n", ns, "images", "rm", IMAGE], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
