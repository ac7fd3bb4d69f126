"""Events from a real knapd (containerd, CNI, a registry on loopback): an image
pull, a pod start, a crash, an OOM kill and a scale to zero each leave a
core/v1 Event on the Revision, which `kubectl get events`, `kubectl describe
revision` (it selects by involvedObject name, namespace, kind and uid) and
`knap describe revision` show. events.k8s.io/v1 serves the same Events.
"""
import json
import os
import time
import uuid

import pytest

from conftest import Knapd, requires_kubectl
from registry import require_root_and_containerd, teardown_knapd_pods

API = "/apis/serving.knative.dev/v1/namespaces/default"


@pytest.fixture
def env(workdir):
    require_root_and_containerd()
    tag = (os.getpid() + 71) % 150 + 60
    ns = f"knap-e2e-ev-{uuid.uuid4().hex[:8]}"
    bridge = f"knapev{tag}"
    holder = {}

    def start(extra):
        holder["k"] = Knapd(workdir, runtime="containerd", extra_config=(
            f"  containerd-namespace: {ns}\n"
            f"  bridge-name: {bridge}\n"
            f"  pod-subnet: 10.223.{tag}.0/24\n"
            "  metrics-listen: 127.0.0.1:0\n" + extra +
            "autoscaler:\n"
            "  stable-window: 6s\n"
            "  panic-window-percentage: \"20\"\n"
            "  scale-to-zero-grace-period: 1s\n"))
        return holder["k"].start(timeout=60)

    yield start
    teardown_knapd_pods(holder.get("k"), ns, bridge)


def events_of(k, name, kind="Revision"):
    sel = f"involvedObject.name%3D{name}%2CinvolvedObject.kind%3D{kind}"
    return json.loads(k.http("GET", f"/api/v1/namespaces/default/events?fieldSelector={sel}")[1])["items"]


def wait_reason(k, name, reason, timeout=60):
    return k.wait_for(lambda: [e for e in events_of(k, name) if e["reason"] == reason], timeout=timeout,
                      what=f"a {reason} Event on {name}")


def router_get(k, host, path):
    import http.client
    deadline = time.monotonic() + 30
    while True:
        c = http.client.HTTPConnection("127.0.0.1", k.router_port, timeout=30)
        try:
            c.request("GET", path, headers={"Host": host})
            r = c.getresponse()
            body = r.read().decode()
        except (ConnectionError, OSError) as e:
            body, r = str(e), None
        finally:
            c.close()
        if r is not None and (r.status != 404 or "no route for host" not in body):
            return r.status, body
        if time.monotonic() > deadline:
            return (r.status if r else 0), body
        time.sleep(0.1)


@requires_kubectl
def test_events_after_a_pull_a_crash_an_oom_kill_and_a_scale_to_zero(env, make_registry, testapp_image):
    reg = make_registry()
    reg.push(testapp_image, "app:v1")
    k = env(reg.knap_config())
    image = reg.image("app:v1")
    doc = {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": "ev"},
           "spec": {"template": {"metadata": {"name": "ev-one",
                                              "annotations": {"autoscaling.knative.dev/min-scale": "0"}},
                                 "spec": {"containers": [{"image": image,
                                                          "resources": {"limits": {"memory": "48Mi"}}}]}}}}
    code, body, _ = k.http("POST", API + "/services", json.dumps(doc))
    assert code == 201, body

    pulled = wait_reason(k, "ev-one", "Pulled", timeout=120)
    assert image in pulled[0]["message"], pulled
    assert [e for e in events_of(k, "ev-one") if e["reason"] == "Pulling"]
    started = wait_reason(k, "ev-one", "Started", timeout=60)
    assert started[0]["source"]["component"] == "knap-runtime"
    rev = json.loads(k.http("GET", f"{API}/revisions/ev-one")[1])
    assert pulled[0]["involvedObject"]["uid"] == rev["metadata"]["uid"]

    # A crash: the app exits 7 on /crash.
    router_get(k, "ev.default.localhost", "/crash?code=7")
    crash = wait_reason(k, "ev-one", "BackOff", timeout=30)
    assert crash[0]["type"] == "Warning" and "exited with code 7" in crash[0]["message"], crash
    # An OOM kill: allocate past the 48Mi limit (after the back-off a new pod serves).
    k.wait_for(lambda: sum(e["count"] for e in events_of(k, "ev-one") if e["reason"] == "Started") >= 2,
               timeout=60, what="a second pod after the crash")
    router_get(k, "ev.default.localhost", "/alloc?mb=200")
    oom = wait_reason(k, "ev-one", "OOMKilled", timeout=30)
    assert oom[0]["type"] == "Warning" and "OOM killed" in oom[0]["message"], oom
    # No traffic: the autoscaler scales the Revision to zero.
    zero = wait_reason(k, "ev-one", "ScaledToZero", timeout=90)
    assert zero[0]["source"]["component"] == "knap-autoscaler"
    assert zero[0]["involvedObject"]["uid"] == rev["metadata"]["uid"]

    out = k.kubectl("get", "events").stdout
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["LAST", "SEEN", "TYPE", "REASON"], out
    for reason in ("Pulling", "Pulled", "Started", "BackOff", "OOMKilled", "ScaledToZero"):
        assert any(reason in l and "revision/ev-one" in l for l in lines), (reason, out)
    described = k.kubectl("describe", "revision", "ev-one").stdout
    events_part = described[described.index("Events:"):]
    for reason in ("Pulled", "Started", "BackOff", "ScaledToZero"):
        assert reason in events_part, described
    knap_described = k.knap("describe", "revision", "ev-one").stdout
    assert "Events:" in knap_described and "ScaledToZero" in knap_described and "BackOff" in knap_described, \
        knap_described
    v1 = json.loads(k.http("GET", "/apis/events.k8s.io/v1/namespaces/default/events?fieldSelector="
                               "regarding.name%3Dev-one%2Creason%3DScaledToZero")[1])["items"]
    assert v1 and v1[0]["regarding"]["name"] == "ev-one" and v1[0]["reportingController"] == "knap-autoscaler"
