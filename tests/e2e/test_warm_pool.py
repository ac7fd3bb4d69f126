"""Warm pool (issue 5) with real pods: containerd, runc, CNI, the router and the KPA.

A scale-to-zero Service with knap.dev/warm-pool: "1" keeps one warm pod while
at zero: frozen (frozen mode: knapd writes the pod's cgroup freezer itself,
so containerd shows the task RUNNING; tasks() below reports it PAUSED) or
CREATED (created mode, via
knap.dev/warm-pool-mode). A request wakes the revision through that pod and
carries `K-Knap-Cold-Start: path=frozen|warm; dur=...`; the pool refills;
deleting the Service leaves no container; a knapd restart destroys the warm
pods it finds and fills the pool again.
Traffic goes only to loopback (the router) and, through it, to the pods on
the test's own bridge.
"""
import json
import os
import re
import subprocess
import time
import urllib.request

import pytest

from conftest import Knapd, free_port
from pods import frozen
from test_serving import import_testapp, IMAGE, KNAP, MKIMAGE, TESTAPP, apply, containerd_ok, service

pytestmark = pytest.mark.skipif(
    not containerd_ok() or not os.path.exists(TESTAPP) or not os.path.exists(MKIMAGE),
    reason="!!! warm pool end-to-end tests SKIPPED: need root, a running containerd and the built test app !!!")

ZERO = {"autoscaling.knative.dev/min-scale": "0"}


@pytest.fixture
def warm(workdir):
    tag = os.getpid() % 150 + 60
    ns = f"knap-e2e-warm-{tag}"
    metrics_port = free_port()
    k = Knapd(workdir, runtime="containerd", extra_config=(
        f"  containerd-namespace: {ns}\n"
        f"  bridge-name: knapwarm{tag}\n"
        f"  pod-subnet: 10.221.{tag}.0/24\n"
        f"  metrics-listen: 127.0.0.1:{metrics_port}\n"
        "  warm-pool-size: \"0\"\n"
        "  warm-pool-mode: frozen\n"
        "autoscaler:\n"
        "  stable-window: 6s\n"
        "  panic-window-percentage: \"20\"\n"
        "  scale-to-zero-grace-period: 1s\n"))
    k.ns = ns
    k.metrics_port = metrics_port
    import_testapp(workdir, ns)
    k.start(timeout=60)
    yield k
    if not k.alive():
        k.start(timeout=60)
    for svc in json.loads(k.http("GET", "/apis/serving.knative.dev/v1/namespaces/default/services")[1])["items"]:
        k.http("DELETE", f"/apis/serving.knative.dev/v1/namespaces/default/services/{svc['metadata']['name']}")
    time.sleep(3)
    k.stop()
    subprocess.run(["ctr", "-n", ns, "images", "rm", IMAGE], capture_output=True)


def tasks(k, revision):
    """{pod id: STATUS} of the revision's tasks in the test's containerd namespace;
    a RUNNING task whose cgroup is frozen (knapd's frozen warm pod) counts as PAUSED."""
    out = subprocess.run(["ctr", "-n", k.ns, "tasks", "ls"], capture_output=True, text=True).stdout
    result = {}
    for line in out.splitlines()[1:]:
        parts = line.split()
        if len(parts) >= 3 and parts[0].startswith(revision + "-"):
            status = parts[2]
            if status == "RUNNING" and frozen(parts[0]):
                status = "PAUSED"
            result[parts[0]] = status
    return result


def containers(k, revision):
    out = subprocess.run(["ctr", "-n", k.ns, "containers", "ls", "-q"], capture_output=True, text=True).stdout
    return [c for c in out.split() if c.startswith(revision + "-")]


def metrics(k):
    with urllib.request.urlopen(f"http://127.0.0.1:{k.metrics_port}/metrics", timeout=5) as r:
        return r.read().decode()


def metric(k, name, labels):
    m = re.search(re.escape(name + "{" + labels + "}") + r" (\S+)", metrics(k))
    return float(m.group(1)) if m else None


def get(k, host, path="/", timeout=60):
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", k.router_port, timeout=timeout)
    c.request("GET", path, headers={"Host": host})
    r = c.getresponse()
    body = r.read().decode()
    header = r.getheader("K-Knap-Cold-Start")
    c.close()
    return r.status, body, header


