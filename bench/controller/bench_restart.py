#!/usr/bin/env python3
"""Controller restart cost: N Services, restart knapd, time to fully reconciled.

Starts its own knapd (control plane only, --runtime none: every Revision is
Ready at zero replicas, so this measures the controller, the store and the
API, not pods), creates N Services and waits until all are Ready, then
restarts knapd (SIGTERM, start again) and measures:

  - restart -> fully reconciled: from starting the process to the
    controller's log line "resync of K objects reconciled" (every object
    reconciled once, queue empty);
  - a Service created as soon as the API answers after the restart (while
    the resync runs): create -> Ready;
  - knapd CPU seconds during the restart, and store writes it made
    (resourceVersion delta, excluding the new Service's own objects);
  - reference, same run: a Service created on the idle knapd before the
    restart, create -> Ready.

    python3 bench/controller/bench_restart.py [--build build] [--count 1000] [--restarts 3]

--restarts N restarts the knapd holding the Services N times after one
creation (a column per restart, with the load average at each); --work DIR
keeps the data there and reuses it when it already holds the Services (to
profile restarts without waiting for a creation storm each time).
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
import tempfile
import threading
import time
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "tests", "e2e"))
from ports import free_port  # noqa: E402

API = "/apis/serving.knative.dev/v1/namespaces/default/services"


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Knapd:
    def __init__(self, build, work, prefix=()):
        self.build, self.work, self.prefix = build, work, list(prefix)
        self.port = free_port()
        self.cfg = os.path.join(work, "config.yaml")
        with open(self.cfg, "w") as f:
            f.write(f"knap:\n  data-dir: {work}/data\n  api-listen: 127.0.0.1:{self.port}\n"
                    f"  router-listen: 127.0.0.1:{free_port()}\n  metrics-listen: 127.0.0.1:0\n")
        self.log_path = os.path.join(work, "knapd.log")
        self.proc = None
        self.conn = None

    def connect(self):
        """HTTPS as knapd's admin (CA and client certificate from data/pki); OSError until they exist."""
        pki = os.path.join(self.work, "data", "pki")
        ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
        ctx.load_cert_chain(os.path.join(pki, "admin.crt"), os.path.join(pki, "admin.key"))
        return http.client.HTTPSConnection("127.0.0.1", self.port, timeout=60, context=ctx)

    def start(self):
        self.log_offset = os.path.getsize(self.log_path) if os.path.exists(self.log_path) else 0
        self.started = time.time()
        self.proc = subprocess.Popen(self.prefix + [os.path.join(self.build, "daemon", "knapd"), "--config", self.cfg,
                                      "--runtime", "none", "--log-level", "info"],
                                     stderr=open(self.log_path, "a"), stdout=subprocess.DEVNULL)
        while True:
            try:
                self.conn = self.connect()
                self.conn.request("GET", "/readyz")
                if self.conn.getresponse().read() is not None:
                    return time.time()
            except OSError:
                time.sleep(0.005)
            if self.proc.poll() is not None:
                raise SystemExit("knapd exited:\n" + open(self.log_path).read()[-3000:])

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)

    def req(self, method, path, body=None):
        for attempt in range(3):
            try:
                self.conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
                r = self.conn.getresponse()
                return r.status, r.read()
            except (OSError, http.client.HTTPException):
                self.conn = self.connect()
        raise SystemExit(f"{method} {path} failed")

    def rv(self):
        code, body = self.req("GET", API + "?limit=1")
        return int(json.loads(body)["metadata"]["resourceVersion"])

    def log_since_start(self):
        with open(self.log_path) as f:
            f.seek(self.log_offset)
            return f.read()


def doc(name):
    return json.dumps({"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": name},
                       "spec": {"template": {"spec": {"containers": [{"image": "dev.local/bench:v1"}]}}}})


