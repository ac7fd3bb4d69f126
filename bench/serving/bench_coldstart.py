#!/usr/bin/env python3
"""Cold start benchmark (root): request at zero pods -> first response byte,
p50/p99 over N trials, for each way a revision can wake, in one knapd run:

  image cached, no pool   knap.dev/warm-pool: "0"  (netns, container, task, start, probe)
  warm pool (created)     knap.dev/warm-pool: "1", knap.dev/warm-pool-mode: created  (start, probe)
  frozen pool             knap.dev/warm-pool: "1", knap.dev/warm-pool-mode: frozen   (thaw)

next to `ctr run --rm` of the same image (process start and exit, no network),
measured in the same run. Also prints the memory one warm pod holds in each
mode (knap_warm_pool_memory_bytes) and checks that every waking response
carries the expected `K-Knap-Cold-Start: path=...` header.

    python3 bench/serving/bench_coldstart.py [--build build] [--trials 20] [--boot-ms 0]

--boot-ms N makes the test app sleep N ms before it listens (an app with a
slow start-up: JVM, Python imports); frozen pods have paid that already.

With `pulled` in --cases (the default) it also measures the image that is
not on the machine yet: Debian's docker-registry on loopback (TLS from a test
CA, htpasswd auth; tests/e2e/registry.py) holds the test app; each trial
removes the image from containerd, applies a Service naming it and times
apply -> first byte of the first 200 (digest resolution, pull, unpack, pod
start, probe), next to `ctr images pull` + `ctr run --rm` of the same image
from the same registry in the same run. With pre-pulling a revision cannot be
at zero without its image, so this is the cold start a user meets on a
first deploy.
"""
import argparse
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import conftest  # noqa: E402  (the e2e harness starts and drives knapd)
from pods import require_containerd  # noqa: E402

