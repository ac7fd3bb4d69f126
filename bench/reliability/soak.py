#!/usr/bin/env python3
"""Churn soak: create, serve, scale to zero and back, delete — for a while —
then count what is left over.

Starts its own knapd (--runtime containerd, its own containerd namespace,
bridge and subnet, data dir in a temporary directory) with a short
scale-to-zero window, imports the test app, runs one warm-up cycle, takes
counts, runs cycles until --duration passes, deletes everything, waits for
the pods to go and counts again:

  containers, tasks, snapshots, leases (containerd, the instance's namespace),
  netns (named after the bridge), veths on the bridge, host-local IPs
  (files in <data-dir>/cni), knapd open fds and RSS.

Prints before/after and exits non-zero when anything leaked (RSS is
reported, with its growth; it is judged by the reader, not asserted).

    python3 bench/reliability/soak.py [--build build] [--duration 1800]

Figures in docs/reliability.md; no CI test runs it.
"""
import argparse
import http.client
import ssl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tests", "e2e"))
from ports import free_port  # noqa: E402
from pods import frozen, require_containerd  # noqa: E402

API = "/apis/serving.knative.dev/v1/namespaces/default/services"
IMAGE = "dev.local/knap-soak:v1"


def sh(*args):
    return subprocess.run(list(args), capture_output=True, text=True).stdout


