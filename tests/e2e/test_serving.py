"""Real pods through the router: containerd, runc, CNI, the activator and the KPA.

Each test runs knapd with --runtime containerd, its own containerd namespace,
bridge and subnet, and the project's own test app packed by knap-mkimage.
Traffic goes only to loopback (the router) and, through it, to the pods on
the test's own bridge.
"""
import concurrent.futures
import http.client
import json
import os
import subprocess
import time

import pytest

from conftest import BUILD, KNAP, Knapd
from pods import containerd_ok  # also imported from here by the other real-pod tests

TESTAPP = os.path.join(BUILD, "tests", "apps", "knap-testapp")
MKIMAGE = os.path.join(BUILD, "tools", "mkimage", "knap-mkimage")
IMAGE = "dev.local/knap-e2e:v1"


def import_testapp(workdir, ns):
    """Builds the test app's OCI image (IMAGE) and imports it into containerd namespace `ns`."""
    tar = os.path.join(workdir, "app.tar")
    subprocess.run([MKIMAGE, "--out", tar, "--name", IMAGE, "--file", f"{TESTAPP}:/app/knap-testapp",
                    "--entrypoint", "/app/knap-testapp", "--user", "app", "--workdir", "/app", "--expose", "8080"],
                   check=True, capture_output=True)
    subprocess.run([KNAP, "image", "import", tar, "--namespace", ns], check=True, capture_output=True)


pytestmark = pytest.mark.skipif(
    not containerd_ok() or not os.path.exists(TESTAPP) or not os.path.exists(MKIMAGE),
    reason="!!! real-pod end-to-end tests SKIPPED: need root, a running containerd and the built test app !!!")


@pytest.fixture
def serving(workdir):
    tag = os.getpid() % 150 + 60
    ns = f"knap-e2e-{tag}"
    k = Knapd(workdir, runtime="containerd", extra_config=(
        f"  containerd-namespace: {ns}\n"
        f"  bridge-name: knape2e{tag}\n"
        f"  pod-subnet: 10.217.{tag}.0/24\n"
        f"  metrics-listen: 127.0.0.1:0\n"
        "autoscaler:\n"
        "  stable-window: 6s\n"
        "  panic-window-percentage: \"20\"\n"
        "  scale-to-zero-grace-period: 1s\n"))
    import_testapp(workdir, ns)
    k.start(timeout=60)
    yield k
    for svc in json.loads(k.http("GET", "/apis/serving.knative.dev/v1/namespaces/default/services")[1])["items"]:
        k.http("DELETE", f"/apis/serving.knative.dev/v1/namespaces/default/services/{svc['metadata']['name']}")
    time.sleep(3)  # let the runner stop and destroy the pods
    k.stop()
    subprocess.run(["ctr", "-n", ns, "images", "rm", IMAGE], capture_output=True)


def service(name, annotations=None, template_name=None, traffic=None, cc=None, timeout=None):
    meta = {"annotations": annotations or {}}
    if template_name:
        meta["name"] = template_name
    spec = {"containers": [{"image": IMAGE}]}
    if cc is not None:
        spec["containerConcurrency"] = cc
    if timeout is not None:
        spec["timeoutSeconds"] = timeout
    doc = {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": name},
           "spec": {"template": {"metadata": meta, "spec": spec}}}
    if traffic:
        doc["spec"]["traffic"] = traffic
    return json.dumps(doc)


