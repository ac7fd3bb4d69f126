"""knative/serving test/conformance/api/v1, ported (one test per upstream test).

Same assertions as upstream, against one knapd on real containerd for the
module (see conformance_helpers.py); docs/conformance.md maps each test to its
upstream name. Knative's images answer their text on "/"; knap-testapp
answers it on /text (the images differ only in $TEXT), so data-plane checks
ask /text. knap has no Kubernetes Service objects (the router routes by Host
itself), so upstream's extra checks of the placeholder k8s Service's labels and
annotations have no object to look at here (docs/conformance.md says so).
"""
import base64
import collections
import concurrent.futures
import http.client
import json
import re
import subprocess
import threading
import time

import pytest

from conftest import KNAP
from conformance_helpers import (HELLO, IMAGES, PIZZA1, PIZZA2, Cluster, cond, is_ready, ksvc, parallel,
                                 skip_without_pods)

pytestmark = skip_without_pods

CREATOR = "serving.knative.dev/creator"
UPDATER = "serving.knative.dev/lastModifier"


# The first Service of most tests: created when the module starts, so they
# deploy concurrently (each test then waits for its own and goes on).
FIRST = [ksvc(n, image="pizza1") for n in (
    "blue-green", "config-get", "revision-get", "route-get", "svc-create-list", "svc-create-update",
    "svc-split", "svc-annotations", "svc-labels")] + [
    ksvc("resources-limits", container={"resources": {"limits": {"memory": "350Mi"}, "requests": {"memory": "350Mi"}}}),
    ksvc("single-concurrency", spec={"containerConcurrency": 1}),
    ksvc("svc-byo", image="pizza1", template_meta={"name": "svc-byo-byoname"}),
] + [ksvc(n, spec={"timeoutSeconds": 10}) for n in ("timeout-under", "timeout-over", "timeout-first-byte")]


@pytest.fixture(scope="module")
def cl():
    c = Cluster("10.224", "knapcfa")
    c.precreate(FIRST)
    yield c
    c.close()


# ------------------------------------------------------------------ shared checks (upstream util.go)

def objects(cl, name):
    svc = cl.get("services", name)
    rev = svc["status"].get("latestReadyRevisionName") or svc["status"].get("latestCreatedRevisionName")
    return {"service": svc, "config": cl.get("configurations", name), "route": cl.get("routes", name),
            "revision": cl.get("revisions", rev) if rev else None}


def validate_control_plane(cl, name, revision, image, generation, config=None, route=None):
    config = config or name
    route = route or name
    r = cl.get("revisions", revision)
    assert is_ready(r), f"revision {revision} did not become ready: {r.get('status')}"
    # Upstream checks status.imageDigest (DeprecatedImageDigest): the serving
    # container's digest, which is the first containerStatus in these tests
    # (a sidecar's entry names its own image).
    statuses = r["status"].get("containerStatuses", [])
    assert statuses, f"imageDigest not present for revision {revision}: {r['status']}"
    repo = IMAGES[image].rsplit(":", 1)[0]
    assert re.fullmatch(re.escape(repo) + r"@sha256:[0-9a-f]{64}", statuses[0]["imageDigest"]), statuses[0]
    assert r["metadata"]["labels"]["serving.knative.dev/configurationGeneration"] == generation, r["metadata"]
    c = cl.get("configurations", config)
    assert c["status"]["latestCreatedRevisionName"] == revision
    assert c["status"]["latestReadyRevisionName"] == revision
    rt = cl.wait("routes", route, lambda o: [t["revisionName"] for t in o["status"].get("traffic", [])] == [revision]
                 and o["status"]["traffic"][0].get("percent") == 100, what="all route traffic at " + revision)
    return rt


def validate_data_plane(cl, url, text, path="/text"):
    cl.wait_endpoint(url, path, lambda s, h, b: s == 200 and b.strip() == text, what=f"serving {text!r}")


def validate_labels_propagation(objs, name):
    rev, config, route = objs["revision"], objs["config"], objs["route"]
    assert rev["metadata"]["labels"]["serving.knative.dev/configuration"] == name
    assert rev["metadata"]["labels"]["serving.knative.dev/service"] == name
    assert config["metadata"]["labels"]["serving.knative.dev/service"] == name
    assert route["metadata"]["labels"]["serving.knative.dev/service"] == name