class Soak:
    def __init__(self, build, tag):
        self.build = build
        self.work = tempfile.mkdtemp(prefix="knap-soak-")
        self.data = os.path.join(self.work, "data")
        self.ns = f"knap-soak-{tag}"
        self.bridge = f"knaps{tag}"
        self.api, self.router = free_port(), free_port()
        cfg = os.path.join(self.work, "config.yaml")
        with open(cfg, "w") as f:
            f.write("knap:\n"
                    f"  data-dir: {self.data}\n  api-listen: 127.0.0.1:{self.api}\n"
                    f"  router-listen: 127.0.0.1:{self.router}\n  metrics-listen: 127.0.0.1:0\n"
                    f"  containerd-namespace: {self.ns}\n"
                    f"  bridge-name: {self.bridge}\n  pod-subnet: 10.216.{tag}.0/24\n"
                    "autoscaler:\n  stable-window: 6s\n  panic-window-percentage: 20\n  scale-to-zero-grace-period: 1s\n")
        self.proc = None
        self.log = open(os.path.join(self.work, "knapd.log"), "a")

    def start(self):
        testapp = os.path.join(self.build, "tests", "apps", "knap-testapp")
        tar = os.path.join(self.work, "app.tar")
        subprocess.run([os.path.join(self.build, "tools", "mkimage", "knap-mkimage"), "--out", tar, "--name", IMAGE,
                        "--file", f"{testapp}:/app/knap-testapp", "--entrypoint", "/app/knap-testapp",
                        "--user", "app", "--workdir", "/app", "--expose", "8080"], check=True, capture_output=True)
        subprocess.run([os.path.join(self.build, "tools", "knap"), "image", "import", tar, "--namespace", self.ns],
                       check=True, capture_output=True)
        self.proc = subprocess.Popen([os.path.join(self.build, "daemon", "knapd"), "--config",
                                      os.path.join(self.work, "config.yaml"), "--runtime", "containerd"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.wait(lambda: self.req("GET", "/readyz")[0] == 200, 60, "knapd ready")

    def req(self, method, path, body=None, host=None, port=None, timeout=30):
        try:
            if port:  # the router
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
            else:  # the API: HTTPS as knapd's admin (CA and client certificate from data/pki)
                pki = os.path.join(self.data, "pki")
                ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
                ctx.load_cert_chain(os.path.join(pki, "admin.crt"), os.path.join(pki, "admin.key"))
                c = http.client.HTTPSConnection("127.0.0.1", self.api, timeout=timeout, context=ctx)
            headers = {"Content-Type": "application/json"}
            if host:
                headers["Host"] = host
            c.request(method, path, body=body, headers=headers)
            r = c.getresponse()
            out = r.status, r.read().decode(errors="replace")
            c.close()
            return out
        except OSError as e:
            return 0, repr(e)

    def wait(self, pred, timeout, what):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if pred():
                return
            time.sleep(0.2)
        raise SystemExit(f"timed out: {what}\n" + open(self.log.name).read()[-3000:])

    def tasks(self, status=None):
        """The namespace's tasks (all, or those in `status`, e.g. RUNNING: a warm-pool pod is PAUSED, or
        RUNNING in a frozen cgroup, which counts as PAUSED here)."""
        n = 0
        for r in [line.split() for line in sh("ctr", "-n", self.ns, "tasks", "ls").splitlines()[1:]]:
            if not r:
                continue
            st = "PAUSED" if r[-1] == "RUNNING" and frozen(r[0]) else r[-1]
            if status is None or st == status:
                n += 1
        return n

    def ready(self, name):
        code, body = self.req("GET", f"{API}/{name}")
        if code != 200:
            return False
        return any(c["type"] == "Ready" and c["status"] == "True"
                   for c in json.loads(body).get("status", {}).get("conditions", []))

    def cycle(self, name):
        doc = json.dumps({"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": name},
                          "spec": {"template": {"spec": {"containers": [{"image": IMAGE}]}}}})
        code, body = self.req("POST", API, doc)
        assert code == 201, (code, body)
        self.wait(lambda: self.ready(name), 60, f"{name} Ready")
        host = f"{name}.default.localhost"
        self.wait(lambda: self.req("GET", "/", host=host, port=self.router)[0] == 200, 30, f"{name} serves")
        self.wait(lambda: self.tasks("RUNNING") == 0, 60, f"{name} scaled to zero (no running pod; "
                                                                "the warm pool's is paused)")
        code, _ = self.req("GET", "/", host=host, port=self.router, timeout=60)  # from zero
        assert code == 200, code
        code, _ = self.req("DELETE", f"{API}/{name}")
        assert code == 200, code
        self.wait(lambda: self.tasks() == 0, 60, f"{name} pods gone (warm pool too)")

    def memory(self):
        """knapd's memory beyond VmRSS: anonymous vs. file-backed pages (smaps_rollup), and what knapd's
        knap_process_memory_bytes says (heap in use vs. free in the allocator, SQLite; sampled by knapd once
        a minute), in KiB."""
        out = {}
        try:
            with open(f"/proc/{self.proc.pid}/smaps_rollup") as f:
                for line in f:
                    k = line.split(":")[0]
                    if k in ("Anonymous", "Rss"):
                        out[k.lower()] = int(line.split()[1])
        except OSError:
            pass
        try:
            m = re.search(r"admin=(\d+)", open(self.log.name).read())
            text = http.client.HTTPConnection("127.0.0.1", int(m.group(1)), timeout=10)
            text.request("GET", "/metrics")
            for kind, v in re.findall(r'knap_process_memory_bytes\{kind="(\w+)"\} (\S+)', text.getresponse().read().decode()):
                out[kind] = int(float(v)) // 1024
        except (OSError, AttributeError, ValueError):
            pass
        return out

    def counts(self):
        def lines(*a):
            return len([x for x in sh(*a).splitlines() if x.strip()])
        cni = 0
        for root, _, files in os.walk(os.path.join(self.data, "cni")):
            cni += len([f for f in files if f.count(".") == 3])  # host-local: one file per allocated IPv4
        pid = self.proc.pid
        rss = 0
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
        return {
            "containers": lines("ctr", "-n", self.ns, "containers", "ls", "-q"),
            "tasks": lines("ctr", "-n", self.ns, "tasks", "ls", "-q"),
            "snapshots": max(0, lines("ctr", "-n", self.ns, "snapshots", "ls") - 1),
            "leases": lines("ctr", "-n", self.ns, "leases", "ls", "-q"),
            "netns": len([n for n in sh("ip", "netns", "list").split() if n.startswith(f"knap-{self.bridge}+")]),
            "veths": lines("ip", "-o", "link", "show", "master", self.bridge),
            "host_local_ips": cni,
            "knapd_fds": len(os.listdir(f"/proc/{pid}/fd")),
            "knapd_rss_kib": rss,
        }

    def close(self):
        """Stops knapd and removes everything of this run, even after a failure: knapd leaves pods running
        when it stops (it adopts them at start), so the namespace's tasks, containers, snapshots, leases and
        image, the netns, the bridge and the pods' mounts go here."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        ctr = ("ctr", "-n", self.ns)
        for t in sh(*ctr, "tasks", "ls", "-q").split():
            sh(*ctr, "tasks", "kill", "-s", "SIGKILL", t)
        time.sleep(0.5)
        for t in sh(*ctr, "tasks", "ls", "-q").split():
            sh(*ctr, "tasks", "rm", "-f", t)
        for c in sh(*ctr, "containers", "ls", "-q").split():
            sh(*ctr, "containers", "rm", c)
        for lease in sh(*ctr, "leases", "ls", "-q").split():
            sh(*ctr, "leases", "rm", lease)
        sh(*ctr, "images", "rm", IMAGE)
        for n in sh("ip", "netns", "list").split():
            if n.startswith(f"knap-{self.bridge}+"):
                sh("ip", "netns", "del", n)
        sh("ip", "link", "del", self.bridge)
        with open("/proc/mounts") as f:
            mounts = [line.split()[1] for line in f if line.split()[1].startswith(self.work + "/")]
        for m in sorted(mounts, reverse=True):
            sh("umount", "-l", m)
        shutil.rmtree(self.work, ignore_errors=True)
        for _ in range(10):  # the snapshots go with containerd's GC, after the image and containers
            if not sh(*ctr, "snapshots", "ls").splitlines()[1:]:
                break
            time.sleep(0.5)
        sh("ctr", "namespaces", "rm", self.ns)


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("KNAP_BUILD_DIR", "build"))
    ap.add_argument("--duration", type=float, default=1800)
    ap.add_argument("--report-every", type=float, default=300, help="seconds between RSS/fd reports")
    args = ap.parse_args(argv)
    require_containerd()
    s = Soak(args.build, (os.getpid() + 11) % 150 + 60)
    print(f"soak: load {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} {os.getloadavg()[2]:.1f} at start",
          flush=True)
    try:
        s.start()
        s.cycle("warmup")
        time.sleep(2)
        before = s.counts()
        print("soak: after the warm-up, KiB: " + " ".join(f"{k} {v}" for k, v in s.memory().items()), flush=True)
        t0, n, report = time.time(), 0, time.time() + args.report_every
        first_mark = None
        while time.time() - t0 < args.duration:
            s.cycle(f"churn-{n % 3}")
            n += 1
            if time.time() >= report:  # the trend, not only the end points
                c = s.counts()
                mem = " ".join(f"{k} {v}" for k, v in s.memory().items())
                print(f"soak: {time.time() - t0:5.0f}s {n} cycles, knapd RSS {c['knapd_rss_kib']} KiB, "
                      f"{c['knapd_fds']} fds, load {os.getloadavg()[0]:.1f}; KiB: {mem}", flush=True)
                report += args.report_every
                if first_mark is None:
                    first_mark = (n, c["knapd_rss_kib"])
        time.sleep(3)
        after = s.counts()
        print("soak: at the end, KiB: " + " ".join(f"{k} {v}" for k, v in s.memory().items()))
        print(f"soak: {n} cycles (create, serve, scale to zero, serve from zero, delete) in "
              f"{time.time() - t0:.0f}s; load {os.getloadavg()[0]:.1f} {os.getloadavg()[1]:.1f} "
              f"{os.getloadavg()[2]:.1f} at the end")
        leaked = []
        for k in before:
            print(f"  {k:16s} before {before[k]:8d}  after {after[k]:8d}")
            if k != "knapd_rss_kib" and after[k] > before[k]:
                leaked.append(k)
        print(f"  RSS growth: {after['knapd_rss_kib'] - before['knapd_rss_kib']} KiB")
        if first_mark and n > first_mark[0]:
            # Caches fill during the first period (SQLite's page cache up to its 2 MiB, the Event
            # recorder's 10-minute dedupe map): the growth after it is what a leak would show.
            grown = after["knapd_rss_kib"] - first_mark[1]
            print(f"  RSS growth after the first report ({first_mark[0]} cycles): {grown} KiB over "
                  f"{n - first_mark[0]} cycles ({grown / (n - first_mark[0]):.1f} KiB per cycle)")
        if leaked:
            print("LEAKED: " + ", ".join(leaked))
            return 1
        print("leaked: nothing")
        return 0
    finally:
        s.close()


if __name__ == "__main__":
    sys.exit(main())