IMAGE = "dev.local/knap-bench-cold:v1"
NS = "knap-bench-cold"
CASES = [  # (service, label, annotations, expected header path)
    ("nopool", "image cached, no pool", {"knap.dev/warm-pool": "0"}, "cached"),
    ("created", "warm pool (created)", {"knap.dev/warm-pool": "1", "knap.dev/warm-pool-mode": "created"}, "warm"),
    ("frozen", "frozen pool", {"knap.dev/warm-pool": "1", "knap.dev/warm-pool-mode": "frozen"}, "frozen"),
]


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def first_byte(port, host):
    """Seconds from sending the request to the response header, and the cold-start header."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.connect()
    t0 = time.perf_counter()
    c.request("GET", "/", headers={"Host": host})
    r = c.getresponse()
    t = time.perf_counter() - t0
    r.read()
    c.close()
    return r.status, t, r.getheader("K-Knap-Cold-Start") or ""


def metrics(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


def metric(text, name, labels):
    m = re.search(re.escape(name + "{" + labels + "}") + r" (\S+)", text)
    return float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("KNAP_BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--boot-ms", type=int, default=0)
    ap.add_argument("--cases", default="nopool,created,frozen,pulled", help="comma-separated subset of the cases")
    ap.add_argument("--hold-on-failure", type=int, default=0, help="seconds to keep knapd up after a failure")
    args = ap.parse_args()
    require_containerd()
    global CASES
    want_pulled = "pulled" in args.cases.split(",")
    CASES = [c for c in CASES if c[0] in args.cases.split(",")]
    build = os.path.abspath(args.build)
    conftest.BUILD, conftest.KNAPD, conftest.KNAP = build, f"{build}/daemon/knapd", f"{build}/tools/knap"
    knap = f"{build}/tools/knap"
    work = tempfile.mkdtemp(prefix="knap-bench-cold-")
    mport = conftest.free_port()
    reg = None
    reg_lines = ""
    if want_pulled:
        import registry as regmod  # noqa: E402  (tests/e2e/registry.py)
        regmod.BUILD = build
        regmod.MKIMAGE = f"{build}/tools/mkimage/knap-mkimage"
        regmod.TESTAPP = f"{build}/tests/apps/knap-testapp"
        reg = regmod.Registry(os.path.join(work, "registry"))
        reg.start()
        reg.push(regmod.build_testapp_image(os.path.join(work, "pull.tar"), name="bench/app:v1"), "bench/app:v1")
        reg_lines = reg.knap_config()
    k = conftest.Knapd(work, runtime="containerd", extra_config=(reg_lines +
        f"  containerd-namespace: {NS}\n  bridge-name: knapcold0\n  pod-subnet: 10.220.0.0/24\n"
        f"  metrics-listen: 127.0.0.1:{mport}\n  warm-pool-size: \"0\"\n"
        "autoscaler:\n  stable-window: 6s\n  panic-window-percentage: \"20\"\n  scale-to-zero-grace-period: 1s\n"))
    tar = os.path.join(work, "app.tar")
    subprocess.run([f"{build}/tools/mkimage/knap-mkimage", "--out", tar, "--name", IMAGE, "--file",
                    f"{build}/tests/apps/knap-testapp:/app/knap-testapp", "--entrypoint", "/app/knap-testapp",
                    "--user", "app", "--workdir", "/app", "--expose", "8080"], check=True, capture_output=True)
    subprocess.run([knap, "image", "import", tar, "--namespace", NS], check=True, capture_output=True)
    try:
        k.start(timeout=60)
        container = {"image": IMAGE}
        if args.boot_ms:
            container["args"] = ["--listen-delay-ms", str(args.boot_ms)]
        for name, _, ann, _ in CASES:
            svc = {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": name},
                   "spec": {"template": {"metadata": {"annotations": dict(ann, **{
                       "autoscaling.knative.dev/min-scale": "0"})}, "spec": {"containers": [container]}}}}
            subprocess.run([knap, "--kubeconfig", k.kubeconfig, "apply", "-f", "-", "--wait", "--timeout", "120"],
                           input=json.dumps(svc), text=True, check=True, capture_output=True)

        def quiet(name, ann):
            """At zero ready pods, and a full pool where there is one."""
            st = k.get_json(f"/apis/serving.knative.dev/v1/namespaces/default/revisions/{name}-00001")
            if st.get("status", {}).get("actualReplicas", 1) != 0:
                return False
            want = int(ann.get("knap.dev/warm-pool", "0"))
            if want == 0:
                return True
            mode = ann["knap.dev/warm-pool-mode"]
            m = metrics(mport)
            return (metric(m, "knap_warm_pool_pods", f'revision="default/{name}-00001",mode="{mode}"') == want and
                    (metric(m, "knap_warm_pool_memory_bytes", f'revision="default/{name}-00001"') or 0) > 0)

        times = {name: [] for name, *_ in CASES}
        paths = {name: set() for name, *_ in CASES}
        memory = {name: [] for name, *_ in CASES}
        def refilled(name, ann):
            want = int(ann.get("knap.dev/warm-pool", "0"))
            if want == 0:
                return True
            m = metrics(mport)
            return metric(m, "knap_warm_pool_pods",
                          f'revision="default/{name}-00001",mode="{ann["knap.dev/warm-pool-mode"]}"') == want

        for trial in range(args.trials):
            # Every revision at zero with a full pool: nothing else starts or
            # stops while one is woken. The order rotates each trial.
            k.wait_for(lambda: all(quiet(n, a) for n, _, a, _ in CASES), timeout=240, what="all at zero")
            time.sleep(1.0)
            for i in range(len(CASES)):
                name, _, ann, _ = CASES[(trial + i) % len(CASES)]
                m = metrics(mport)
                mem = metric(m, "knap_warm_pool_memory_bytes", f'revision="default/{name}-00001"')
                if mem:
                    memory[name].append(mem / int(ann["knap.dev/warm-pool"]))
                try:
                    code, t, header = first_byte(k.router_port, f"{name}.default.localhost")
                except OSError:
                    print(f"!! {name}: no answer; knapd log: {k.log_path}", file=sys.stderr, flush=True)
                    time.sleep(args.hold_on_failure)
                    raise
                assert code == 200, (name, code)
                times[name].append(t)
                paths[name].add(header.split(";")[0])
                # The woken pool refills before the next one is measured.
                k.wait_for(lambda: refilled(name, ann), timeout=60, what=f"{name} pool refilled")
                time.sleep(1.0)
            print(f"trial {trial + 1}/{args.trials}: " +
                  "  ".join(f"{n} {times[n][-1] * 1000:.0f} ms" for n, *_ in CASES), file=sys.stderr, flush=True)

        pulled, pulled_ref = [], []
        if reg is not None:
            pulled, pulled_ref = bench_pulled(k, knap, reg, args.trials)

        ctr = []
        for i in range(args.trials):
            t0 = time.perf_counter()
            subprocess.run(["ctr", "-n", NS, "run", "--rm", IMAGE, f"knap-bench-cold-ctr-{i}", "/app/knap-testapp",
                            "--fail-start"], capture_output=True)
            ctr.append(time.perf_counter() - t0)

        boot = f", app boot {args.boot_ms} ms" if args.boot_ms else ""
        print(f"cold start: request at zero -> first byte, {args.trials} trials{boot} (seconds)")
        print(f"{'path':34} {'p50':>8} {'p99':>8}  header")
        for name, label, _, want in CASES:
            got = ",".join(sorted(paths[name]))
            flag = "" if paths[name] == {f"path={want}"} else "   (!! expected path=" + want + ")"
            print(f"{label:34} {pct(times[name], 50):8.3f} {pct(times[name], 99):8.3f}  {got}{flag}")
        print(f"{'ctr run --rm (start and exit)':34} {pct(ctr, 50):8.3f} {pct(ctr, 99):8.3f}")
        if pulled:
            print(f"{'image not yet pulled (apply->byte)':34} {pct(pulled, 50):8.3f} {pct(pulled, 99):8.3f}")
            print(f"{'ctr images pull + ctr run --rm':34} {pct(pulled_ref, 50):8.3f} {pct(pulled_ref, 99):8.3f}")
        for name, label, _, _ in CASES:
            if memory[name]:
                print(f"memory held per warm pod, {label}: {pct(memory[name], 50) / 2**20:.2f} MiB (p50)")
    finally:
        if reg is not None:
            reg.stop()
        subprocess.run([knap, "--kubeconfig", k.kubeconfig, "delete", "service"] + [n for n, *_ in CASES], capture_output=True)
        time.sleep(3)
        k.stop()
        subprocess.run(["ctr", "-n", NS, "images", "rm", IMAGE], capture_output=True)
        shutil.copy(k.log_path, "/tmp/knap-bench-cold-knapd.log")  # for a look after a failure
        shutil.rmtree(work, ignore_errors=True)


def drop_registry_images(host):
    """Removes every image of the registry at `host` from knap's containerd namespace (content goes with it)."""
    out = subprocess.run(["ctr", "-n", NS, "images", "ls", "-q"], capture_output=True, text=True).stdout.split()
    names = [n for n in out if n.startswith(host + "/")]
    if names:
        subprocess.run(["ctr", "-n", NS, "images", "rm", "--sync"] + names, capture_output=True)
    left = subprocess.run(["ctr", "-n", NS, "images", "ls", "-q"], capture_output=True, text=True).stdout.split()
    assert not [n for n in left if n.startswith(host + "/")], left


