"""Failing Revisions left idle cost (almost) no store writes.

Ten Revisions whose image does not exist in the registry and ten whose
container exits at once are created through a real knapd (containerd, CNI,
a registry on loopback). Once each has said why it fails, the test counts the
store writes (the global resourceVersion, which every write bumps) over a
quiet window. Retries go on underneath (pull back-off, crash back-off), but a
Revision that keeps failing the same way is not rewritten, and its repeated
Event is counted in memory instead of being rewritten per retry
(events/store_event_recorder.h).
"""
import json
import os
import time
import uuid

import pytest

from conftest import Knapd
from registry import require_root_and_containerd, teardown_knapd_pods

API = "/apis/serving.knative.dev/v1/namespaces/default"
# Unpullable and crash-looping Services: 10 of each in the suite. KNAP_IDLE_FAILURES="271,0" measures the
# issue's case (271 Revisions whose image is missing) by hand; docs/reliability.md has the figure.
N_NOPULL, N_CRASH = (int(x) for x in os.environ.get("KNAP_IDLE_FAILURES", "10,10").split(","))
QUIET_WINDOW_S = 30


def cond(obj, type_):
    for c in obj.get("status", {}).get("conditions", []):
        if c["type"] == type_:
            return c
    return {}


def global_rv(k):
    # A list's resourceVersion is the store's current one.
    return int(k.get_json("/api/v1/namespaces/default/events?limit=1")["metadata"]["resourceVersion"])


@pytest.fixture
def knapd(workdir, make_registry, testapp_image):
    require_root_and_containerd()
    tag = (os.getpid() + 97) % 150 + 60
    ns = f"knap-e2e-idle-{uuid.uuid4().hex[:8]}"
    bridge = f"knapid{tag}"
    reg = make_registry()
    reg.push(testapp_image, "app:v1")
    k = Knapd(workdir, runtime="containerd", extra_config=(
        f"  containerd-namespace: {ns}\n"
        f"  bridge-name: {bridge}\n"
        f"  pod-subnet: 10.224.{tag}.0/24\n"
        "  metrics-listen: 127.0.0.1:0\n" + reg.knap_config()))
    k.start(timeout=60)
    k.registry = reg
    yield k
    teardown_knapd_pods(k, ns, bridge, timeout=60)


def service(name, image, args=None):
    container = {"image": image}
    if args:
        container["args"] = args
    return {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"template": {"spec": {"containers": [container]}}}}


def test_idle_failing_revisions_make_almost_no_store_writes(knapd):
    k = knapd
    missing = k.registry.image("app:does-not-exist")
    good = k.registry.image("app:v1")
    names = []
    docs = [(f"nopull-{i}", service(f"nopull-{i}", missing)) for i in range(N_NOPULL)]
    docs += [(f"crash-{i}", service(f"crash-{i}", good, ["--crash-after-ms", "0"])) for i in range(N_CRASH)]
    for name, doc in docs:
        code, body, _ = k.http("POST", API + "/services", json.dumps(doc))
        assert code == 201, body
        names.append(name)
    total = len(names)

    def all_failing():
        for name in names:
            code, body, _ = k.http("GET", f"{API}/services/{name}")
            if code != 200:
                return False
            svc = json.loads(body)
            if cond(svc, "Ready").get("status") != "False" or not cond(svc, "Ready").get("message"):
                return False
        return True

    k.wait_for(all_failing, timeout=240 + total, what="every Service to report why it fails")
    # Let the first retries (1 s, 2 s, 4 s ...) and the first few repeats of each Event pass.
    time.sleep(20)
    start = global_rv(k)
    time.sleep(QUIET_WINDOW_S)
    writes = global_rv(k) - start
    rate = writes / QUIET_WINDOW_S
    print(f"\nidle failing Revisions: {total} ({N_NOPULL} unpullable, {N_CRASH} crash-looping): "
          f"{writes} store writes in {QUIET_WINDOW_S} s ({rate:.2f}/s; load {os.getloadavg()[0]:.1f})")
    # The bound scales to the target (< 1 write/s for 271 failing Revisions), with a margin below 271.
    assert rate < min(1, total / 271 * 3), f"{writes} store writes in {QUIET_WINDOW_S} s from idle failing Revisions"
    # The failures are still reported (nothing was silenced to get here).
    for name in names:
        svc = k.get_json(f"{API}/services/{name}")
        assert cond(svc, "Ready")["status"] == "False", svc
