"""Shared pieces of the Knative conformance suites (test_conformance_*.py).

knative/serving's test/conformance/{api/v1,runtime} ported to knap: one knapd
per module on real containerd/runc/CNI, with its own containerd namespace,
bridge and subnet. Knative's test images are not available; knap-testapp does
what they do (tests/apps/knap-testapp.cc), packed by knap-mkimage into a few
images that differ the way Knative's do:

  runtime       the "runtime" image: USER 65532 (distroless nonroot)
  pizza1/pizza2 "pizzaplanetv1/v2": $TEXT answered on /text
  hello         "helloworld": the hello-world text on /text
  shell         a busybox-like image: /bin/sh (Debian's dash and its libc),
                /www/index.html, the test app as entrypoint (exec probes)
"""
import concurrent.futures
import http.client
import json
import os
import shutil
import subprocess
import tempfile
import time
import uuid

import pytest

from conftest import BUILD, KNAP, Knapd
from pods import containerd_ok

TESTAPP = os.path.join(BUILD, "tests", "apps", "knap-testapp")
MKIMAGE = os.path.join(BUILD, "tools", "mkimage", "knap-mkimage")
HELLO = "Hello World! How about some tasty noodles?"
PIZZA1 = "What a spaceport!"
PIZZA2 = "Re-energize yourself with a slice of pepperoni!"

IMAGES = {
    "runtime": "dev.local/knap-conformance/runtime:v1",
    "pizza1": "dev.local/knap-conformance/pizzaplanet:v1",
    "pizza2": "dev.local/knap-conformance/pizzaplanet:v2",
    "hello": "dev.local/knap-conformance/helloworld:v1",
    "shell": "dev.local/knap-conformance/shell:v1",
    # knap's own (issue 10): the runtime app in images whose /tmp is 0755 or absent.
    "tmp755": "dev.local/knap-conformance/tmp755:v1",
    "notmp": "dev.local/knap-conformance/notmp:v1",
}

API = "/apis/serving.knative.dev/v1/namespaces/default"


skip_without_pods = pytest.mark.skipif(
    not containerd_ok() or not os.path.exists(TESTAPP) or not os.path.exists(MKIMAGE),
    reason="!!! Knative conformance e2e SKIPPED: need root, a running containerd and the built test app !!!")


def _mkimage(workdir, key, *args):
    tar = os.path.join(workdir, key + ".tar")
    subprocess.run([MKIMAGE, "--out", tar, "--name", IMAGES[key], *args], check=True, capture_output=True)
    return tar


def build_images(workdir):
    app = f"{TESTAPP}:/ko-app/knap-testapp"
    common = ["--file", app, "--entrypoint", "/ko-app/knap-testapp", "--expose", "8080"]
    tars = [
        _mkimage(workdir, "runtime", *common, "--user", "65532"),
        _mkimage(workdir, "pizza1", *common, "--user", "app", "--env", "TEXT=" + PIZZA1),
        _mkimage(workdir, "pizza2", *common, "--user", "app", "--env", "TEXT=" + PIZZA2),
        _mkimage(workdir, "hello", *common, "--user", "app", "--env", "TEXT=" + HELLO),
    ]
    index = os.path.join(workdir, "index.html")
    with open(index, "w") as f:
        f.write("<h1>knap</h1>\n")
    # A file in /tmp makes mkimage create /tmp as a plain parent directory
    # (0755) instead of its 1777 base-file /tmp; --no-base-files leaves /tmp out.
    tars.append(_mkimage(workdir, "tmp755", *common, "--user", "65532", "--file", f"{index}:/tmp/index.html:0644"))
    tars.append(_mkimage(workdir, "notmp", *common, "--user", "65532", "--no-base-files"))
    tars.append(_mkimage(workdir, "shell", *common, "--user", "app",
                         "--file", "/bin/dash:/bin/sh:0755",
                         "--file", "/lib/x86_64-linux-gnu/libc.so.6:/lib/x86_64-linux-gnu/libc.so.6:0755",
                         "--file", "/lib64/ld-linux-x86-64.so.2:/lib64/ld-linux-x86-64.so.2:0755",
                         "--file", f"{index}:/www/index.html:0644"))
    return tars