def bench_pulled(k, knap, reg, trials):
    """Apply -> first 200 for an image that is not on the machine; and ctr pull + run of it."""
    image = reg.image("bench/app:v1")
    host = "pulled.default.localhost"
    times = []
    for trial in range(trials):
        drop_registry_images(reg.host)
        svc = {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": "pulled"},
               "spec": {"template": {"spec": {"containers": [{"image": image}]}}}}
        t0 = time.perf_counter()
        subprocess.run([knap, "--kubeconfig", k.kubeconfig, "apply", "-f", "-"], input=json.dumps(svc), text=True,
                       check=True, capture_output=True)
        while True:
            try:
                code, _, _ = first_byte(k.router_port, host)
            except OSError:
                code = 0
            if code == 200:
                break
            if time.perf_counter() - t0 > 120:
                raise SystemExit(f"pulled: no 200 within 120 s; knapd log: {k.log_path}")
            time.sleep(0.005)
        times.append(time.perf_counter() - t0)
        subprocess.run([knap, "--kubeconfig", k.kubeconfig, "delete", "service", "pulled"], check=True, capture_output=True)
        k.wait_for(lambda: k.http("GET", "/apis/serving.knative.dev/v1/namespaces/default/revisions/pulled-00001")[0]
                   == 404, timeout=60, what="pulled revision gone")
        k.wait_for(lambda: not [l for l in subprocess.run(["ctr", "-n", NS, "containers", "ls", "-q"],
                                                         capture_output=True, text=True).stdout.split()
                                if "pulled-00001" in l], timeout=60, what="pulled pods gone")
        print(f"pulled trial {trial + 1}/{trials}: {times[-1] * 1000:.0f} ms", file=sys.stderr, flush=True)
    # ctr treats 127.0.0.1 as a plain-HTTP registry unless a hosts.toml says otherwise.
    hosts_dir = os.path.join(os.path.dirname(reg.ca_file()), "ctr-hosts")
    os.makedirs(os.path.join(hosts_dir, reg.host), exist_ok=True)
    with open(os.path.join(hosts_dir, reg.host, "hosts.toml"), "w") as f:
        f.write(f'server = "https://{reg.host}"\n[host."https://{reg.host}"]\n'
                f'  capabilities = ["pull", "resolve"]\n  ca = "{reg.ca_file()}"\n')
    ref = []
    for i in range(trials):
        drop_registry_images(reg.host)
        t0 = time.perf_counter()
        p = subprocess.run(["ctr", "-n", NS, "images", "pull", "--user", f"{reg.user}:{reg.password}",
                        "--hosts-dir", hosts_dir, image], capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit("ctr images pull failed: " + p.stderr[-2000:])
        subprocess.run(["ctr", "-n", NS, "run", "--rm", image, f"knap-bench-pull-ctr-{i}", "/app/knap-testapp",
                        "--fail-start"], capture_output=True)
        ref.append(time.perf_counter() - t0)
    drop_registry_images(reg.host)
    return times, ref


if __name__ == "__main__":
    main()