def validate_annotations(objs, *extra):
    for kind in ("service", "route", "config"):
        anns = objs[kind]["metadata"].get("annotations") or {}
        for a in (CREATOR, UPDATER) + extra:
            assert anns.get(a), f"{kind} expected {a} annotation to be set, but was empty: {anns}"


def wait_latest_revision(cl, name, old):
    """Knative's WaitForServiceLatestRevision: a new latestCreated that becomes latestReady."""
    svc = cl.wait("services", name, lambda s: (s.get("status") or {}).get("latestCreatedRevisionName") not in (None, old)
                  and s["status"].get("latestReadyRevisionName") == s["status"]["latestCreatedRevisionName"],
                  what=f"{name}: a new ready revision after {old}")
    cl.wait_ready("services", name)
    return svc["status"]["latestReadyRevisionName"]


def set_image(image):
    def m(o):
        o["spec"]["template"]["spec"]["containers"][0]["image"] = IMAGES[image]
    return m


class RouteProber:
    """Knative's RunRouteProber/AssertProberDefault: requests all along, none may fail."""

    def __init__(self, cl, url):
        self.cl, self.url = cl, url
        self.results = collections.Counter()
        self.errors = []
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while not self.stop.is_set():
            try:
                status, _, body = self.cl.request(self.url, "/text", timeout=30)
                self.results[status] += 1
                if status != 200:
                    self.errors.append((status, body[:200]))
            except Exception as e:  # noqa: BLE001 - every failure counts
                self.errors.append(repr(e))
            time.sleep(0.05)

    def assert_ok(self):
        self.stop.set()
        self.t.join(30)
        assert self.results[200] > 0, "the prober got no answer at all"
        assert not self.errors, f"prober saw errors: {self.errors[:5]} ({dict(self.results)})"