def create_all(k, names, connections):
    """Creates the Services over `connections` concurrent API connections (one was too slow for 1,000 on a
    loaded machine: each create waits for its store commit)."""
    errors = []

    def worker(part):
        conn = k.connect()
        for name in part:
            for attempt in range(3):
                try:
                    conn.request("POST", API, body=doc(name), headers={"Content-Type": "application/json"})
                    r = conn.getresponse()
                    body = r.read()
                    if r.status != 201:
                        errors.append((name, r.status, body[:200]))
                    break
                except (OSError, http.client.HTTPException):
                    conn = k.connect()
            else:
                errors.append((name, "connection failed"))
        conn.close()

    threads = [threading.Thread(target=worker, args=(names[i::connections],)) for i in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(f"{len(errors)} creates failed, e.g. {errors[:3]}")


def is_ready(k, name):
    code, body = k.req("GET", f"{API}/{name}")
    if code != 200:
        return False
    for c in json.loads(body).get("status", {}).get("conditions", []):
        if c["type"] == "Ready":
            return c["status"] == "True"
    return False


def create_and_time(k, name, timeout=120):
    t0 = time.time()
    code, body = k.req("POST", API, doc(name))
    assert code == 201, (code, body)
    while not is_ready(k, name):
        if time.time() - t0 > timeout:
            raise SystemExit(f"{name} not Ready after {timeout}s")
        time.sleep(0.002)
    return time.time() - t0


def measure_restart(k):
    """Restarts knapd (SIGTERM, start again) and measures it; returns a dict of figures."""
    k.stop()
    k.start()
    api_up = time.time() - k.started
    rv0 = k.rv()
    during = create_and_time(k, f"during-restart-{int(time.time() * 1000)}")
    rv_after_new = k.rv()
    deadline = time.time() + 120
    done = None
    while done is None and time.time() < deadline:
        done = re.search(r"resync of (\d+) objects reconciled in (\d+)ms", k.log_since_start())
        if done is None:
            time.sleep(0.01)
    if done is None:
        raise SystemExit("no resync line in the knapd log:\n" + k.log_since_start()[-3000:])
    seen = time.time() - k.started  # upper bound (polling); the log line has the controller's own figure
    cpu = cpu_seconds(k.proc.pid)
    time.sleep(2)
    rv_end = k.rv()
    return {"api_up": api_up, "objects": int(done.group(1)), "resync_ms": int(done.group(2)), "seen": seen,
            "during_ms": during * 1000, "cpu": cpu, "writes_before": rv_after_new - rv0,
            "writes_after": rv_end - rv_after_new}


def load():
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def count_services(k):
    code, body = k.req("GET", API)
    return len(json.loads(body)["items"]) if code == 200 else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("KNAP_BUILD_DIR", "build"))
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--connections", type=int, default=4, help="concurrent API connections creating the Services")
    ap.add_argument("--restarts", type=int, default=1, help="restarts of the knapd holding the Services")
    ap.add_argument("--work", help="keep the data dirs here (reused when they already hold the Services)")
    ap.add_argument("--prefix", default="", help="command knapd runs under for the restarts, e.g. "
                    "'perf record -g -o /tmp/restart.perf --' (the CPU figure is then the wrapper's)")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="knap-bench-restart-")
    ref_work = os.path.join(work, "empty")
    big_work = os.path.join(work, "big")
    for d in (ref_work, big_work):
        if args.work and os.path.isdir(d) and d == ref_work:
            shutil.rmtree(d)
        os.makedirs(d, exist_ok=True)
    ref, k = Knapd(args.build, ref_work), Knapd(args.build, big_work)
    try:
        print(f"load average {load()} at start", flush=True)
        # Reference, same run: an empty knapd, restarted the same way.
        ref.start()
        ref_idle = create_and_time(ref, "reference")
        r0 = measure_restart(ref)
        ref.stop()

        k.start()
        have = count_services(k)
        if have >= args.count:
            print(f"{have} Services already in {big_work}", flush=True)
        else:
            t0 = time.time()
            create_all(k, [f"svc-{i:04d}" for i in range(args.count)], args.connections)
            created = time.time() - t0
            pending = {f"svc-{i:04d}" for i in range(args.count)}
            while pending:
                code, body = k.req("GET", API)
                for item in json.loads(body)["items"]:
                    if any(c["type"] == "Ready" and c["status"] == "True"
                           for c in item.get("status", {}).get("conditions", [])):
                        pending.discard(item["metadata"]["name"])
                if time.time() - t0 > 900:
                    raise SystemExit(f"{len(pending)} Services not Ready after 900s")
                time.sleep(0.5)
            all_ready = time.time() - t0
            print(f"{args.count} Services created in {created:.1f}s over {args.connections} connections, all "
                  f"Ready {all_ready:.1f}s after the first create (load {load()})", flush=True)
        time.sleep(1)
        idle = create_and_time(k, f"idle-{int(time.time() * 1000)}")
        k.prefix = args.prefix.split()
        runs = []
        for i in range(args.restarts):
            runs.append(measure_restart(k))
            runs[-1]["load"] = os.getloadavg()[0]
            print(f"restart {i + 1}: reconciled seen <= {runs[-1]['seen']:.2f}s, Service created during it "
                  f"Ready in {runs[-1]['during_ms']:.0f}ms (load {load()})", flush=True)
        print(f"load average {load()} at the end")
        head = f"{'':44s} {'empty knapd':>14s}"
        for i in range(len(runs)):
            head += f" {f'{args.count} Svcs #{i + 1}' if len(runs) > 1 else f'{args.count} Services':>16s}"
        print(head)
        rows = [("create -> Ready, idle knapd (ms)", ref_idle * 1000, [idle * 1000] + [None] * (len(runs) - 1)),
                ("load average (1 min) at the restart", None, [r["load"] for r in runs])]
        for name, key in [("restart: API answering after (s)", "api_up"),
                          ("restart: objects in the start-up resync", "objects"),
                          ("restart: resync reconciled in (ms, controller)", "resync_ms"),
                          ("restart: reconciled seen <= (s after exec)", "seen"),
                          ("restart: Service created during it -> Ready (ms)", "during_ms"),
                          ("restart: knapd CPU exec -> reconciled (s)", "cpu"),
                          ("restart: store writes while coming up", "writes_before"),
                          ("restart: other store writes after", "writes_after")]:
            rows.append((name, r0[key], [r[key] for r in runs]))
        for name, a, bs in rows:
            fmt = (lambda v: "" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v))
            print(f"{name:44s} {fmt(a):>14s}" + "".join(f" {fmt(b):>16s}" for b in bs))
    finally:
        for x in (ref, k):
            if x.proc and x.proc.poll() is None:
                x.proc.kill()
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