def get(k, host, path="/", timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", k.router_port, timeout=timeout)
    c.request("GET", path, headers={"Host": host})
    r = c.getresponse()
    body = r.read().decode()
    c.close()
    return r.status, body


def apply(k, doc):
    p = subprocess.run([KNAP, "--kubeconfig", k.kubeconfig, "apply", "-f", "-", "--wait", "--timeout", "90"], input=doc,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr + k.log()
    return p.stdout


def test_service_answers_through_router_and_splits_traffic(serving):
    k = serving
    apply(k, service("hello", template_name="hello-one"))
    code, body = get(k, "hello.default.localhost")
    assert code == 200, body
    assert json.loads(body)["revision"] == "hello-one"

    apply(k, service("hello", template_name="hello-two", traffic=[
        {"revisionName": "hello-one", "percent": 50},
        {"revisionName": "hello-two", "percent": 50, "tag": "two"}]))
    k.wait_for(lambda: get(k, "two-hello.default.localhost")[0] == 200, timeout=60, what="tag URL")
    for _ in range(5):
        assert json.loads(get(k, "two-hello.default.localhost")[1])["revision"] == "hello-two"
    counts = {"hello-one": 0, "hello-two": 0}
    for _ in range(200):
        code, body = get(k, "hello.default.localhost")
        assert code == 200, body
        counts[json.loads(body)["revision"]] += 1
    assert 70 <= counts["hello-one"] <= 130, counts

    code, body = get(k, "nope.default.localhost")
    assert code == 404 and "nope.default.localhost" in body


def test_scale_to_zero_and_burst_from_zero(serving):
    k = serving
    apply(k, service("sleepy", annotations={"autoscaling.knative.dev/min-scale": "0"}))
    assert get(k, "sleepy.default.localhost")[0] == 200
    api = "/apis/serving.knative.dev/v1/namespaces/default/revisions/sleepy-00001"
    k.wait_for(lambda: k.get_json(api).get("status", {}).get("actualReplicas", 1) == 0, timeout=90,
               what="revision scaled to zero")
    # 500 requests arriving at once at zero pods: all are held, then answered.
    with concurrent.futures.ThreadPoolExecutor(max_workers=500) as pool:
        results = list(pool.map(lambda _: get(k, "sleepy.default.localhost", "/sleep?ms=50"), range(500)))
    codes = [c for c, _ in results]
    assert codes.count(200) == len(codes), {c: codes.count(c) for c in set(codes)}


def test_container_concurrency_one_is_never_exceeded(serving):
    k = serving
    apply(k, service("single", cc=1, annotations={"autoscaling.knative.dev/max-scale": "1"}))
    with concurrent.futures.ThreadPoolExecutor(max_workers=5) as pool:
        results = list(pool.map(lambda _: get(k, "single.default.localhost", "/sleep?ms=100"), range(25)))
    assert all(c == 200 for c, _ in results), results
    code, body = get(k, "single.default.localhost", "/inflight")
    assert code == 200
    assert json.loads(body)["max_inflight"] == 1, body


def test_blue_green_switch_under_load_loses_no_request(serving):
    k = serving
    apply(k, service("bg", template_name="bg-blue"))
    apply(k, service("bg", template_name="bg-green", traffic=[
        {"revisionName": "bg-blue", "percent": 100}, {"revisionName": "bg-green", "percent": 0, "tag": "green"}]))
    assert json.loads(get(k, "green-bg.default.localhost")[1])["revision"] == "bg-green"
    results = []
    stop = time.time() + 8

    def stream():
        while time.time() < stop:
            code, body = get(k, "bg.default.localhost")
            results.append((code, json.loads(body)["revision"] if code == 200 else body))

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(stream) for _ in range(4)]
        time.sleep(3)
        apply(k, service("bg", template_name="bg-green", traffic=[
            {"revisionName": "bg-blue", "percent": 0}, {"revisionName": "bg-green", "percent": 100, "tag": "green"}]))
        for f in futures:
            f.result()
    failures = [r for r in results if r[0] != 200]
    assert not failures, failures[:5]
    revisions = [r[1] for r in results]
    assert "bg-blue" in revisions and revisions[-1] == "bg-green", revisions[-10:]


def test_sustained_load_scales_up_within_max_scale_and_back_down(serving):
    k = serving
    apply(k, service("busy", annotations={"autoscaling.knative.dev/target": "1",
                                          "autoscaling.knative.dev/min-scale": "1",
                                          "autoscaling.knative.dev/max-scale": "3"}))
    api = "/apis/serving.knative.dev/v1/namespaces/default/revisions/busy-00001"
    peak = 0
    stop = time.time() + 15

    def stream():
        while time.time() < stop:
            assert get(k, "busy.default.localhost", "/sleep?ms=300")[0] == 200

    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as pool:
        futures = [pool.submit(stream) for _ in range(6)]
        while time.time() < stop:
            status = k.get_json(api).get("status", {})
            peak = max(peak, status.get("actualReplicas", 0))
            assert status.get("desiredReplicas", 0) <= 3, status
            time.sleep(0.5)
        for f in futures:
            f.result()
    assert peak > 1, f"never scaled above one pod (peak {peak})"
    assert peak <= 3
    # After the load, back down to min-scale (1), never below.
    k.wait_for(lambda: k.get_json(api).get("status", {}).get("actualReplicas") == 1, timeout=90,
               what="scaled back down to min-scale")
    time.sleep(8)
    assert k.get_json(api)["status"]["actualReplicas"] == 1


def test_timeout_seconds_gives_504_and_bad_requests_get_4xx(serving):
    k = serving
    apply(k, service("slow", timeout=1))
    code, body = get(k, "slow.default.localhost", "/sleep?ms=3000")
    assert code == 504, body
    assert get(k, "slow.default.localhost", "/sleep?ms=10")[0] == 200
    # Malformed request and oversized headers: clean 4xx, the router keeps serving.
    import socket
    s = socket.create_connection(("127.0.0.1", k.router_port))
    s.sendall(b"NOT HTTP\r\n\r\n")
    assert s.recv(100).startswith(b"HTTP/1.1 400")
    s.close()
    c = http.client.HTTPConnection("127.0.0.1", k.router_port, timeout=10)
    c.request("GET", "/", headers={"Host": "slow.default.localhost", "X-Big": "x" * 100000})
    assert c.getresponse().status == 431
    c.close()
    assert get(k, "slow.default.localhost", "/sleep?ms=10")[0] == 200