class Cluster:
    """One knapd on containerd for a whole test module, plus Knative-shaped helpers."""

    def __init__(self, subnet_prefix, bridge_prefix):
        self.workdir = tempfile.mkdtemp(prefix="knap-conf-")
        tag = os.getpid() % 150 + 60
        self.ns = f"knap-conf-{uuid.uuid4().hex[:8]}"
        self.bridge = f"{bridge_prefix}{tag}"
        self.k = Knapd(self.workdir, runtime="containerd", extra_config=(
            f"  containerd-namespace: {self.ns}\n"
            f"  bridge-name: {self.bridge}\n"
            f"  pod-subnet: {subnet_prefix}.{tag}.0/24\n"
            f"  metrics-listen: 127.0.0.1:0\n"
            # Knative's defaults otherwise (60 s stable window): no pod scales
            # to zero in the middle of a test. No warm pool: Knative has none,
            # and it would double the pods the suite starts.
            "  warm-pool-size: 0\n"))
        for tar in build_images(self.workdir):
            subprocess.run([KNAP, "image", "import", tar, "--namespace", self.ns], check=True, capture_output=True)
        self.k.start(timeout=60)
        self.precreated = {}

    def close(self):
        try:
            for svc in self.list("services"):
                self.delete("services", svc["metadata"]["name"])
            for kind in ("configurations", "routes"):
                for o in self.list(kind):
                    self.delete(kind, o["metadata"]["name"])
            deadline = time.time() + 20
            while time.time() < deadline and subprocess.run(
                    ["ctr", "-n", self.ns, "tasks", "ls", "-q"], capture_output=True, text=True).stdout.strip():
                time.sleep(0.5)
        finally:
            self.k.stop()
            from registry import cleanup_namespace
            cleanup_namespace(self.ns)
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
            shutil.rmtree(self.workdir, ignore_errors=True)

    # --- API -------------------------------------------------------------
    def create(self, kind, doc):
        """POST; returns (code, object or Status)."""
        code, body, _ = self.k.http("POST", f"{API}/{kind}", json.dumps(doc))
        return code, json.loads(body) if body else {}

    def must_create(self, kind, doc):
        code, obj = self.create(kind, doc)
        assert code == 201, f"create {kind} {doc['metadata']}: {code} {obj}"
        return obj

    def get(self, kind, name):
        code, body, _ = self.k.http("GET", f"{API}/{kind}/{name}")
        return json.loads(body) if code == 200 else None

    def list(self, kind, selector=None):
        path = f"{API}/{kind}" + (f"?labelSelector={selector}" if selector else "")
        code, body, _ = self.k.http("GET", path)
        assert code == 200, body
        return json.loads(body)["items"]

    def delete(self, kind, name):
        return self.k.http("DELETE", f"{API}/{kind}/{name}")[0]

    def update(self, kind, name, mutate):
        """GET, mutate(obj), PUT; retried on conflicts. Returns (code, body)."""
        for _ in range(10):
            obj = self.get(kind, name)
            mutate(obj)
            code, body, _ = self.k.http("PUT", f"{API}/{kind}/{name}", json.dumps(obj))
            if code != 409:
                return code, json.loads(body) if body else {}
        raise AssertionError(f"update {kind}/{name}: conflicts")

    def must_update(self, kind, name, mutate):
        code, obj = self.update(kind, name, mutate)
        assert code == 200, f"update {kind}/{name}: {code} {obj}"
        return obj

    def wait(self, kind, name, pred, timeout=90, what=None):
        deadline = time.time() + timeout
        obj = None
        while time.time() < deadline:
            obj = self.get(kind, name)
            if obj is not None and pred(obj):
                return obj
            time.sleep(0.2)
        raise AssertionError(f"timed out waiting for {what or kind + '/' + name}; last:\n"
                             f"{json.dumps(obj, indent=1)[-4000:]}\n--- knapd log ---\n{self.k.log()[-3000:]}")

    def wait_ready(self, kind, name, timeout=90):
        return self.wait(kind, name, is_ready, timeout, f"{kind}/{name} Ready")

    def wait_failed(self, kind, name, timeout=90):
        return self.wait(kind, name, lambda o: cond(o, "Ready").get("status") == "False", timeout,
                         f"{kind}/{name} Ready=False")

    def precreate(self, docs):
        """Creates Services a module's tests use, all at once when the module starts (they deploy
        concurrently); create_service_ready() then only waits for them."""
        for doc in docs:
            self.must_create("services", doc)
            self.precreated[doc["metadata"]["name"]] = json.dumps(doc, sort_keys=True)

    def create_service_ready(self, doc, timeout=90):
        name = doc["metadata"]["name"]
        if name in self.precreated:
            assert self.precreated.pop(name) == json.dumps(doc, sort_keys=True), f"{name}: not the precreated spec"
        else:
            self.must_create("services", doc)
        return self.wait_ready("services", name, timeout)

    # --- data plane ---------------------------------------------------------
    def request(self, url_or_host, path="/", method="GET", headers=None, timeout=30, body=None):
        """Through knap's router; returns (status, headers dict (lower-case keys), body text)."""
        host = url_or_host.split("://", 1)[-1].split("/", 1)[0]
        c = http.client.HTTPConnection("127.0.0.1", self.k.router_port, timeout=timeout)
        try:
            h = {"Host": host}
            h.update(headers or {})
            c.request(method, path, body=body, headers=h)
            r = c.getresponse()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode(errors="replace")
        finally:
            c.close()

    def wait_endpoint(self, url, path, pred, timeout=60, what="endpoint"):
        """Polls like Knative's WaitForEndpointState; returns the last (status, headers, body)."""
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            try:
                last = self.request(url, path, timeout=10)
                if pred(*last):
                    return last
            except (OSError, http.client.HTTPException) as e:
                last = repr(e)
            time.sleep(0.2)
        raise AssertionError(f"{what} {url}{path}: last {last!r}\n--- knapd log ---\n{self.k.log()[-3000:]}")

    def runtime_info(self, doc, path="/info", headers=None):
        """Knative's fetchRuntimeInfo: the Service Ready, then one 200 from it."""
        svc = self.create_service_ready(doc)
        url = svc["status"]["url"]
        status, _, body = self.wait_endpoint(url, path, lambda s, h, b: s == 200, what="runtime info")
        if headers:
            status, _, body = self.request(url, path, headers=headers)
            assert status == 200, body
        return svc, json.loads(body)


def parallel(*fns):
    """Runs independent callables at once (independent Services deploy concurrently); re-raises the first error."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(fns)) as pool:
        futures = [pool.submit(f) for f in fns]
        return [f.result() for f in futures]


def cond(obj, ctype):
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return c
    return {}


def is_ready(obj):
    st = obj.get("status") or {}
    return st.get("observedGeneration") == obj["metadata"].get("generation") and cond(obj, "Ready").get("status") == "True"


def ksvc(name, image="runtime", container=None, spec=None, template_meta=None, meta=None, traffic=None,
         generate_name=False):
    """A serving.knative.dev/v1 Service like Knative's test helpers build."""
    c = {"image": IMAGES.get(image, image)}
    c.update(container or {})
    s = {"containers": [c]}
    s.update(spec or {})
    md = dict(meta or {})
    if generate_name:
        md["generateName"] = name
    else:
        md["name"] = name
    doc = {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": md,
           "spec": {"template": {"metadata": template_meta or {}, "spec": s}}}
    if traffic is not None:
        doc["spec"]["traffic"] = traffic
    return doc