def check_distribution(cl, url, expected, n=100, min_each=None):
    """Knative's CheckDistribution: every answer is one of `expected`, each at least `min_each` times."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=10) as pool:
        got = list(pool.map(lambda _: cl.request(url, "/text"), range(n)))
    counts = collections.Counter(b.strip() for s, h, b in got if s == 200)
    assert sum(counts.values()) == n, [(s, b[:100]) for s, h, b in got if s != 200][:5]
    assert set(counts) <= set(expected), counts
    floor = min_each if min_each is not None else (int(n * 0.25) if len(expected) > 1 else n)
    for e in expected:
        assert counts[e] >= floor, f"{url}: {counts}"


# ------------------------------------------------------------------ blue_green_test.go

def test_blue_green_route(cl):
    name = "blue-green"
    cl.create_service_ready(ksvc(name, image="pizza1"))
    blue = cl.get("services", name)["status"]["latestReadyRevisionName"]
    cl.must_update("services", name, set_image("pizza2"))
    green = wait_latest_revision(cl, name, blue)
    cl.must_update("services", name, lambda o: o["spec"].__setitem__("traffic", [
        {"tag": "blue", "revisionName": blue, "percent": 50},
        {"tag": "green", "revisionName": green, "percent": 50}]))
    svc = cl.wait("services", name, lambda s: is_ready(s) and {t.get("tag") for t in s["status"]["traffic"]}
                  == {"blue", "green"}, what="blue/green traffic")
    urls = {t["tag"]: t["url"] for t in svc["status"]["traffic"]}
    cl.wait_endpoint(urls["green"], "/text", lambda s, h, b: s == 200)
    parallel(lambda: check_distribution(cl, svc["status"]["url"], [PIZZA1, PIZZA2]),
             lambda: check_distribution(cl, urls["blue"], [PIZZA1]),
             lambda: check_distribution(cl, urls["green"], [PIZZA2]))


# ------------------------------------------------------------------ configuration_test.go

def test_configuration_get_and_list(cl):
    cl.create_service_ready(ksvc("config-get", image="pizza1"))
    config = cl.get("configurations", "config-get")
    assert config is not None
    assert "config-get" in [c["metadata"]["name"] for c in cl.list("configurations")]


def configuration(name, image, generate_name=False):
    md = {"generateName": name} if generate_name else {"name": name}
    return {"apiVersion": "serving.knative.dev/v1", "kind": "Configuration", "metadata": md,
            "spec": {"template": {"spec": {"containers": [{"image": IMAGES[image]}]}}}}


def test_update_configuration_metadata(cl):
    name = "config-meta"
    cl.must_create("configurations", configuration(name, "pizza1"))
    cfg = cl.wait_ready("configurations", name)
    revision = cfg["status"]["latestReadyRevisionName"]
    for field, new in (("labels", {"label-x": "abc", "label-y": "def"}),
                       ("annotations", {"annotation-a": "123", "annotation-b": "456"})):
        updated = cl.must_update("configurations", name, lambda o: o["metadata"].setdefault(field, {}).update(new))
        want = updated["metadata"][field]
        cl.wait("configurations", name, lambda c: c["metadata"].get(field) == want
                and c["metadata"]["generation"] == c["status"].get("observedGeneration"), what=f"{field} updated")
        cfg = cl.get("configurations", name)
        assert cfg["status"]["latestCreatedRevisionName"] == revision, f"no new Revision after updating {field}"
        rev = cl.get("revisions", revision)
        present = [k for k in new if k in (rev["metadata"].get(field) or {})]
        assert not present, f"{field} of Revision {revision} should not have been updated: {present}"


# ------------------------------------------------------------------ errorcondition_test.go

def test_container_error_msg(cl):
    # An image that does not exist: knap cannot resolve it (dev.local is
    # never pulled, so a missing local image is knap's "cannot be resolved").
    name = "container-error"
    cl.must_create("services", ksvc(name, image="dev.local/knap-conformance/invalidhelloworld:v1"))
    cl.wait_failed("services", name)
    c = cond(cl.wait("configurations", name, lambda o: cond(o, "Ready").get("reason")
                     and cond(o, "Ready").get("message")), "Ready")
    assert c["status"] == "False" and c["reason"] and c["message"], c
    revision = cl.get("configurations", name)["status"]["latestCreatedRevisionName"]
    r = cond(cl.wait("revisions", revision, lambda o: cond(o, "Ready").get("reason")
                     and cond(o, "Ready").get("message")), "Ready")
    assert r["reason"] and r["message"], r
    route = cl.wait("routes", name, lambda o: cond(o, "Ready").get("status") == "False", what="route failed")
    assert cond(route, "Ready")["status"] == "False"


def test_container_exiting_msg(cl):
    # Knative's "failing" image: logs, sleeps 10 s, exits 5.
    name = "container-exiting"
    cl.must_create("services", ksvc(name, container={"args": ["--crash-after-ms", "3000"]}))
    cl.wait_failed("services", name, timeout=60)
    cfg = cl.wait("configurations", name, lambda o: cond(o, "Ready").get("reason") and cond(o, "Ready").get("message"))
    c = cond(cfg, "Ready")
    assert c["status"] == "False", c
    r = cond(cl.get("revisions", cfg["status"]["latestCreatedRevisionName"]), "Ready")
    assert r["status"] == "False" and r["reason"] and r["message"], r
    # knap's message says what the container said and how it exited.
    assert "Crashed" in r["message"] or "5" in r["reason"], r


# ------------------------------------------------------------------ generatename_test.go

def validate_name(prefix, name):
    assert re.fullmatch(re.escape(prefix) + r"[a-zA-Z0-9\-.]+", name), f"generated name {name!r}, prefix {prefix!r}"


def can_serve(cl, route_name, text=HELLO):
    rt = cl.wait("routes", route_name, lambda r: (r.get("status") or {}).get("url"), what="route URL")
    validate_data_plane(cl, rt["status"]["url"], text)


def test_service_generate_name(cl):
    prefix = "svc-generate-name-"
    code, svc = cl.create("services", ksvc(prefix, image="hello", generate_name=True))
    assert code == 201, svc
    name = svc["metadata"]["name"]
    validate_name(prefix, name)
    cl.wait_ready("services", name)
    can_serve(cl, name)


def test_route_and_config_generate_name(cl):
    prefix = "route-config-gen-"
    cfg = cl.must_create("configurations", configuration(prefix, "hello", generate_name=True))
    cname = cfg["metadata"]["name"]
    validate_name(prefix, cname)
    cl.wait("configurations", cname, lambda c: (c.get("status") or {}).get("latestCreatedRevisionName"), what="a revision")
    code, route = cl.create("routes", {"apiVersion": "serving.knative.dev/v1", "kind": "Route",
                                       "metadata": {"generateName": prefix},
                                       "spec": {"traffic": [{"configurationName": cname, "percent": 100}]}})
    assert code == 201, route
    rname = route["metadata"]["name"]
    validate_name(prefix, rname)
    cl.wait_ready("routes", rname)
    can_serve(cl, rname)


# ------------------------------------------------------------------ resources_test.go

def test_custom_resources_limits(cl):
    name = "resources-limits"
    svc = cl.create_service_ready(ksvc(name, container={"resources": {
        "limits": {"memory": "350Mi"}, "requests": {"memory": "350Mi"}}}))
    url = svc["status"]["url"]
    cl.wait_endpoint(url, "/", lambda s, h, b: s == 200)

    def bloat(mb):  # the autoscale image's POST /?bloat=MB: allocate, touch, free
        try:
            return cl.request(url, f"/alloc?mb={mb}&free", method="POST", timeout=60)[0]
        except (OSError, http.client.HTTPException) as e:
            return repr(e)  # no response at all: what upstream expects past the limit
    assert bloat(100) == 200
    assert bloat(200) == 200
    assert bloat(500) != 200, "we should not have got a response when bloating past the memory limit"


# ------------------------------------------------------------------ revision_test.go

def test_revision_get_and_list(cl):
    svc = cl.create_service_ready(ksvc("revision-get", image="pizza1"))
    revision = cl.get("revisions", svc["status"]["latestReadyRevisionName"])
    assert revision is not None
    assert revision["metadata"]["name"] in [r["metadata"]["name"] for r in cl.list("revisions")]


# ------------------------------------------------------------------ revision_timeout_test.go

def test_revision_timeout(cl):
    cases = {  # name: (initial sleep ms, sleep after the first byte ms, expected status)
        "timeout-under": (2000, 0, 200),
        "timeout-over": (12000, 0, 504),
        "timeout-first-byte": (0, 15000, 200),
    }

    def one(name):
        initial, sleep, want = cases[name]
        svc = cl.create_service_ready(ksvc(name, spec={"timeoutSeconds": 10}))
        url = svc["status"]["url"]
        cl.wait_endpoint(url, "/timeout", lambda s, h, b: s in (200, 504), what="probing to force a pod")
        start = time.time()
        status, _, body = cl.request(url, f"/timeout?initialTimeout={initial}&timeout={sleep}", timeout=60)
        took = time.time() - start
        assert status == want, f"{name}: status {status} after {took:.1f}s, want {want}: {body[:200]}"
        if want == 200:
            assert body == f"Slept for {sleep} milliseconds", body
    parallel(*[lambda n=n: one(n) for n in cases])


# ------------------------------------------------------------------ route_test.go

def test_route_get_and_list(cl):
    cl.create_service_ready(ksvc("route-get", image="pizza1"))
    route = cl.get("routes", "route-get")
    assert route is not None
    assert "route-get" in [r["metadata"]["name"] for r in cl.list("routes")]


def test_route_creation(cl):
    name = "route-creation"
    cl.must_create("configurations", configuration(name, "pizza1"))
    cl.must_create("routes", {"apiVersion": "serving.knative.dev/v1", "kind": "Route", "metadata": {"name": name},
                              "spec": {"traffic": [{"tag": name, "configurationName": name, "percent": 100}]}})
    cfg = cl.wait_ready("configurations", name)
    rev1 = cfg["status"]["latestReadyRevisionName"]
    rt = cl.wait_ready("routes", name)
    url = rt["status"]["url"]
    validate_control_plane(cl, name, rev1, "pizza1", "1")
    validate_data_plane(cl, url, PIZZA1)
    prober = RouteProber(cl, url)
    # JSON merge patch of the Configuration's image (Knative's PatchConfig).
    code, body, _ = cl.k.http("PATCH", f"/apis/serving.knative.dev/v1/namespaces/default/configurations/{name}",
                              json.dumps({"spec": {"template": {"spec": {"containers": [{"image": IMAGES["pizza2"]}]}}}}),
                              content_type="application/merge-patch+json")
    assert code == 200, body
    cfg = cl.wait("configurations", name, lambda c: (c.get("status") or {}).get("latestReadyRevisionName") not in (None, rev1)
                  and is_ready(c), what="second revision ready")
    rev2 = cfg["status"]["latestReadyRevisionName"]
    cl.wait_ready("routes", name)
    validate_control_plane(cl, name, rev2, "pizza2", "2")
    validate_data_plane(cl, url, PIZZA2)
    prober.assert_ok()


# ------------------------------------------------------------------ service_account_test.go

def test_service_account_validation(cl):
    code, body = cl.create("services", ksvc("sa-validation", image="pizza1", spec={"serviceAccountName": "foo@bar.baz"}))
    assert code >= 400, "expected Service creation to fail"
    msg = body.get("message", "")
    want = ("foo@bar.baz: spec.template.spec.serviceAccountName\n"
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
            "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
            "is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
    assert want in msg, f"error = {msg!r}, want to contain {want!r}"


# ------------------------------------------------------------------ service_test.go

def test_service_create_list_and_delete(cl):
    name = "svc-create-list"
    svc = cl.create_service_ready(ksvc(name, image="pizza1"))
    validate_control_plane(cl, name, svc["status"]["latestReadyRevisionName"], "pizza1", "1")
    assert name in [s["metadata"]["name"] for s in cl.list("services")]
    assert cl.delete("services", name) == 200
    deadline = time.time() + 30
    while time.time() < deadline and cl.get("services", name) is not None:
        time.sleep(0.2)
    assert cl.get("services", name) is None


def test_service_create_and_update(cl):
    name = "svc-create-update"
    svc = cl.create_service_ready(ksvc(name, image="pizza1"))
    rev = svc["status"]["latestReadyRevisionName"]
    url = svc["status"]["url"]
    validate_control_plane(cl, name, rev, "pizza1", "1")
    validate_data_plane(cl, url, PIZZA1)
    objs = objects(cl, name)
    validate_labels_propagation(objs, name)
    validate_annotations(objs)
    prober = RouteProber(cl, url)
    cl.must_update("services", name, set_image("pizza2"))
    rev = wait_latest_revision(cl, name, rev)
    validate_control_plane(cl, name, rev, "pizza2", "2")
    validate_data_plane(cl, url, PIZZA2)
    cl.must_update("services", name, lambda o: o["spec"]["template"].setdefault("metadata", {}).__setitem__(
        "labels", {"label-x": "abc", "label-y": "def"}))
    rev = wait_latest_revision(cl, name, rev)
    cl.must_update("services", name, lambda o: o["spec"]["template"]["metadata"].__setitem__(
        "annotations", {"annotation-a": "123", "annotation-b": "456"}))
    rev = wait_latest_revision(cl, name, rev)
    validate_control_plane(cl, name, rev, "pizza2", "4")
    validate_data_plane(cl, url, PIZZA2)
    prober.assert_ok()


def test_service_byo_name(cl):
    name = "svc-byo"
    svc = cl.create_service_ready(ksvc(name, image="pizza1", template_meta={"name": name + "-byoname"}))
    assert svc["status"]["latestReadyRevisionName"] == name + "-byoname"
    validate_control_plane(cl, name, name + "-byoname", "pizza1", "1")
    validate_data_plane(cl, svc["status"]["url"], PIZZA1)
    objs = objects(cl, name)
    validate_labels_propagation(objs, name)
    validate_annotations(objs)
    prober = RouteProber(cl, svc["status"]["url"])
    code, body = cl.update("services", name, set_image("pizza2"))
    assert code >= 400, f"the update with an unchanged BYO name must fail: {code} {body}"
    time.sleep(1)
    prober.assert_ok()


def traffic_shape(svc):
    out = {}
    for t in svc["status"].get("traffic", []):
        out[t.get("tag", "")] = {"tag": t.get("tag", ""), "revisionName": t["revisionName"],
                                 "percent": t.get("percent", 0), "latestRevision": t.get("latestRevision", False)}
    return out


def wait_traffic(cl, name, want):
    def ok(s):
        return is_ready(s) and traffic_shape(s) == want
    return cl.wait("services", name, ok, what=f"traffic shape {want}")


def validate_domains(cl, name, base, tags):
    svc = cl.get("services", name)
    urls = {t.get("tag"): t.get("url") for t in svc["status"]["traffic"]}
    assert set(urls) == set(tags), f"unexpected tags in the service: {urls}"
    checks = [lambda: check_distribution(cl, svc["status"]["url"], base)]
    for tag, text in tags.items():
        cl.wait_endpoint(urls[tag], "/text", lambda s, h, b, t=text: s == 200 and b.strip() == t)
        checks.append(lambda u=urls[tag], t=text: check_distribution(cl, u, [t]))
    parallel(*checks)


def test_service_with_traffic_split(cl):
    name = "svc-split"
    svc = cl.create_service_ready(ksvc(name, image="pizza1"))
    first = svc["status"]["latestReadyRevisionName"]
    assert svc["status"]["traffic"][0]["revisionName"] == first
    validate_annotations(objects(cl, name))
    set_traffic = lambda tt: lambda o: o["spec"].__setitem__("traffic", tt)  # noqa: E731
    cl.must_update("services", name, set_traffic([{"tag": "current", "revisionName": first, "percent": 100},
                                                   {"tag": "latest"}]))
    want = {"current": {"tag": "current", "revisionName": first, "percent": 100, "latestRevision": False},
            "latest": {"tag": "latest", "revisionName": first, "percent": 0, "latestRevision": True}}
    wait_traffic(cl, name, want)
    validate_domains(cl, name, [PIZZA1], {"latest": PIZZA1, "current": PIZZA1})

    cl.must_update("services", name, set_image("pizza2"))
    second = wait_latest_revision(cl, name, first)
    want["latest"]["revisionName"] = second
    wait_traffic(cl, name, want)
    validate_domains(cl, name, [PIZZA1], {"latest": PIZZA2, "current": PIZZA1})

    cl.must_update("services", name, set_traffic([{"tag": "current", "revisionName": first, "percent": 50},
                                                   {"tag": "candidate", "revisionName": second, "percent": 50},
                                                   {"tag": "latest"}]))
    want = {"current": {"tag": "current", "revisionName": first, "percent": 50, "latestRevision": False},
            "candidate": {"tag": "candidate", "revisionName": second, "percent": 50, "latestRevision": False},
            "latest": {"tag": "latest", "revisionName": second, "percent": 0, "latestRevision": True}}
    wait_traffic(cl, name, want)
    validate_domains(cl, name, [PIZZA1, PIZZA2], {"candidate": PIZZA2, "latest": PIZZA2, "current": PIZZA1})

    cl.must_update("services", name, set_image("hello"))
    third = wait_latest_revision(cl, name, second)
    want["latest"]["revisionName"] = third
    wait_traffic(cl, name, want)
    validate_domains(cl, name, [PIZZA1, PIZZA2], {"latest": HELLO, "candidate": PIZZA2, "current": PIZZA1})

    cl.must_update("services", name, set_traffic([{"tag": "current", "revisionName": first, "percent": 50},
                                                   {"tag": "candidate", "percent": 50},
                                                   {"tag": "latest"}]))
    validate_annotations(objects(cl, name))
    want["candidate"] = {"tag": "candidate", "revisionName": third, "percent": 50, "latestRevision": True}
    wait_traffic(cl, name, want)
    validate_domains(cl, name, [PIZZA1, HELLO], {"latest": HELLO, "candidate": HELLO, "current": PIZZA1})


def test_annotation_propagation(cl):
    name = "svc-annotations"
    svc = cl.create_service_ready(ksvc(name, image="pizza1"))
    rev = svc["status"]["latestReadyRevisionName"]
    validate_control_plane(cl, name, rev, "pizza1", "1")
    validate_annotations(objects(cl, name))
    cl.must_update("services", name, lambda o: o["metadata"].setdefault("annotations", {}).__setitem__("juicy", "jamba"))
    cl.must_update("services", name, set_image("pizza2"))
    rev = wait_latest_revision(cl, name, rev)
    validate_annotations(objects(cl, name), "juicy")
    cl.must_update("services", name, lambda o: o["metadata"]["annotations"].pop("juicy"))
    cl.must_update("services", name, set_image("hello"))
    rev = wait_latest_revision(cl, name, rev)
    objs = objects(cl, name)
    validate_annotations(objs)
    assert "juicy" not in (objs["config"]["metadata"].get("annotations") or {}), "config still has juicy"
    assert "juicy" not in (objs["route"]["metadata"].get("annotations") or {}), "route still has juicy"


def test_service_create_with_multiple_containers(cl):
    name = "svc-multi"
    doc = ksvc(name)
    doc["spec"]["template"]["spec"]["containers"] = [
        {"image": IMAGES["runtime"], "ports": [{"containerPort": 8881}],
         "env": [{"name": "FORWARD_PORT", "value": "8882"}]},
        {"image": IMAGES["hello"], "args": ["--port-from-arg", "8882"], "env": [{"name": "TEXT", "value": "Yay!! multi-container works"}]},
    ]
    svc = cl.create_service_ready(doc)
    rev = svc["status"]["latestReadyRevisionName"]
    r = cl.get("revisions", rev)
    assert is_ready(r)
    assert [c.get("imageDigest", "").split("@")[0] for c in r["status"].get("containerStatuses", [])] == [
        IMAGES["runtime"].rsplit(":", 1)[0], IMAGES["hello"].rsplit(":", 1)[0]], r["status"]
    validate_control_plane(cl, name, rev, "runtime", "1")
    # The serving container forwards to the sidecar on localhost:$FORWARD_PORT.
    validate_data_plane(cl, svc["status"]["url"], "Yay!! multi-container works", path="/forward?path=/text")
    # knap's own: `knap logs -c` reads the sidecar's logs, the default the serving container's.
    sidecar = r["spec"]["containers"][1]["name"]
    logs = lambda *a: subprocess.run([KNAP, "logs", name, "--data-dir", cl.k.data_dir, *a],
                                     capture_output=True, text=True)
    deadline = time.time() + 30  # the log driver copies the pipes to the files asynchronously
    while True:
        side, main, both = logs("-c", sidecar), logs(), logs("--all-containers")
        if ("8882" in side.stdout and "8881" in main.stdout) or time.time() > deadline:
            break
        time.sleep(0.5)
    assert side.returncode == 0 and "8882" in side.stdout, (side.stdout, side.stderr)
    assert main.returncode == 0 and "8881" in main.stdout and "8882" not in main.stdout, main.stdout
    assert f"/{sidecar} " in both.stdout, both.stdout
    assert logs("-c", "nope").returncode == 1


def test_label_propagation(cl):
    name = "svc-labels"
    svc = cl.create_service_ready(ksvc(name, image="pizza1"))
    rev = svc["status"]["latestReadyRevisionName"]
    validate_control_plane(cl, name, rev, "pizza1", "1")
    validate_labels_propagation(objects(cl, name), name)
    cl.must_update("services", name, lambda o: o["metadata"].setdefault("labels", {}).__setitem__("juicy", "jamba"))
    cl.must_update("services", name, set_image("pizza2"))
    rev = wait_latest_revision(cl, name, rev)
    objs = objects(cl, name)
    validate_labels_propagation(objs, name)
    assert "juicy" in objs["config"]["metadata"]["labels"], "config missing juicy label"
    assert "juicy" in objs["route"]["metadata"]["labels"], "route missing juicy label"
    cl.must_update("services", name, lambda o: o["metadata"]["labels"].pop("juicy"))
    cl.must_update("services", name, set_image("hello"))
    rev = wait_latest_revision(cl, name, rev)
    objs = objects(cl, name)
    validate_labels_propagation(objs, name)
    assert "juicy" not in objs["config"]["metadata"]["labels"], "config still has juicy"
    assert "juicy" not in objs["route"]["metadata"]["labels"], "route still has juicy"


def test_service_create_with_empty_dir(cl):
    name = "svc-emptydir"
    doc = ksvc(name, container={"volumeMounts": [{"name": "data", "mountPath": "/data"}]},
               spec={"volumes": [{"name": "data", "emptyDir": {"medium": "Memory", "sizeLimit": "100M"}}]})
    svc = cl.create_service_ready(doc)
    validate_control_plane(cl, name, svc["status"]["latestReadyRevisionName"], "runtime", "1")
    url = svc["status"]["url"]
    text = "From file in empty dir!"
    assert cl.request(url, "/write?path=/data/testfile&text=" + text.replace(" ", "+"))[0] == 200
    status, _, body = cl.request(url, "/file?path=/data/testfile")
    assert status == 200 and json.loads(body)["content"] == text, body


# ------------------------------------------------------------------ single_threaded_test.go

def test_single_concurrency(cl):
    svc = cl.create_service_ready(ksvc("single-concurrency", spec={"containerConcurrency": 1}))
    url = svc["status"]["url"]
    cl.wait_endpoint(url, "/single?ms=1", lambda s, h, b: s == 200)
    deadline = time.time() + 20

    def worker(i):
        n = 0
        while time.time() < deadline:
            status, _, body = cl.request(url, "/single?ms=500", timeout=60)
            n += 1
            assert status != 500, "detected concurrent requests"
            assert status == 200, f"non 200 response, thread {i}, request {n}: {status} {body}"
    parallel(*[lambda i=i: worker(i) for i in range(5)])


# ------------------------------------------------------------------ volumes_test.go

def core(cl, kind, doc):
    code, body, _ = cl.k.http("POST", f"/api/v1/namespaces/default/{kind}", json.dumps(doc))
    assert code == 201, f"create {kind}: {code} {body}"


def volume_service(cl, name, volumes, mounts, path="/hello/world"):
    doc = ksvc(name, container={"volumeMounts": mounts}, spec={"volumes": volumes})
    svc = cl.create_service_ready(doc)
    validate_control_plane(cl, name, svc["status"]["latestReadyRevisionName"], "runtime", "1")
    return svc["status"]["url"]


def file_text(cl, url, path):
    st, _, body = cl.wait_endpoint(url, "/file?path=" + path, lambda s, h, b: s == 200)
    return json.loads(body)["content"]


def test_config_map_volume(cl):
    name, text = "volume-cm", "hello-volumes-cm"
    core(cl, "configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"world": text}})
    url = volume_service(cl, name, [
        {"name": "projectedv", "configMap": {"name": name, "optional": False}},
        {"name": "blah", "configMap": {"name": "does-not-exist", "optional": True}}],
        [{"name": "projectedv", "mountPath": "/hello", "readOnly": True},
         {"name": "blah", "mountPath": "/does/not/matter", "readOnly": True}])
    assert file_text(cl, url, "/hello/world") == text


def test_projected_config_map_volume(cl):
    name, text = "volume-pcm", "hello-volumes-pcm"
    core(cl, "configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"world": text}})
    url = volume_service(cl, name, [
        {"name": "projectedv", "projected": {"sources": [{"configMap": {"name": name, "optional": False}}]}},
        {"name": "blah", "projected": {"sources": [{"configMap": {"name": "does-not-exist", "optional": True}}]}}],
        [{"name": "projectedv", "mountPath": "/hello", "readOnly": True},
         {"name": "blah", "mountPath": "/does/not/matter", "readOnly": True}])
    assert file_text(cl, url, "/hello/world") == text


def test_secret_volume(cl):
    name, text = "volume-secret", "hello-volumes-secret"
    core(cl, "secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": {"world": text}})
    url = volume_service(cl, name, [
        {"name": "projectedv", "secret": {"secretName": name, "optional": False}},
        {"name": "blah", "secret": {"secretName": "does-not-exist", "optional": True}}],
        [{"name": "projectedv", "mountPath": "/hello", "readOnly": True},
         {"name": "blah", "mountPath": "/does/not/matter", "readOnly": True}])
    assert file_text(cl, url, "/hello/world") == text


def test_projected_secret_volume(cl):
    name, text = "volume-psecret", "hello-volumes-psecret"
    core(cl, "secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "stringData": {"world": text}})
    url = volume_service(cl, name, [
        {"name": "projectedv", "projected": {"sources": [{"secret": {"name": name, "optional": False}}]}},
        {"name": "blah", "projected": {"sources": [{"secret": {"name": "does-not-exist", "optional": True}}]}}],
        [{"name": "projectedv", "mountPath": "/hello", "readOnly": True},
         {"name": "blah", "mountPath": "/does/not/matter", "readOnly": True}])
    assert file_text(cl, url, "/hello/world") == text


def test_projected_complex(cl):
    name = "volume-complex"
    core(cl, "configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                            "data": {"world": "text1", "other": "text2"}})
    core(cl, "secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name},
                         "stringData": {"world": "text3"}})
    url = volume_service(cl, name, [{"name": "projectedv", "projected": {"sources": [
        {"configMap": {"name": name, "items": [{"key": "other", "path": "another"}], "optional": False}},
        {"secret": {"name": name, "items": [{"key": "world", "path": "world"}], "optional": False}}]}}],
        [{"name": "projectedv", "mountPath": "/hello", "readOnly": True}])
    assert file_text(cl, url, "/hello/world") == "text3"
    assert file_text(cl, url, "/hello/another") == "text2"


def test_projected_service_account_token(cl):
    name = "volume-satoken"
    url = volume_service(cl, name, [{"name": "projectedv", "projected": {
        "sources": [{"serviceAccountToken": {"audience": "api", "path": "token"}}], "defaultMode": 0o444}}],
        [{"name": "projectedv", "mountPath": "/hello/token", "subPath": "token", "readOnly": True}])
    token = file_text(cl, url, "/hello/token")
    assert re.match(r"[A-Za-z0-9-_=]+\.[A-Za-z0-9-_=]+\.?[A-Za-z0-9-_.+/=]*", token), token
    # knap's own checks: a JWT knapd signed for the Revision's service account
    # ("default") and the projection's audience, valid for the default hour.
    claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=" * (-len(token.split(".")[1]) % 4)))
    assert claims["aud"] == ["api"], claims
    assert claims["sub"] == "system:serviceaccount:default:default", claims
    assert claims["exp"] - claims["iat"] == 3600 and claims["exp"] > time.time() + 600, claims