def at_zero_with_pool(k, name, status):
    """Waits until the revision has no ready pod and exactly one warm task in `status`."""
    api = f"/apis/serving.knative.dev/v1/namespaces/default/revisions/{name}-00001"
    k.wait_for(lambda: k.get_json(api).get("status", {}).get("actualReplicas", 1) == 0, timeout=120,
               what="revision scaled to zero")
    k.wait_for(lambda: list(tasks(k, f"{name}-00001").values()) == [status], timeout=60,
               what=f"one {status} warm task at zero (tasks: {tasks(k, name + '-00001')})")
    return next(iter(tasks(k, f"{name}-00001")))


def test_frozen_pool_wakes_with_header_and_refills(warm):
    k = warm
    apply(k, service("icy", annotations=dict(ZERO, **{"knap.dev/warm-pool": "1"})))
    warm_id = at_zero_with_pool(k, "icy", "PAUSED")
    rev = "default/icy-00001"
    k.wait_for(lambda: metric(k, "knap_warm_pool_pods", f'revision="{rev}",mode="frozen"') == 1, timeout=30,
               what="knap_warm_pool_pods 1")
    k.wait_for(lambda: (metric(k, "knap_warm_pool_memory_bytes", f'revision="{rev}"') or 0) > 0, timeout=30,
               what="warm pool memory reported")

    code, body, header = get(k, "icy.default.localhost")
    assert code == 200, body
    assert header and re.fullmatch(r"path=frozen; dur=\d+\.\d{3}", header), header
    assert json.loads(body)["revision"] == "icy-00001"
    # The warm pod itself serves; a new one is frozen in its place.
    assert tasks(k, "icy-00001").get(warm_id) == "RUNNING", tasks(k, "icy-00001")
    k.wait_for(lambda: sorted(tasks(k, "icy-00001").values()) == ["PAUSED", "RUNNING"], timeout=60,
               what="pool refilled")
    assert [i for i, s in tasks(k, "icy-00001").items() if s == "PAUSED"] != [warm_id]
    # Only the waking request carries the header.
    assert get(k, "icy.default.localhost")[2] is None
    assert f'knap_cold_start_seconds_count{{revision="{rev}",path="frozen"}} 1' in metrics(k)

    # Deleting the Service leaves nothing behind.
    k.http("DELETE", "/apis/serving.knative.dev/v1/namespaces/default/services/icy")
    k.wait_for(lambda: containers(k, "icy-00001") == [], timeout=60, what="containers removed")
    assert tasks(k, "icy-00001") == {}


def test_created_pool_wakes_with_path_warm(warm):
    k = warm
    apply(k, service("tepid", annotations=dict(ZERO, **{"knap.dev/warm-pool": "1",
                                                         "knap.dev/warm-pool-mode": "created"})))
    warm_id = at_zero_with_pool(k, "tepid", "CREATED")
    code, body, header = get(k, "tepid.default.localhost")
    assert code == 200, body
    assert header and re.fullmatch(r"path=warm; dur=\d+\.\d{3}", header), header
    assert tasks(k, "tepid-00001").get(warm_id) == "RUNNING"
    k.wait_for(lambda: sorted(tasks(k, "tepid-00001").values()) == ["CREATED", "RUNNING"], timeout=60,
               what="pool refilled")


def test_no_pool_is_cached(warm):
    k = warm
    apply(k, service("cold", annotations=ZERO))
    api = "/apis/serving.knative.dev/v1/namespaces/default/revisions/cold-00001"
    k.wait_for(lambda: k.get_json(api).get("status", {}).get("actualReplicas", 1) == 0, timeout=120,
               what="revision scaled to zero")
    k.wait_for(lambda: tasks(k, "cold-00001") == {}, timeout=30, what="no task at zero without a pool")
    code, body, header = get(k, "cold.default.localhost")
    assert code == 200, body
    assert header and header.startswith("path=cached; dur="), header


def test_restart_destroys_warm_pods_and_refills(warm):
    k = warm
    apply(k, service("nap", annotations=dict(ZERO, **{"knap.dev/warm-pool": "1"})))
    old = at_zero_with_pool(k, "nap", "PAUSED")
    k.stop()
    assert tasks(k, "nap-00001") == {old: "PAUSED"}, "the pod outlives knapd until the restart"
    k.start(timeout=60)
    k.wait_for(lambda: old not in containers(k, "nap-00001"), timeout=60, what="stale warm pod destroyed")
    new = at_zero_with_pool(k, "nap", "PAUSED")
    assert new != old
    code, _, header = get(k, "nap.default.localhost")
    assert code == 200 and header.startswith("path=frozen"), header
