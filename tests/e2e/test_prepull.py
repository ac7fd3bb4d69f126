"""Pre-pulling through knapd: Revisions wait for their image, pinned to the registry's digest.

Each test runs a real knapd (--runtime containerd, its own containerd
namespace, bridge and subnet) against Debian's docker-registry on loopback
(tests/e2e/registry.py: TLS from a test CA, htpasswd auth, images pushed with
skopeo), and deploys Services whose image lives in that registry.
"""
import http.client
import json
import os
import subprocess
import time
import uuid

import pytest

from conftest import Knapd
from registry import build_testapp_image, ctr_images, require_root_and_containerd, teardown_knapd_pods

API = "/apis/serving.knative.dev/v1/namespaces/default"


class Env:
    """One knapd on containerd with a namespace, bridge and subnet of its own."""

    def __init__(self, workdir):
        tag = (os.getpid() + 37) % 150 + 60
        self.ns = f"knap-e2e-pp-{uuid.uuid4().hex[:8]}"
        self.workdir = workdir
        self.bridge = f"knappp{tag}"
        self.base = (f"  containerd-namespace: {self.ns}\n"
                     f"  bridge-name: {self.bridge}\n"
                     f"  pod-subnet: 10.219.{tag}.0/24\n"
                     "  metrics-listen: 127.0.0.1:0\n")
        self.knapd = None

    def start(self, extra=""):
        self.knapd = Knapd(self.workdir, runtime="containerd", extra_config=self.base + extra)
        return self.knapd.start(timeout=60)

    def close(self):
        teardown_knapd_pods(self.knapd, self.ns, self.bridge)


@pytest.fixture
def env(workdir):
    require_root_and_containerd()
    e = Env(workdir)
    yield e
    e.close()


def create_service(k, name, image, revision, env_value=None):
    container = {"image": image}
    if env_value is not None:
        container["env"] = [{"name": "MARK", "value": env_value}]
    doc = {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": name},
           "spec": {"template": {"metadata": {"name": revision}, "spec": {"containers": [container]}}}}
    code, body, _ = k.http("POST", API + "/services", json.dumps(doc))
    assert code == 201, body


def new_revision(k, name, revision):
    patch = {"spec": {"template": {"metadata": {"name": revision}}}}
    code, body, _ = k.http("PATCH", f"{API}/services/{name}", json.dumps(patch),
                           content_type="application/merge-patch+json")
    assert code == 200, body


def revision(k, name):
    code, body, _ = k.http("GET", f"{API}/revisions/{name}")
    return json.loads(body) if code == 200 else None


def condition(obj, type_="Ready"):
    for c in ((obj or {}).get("status") or {}).get("conditions", []):
        if c.get("type") == type_:
            return c
    return {}


def image_digest(obj):
    cs = ((obj or {}).get("status") or {}).get("containerStatuses") or [{}]
    return cs[0].get("imageDigest")


def wait_ready(k, name, timeout=90):
    return k.wait_for(lambda: (lambda r: r if condition(r).get("status") == "True" else None)(revision(k, name)),
                      timeout=timeout, what=f"Revision {name} Ready")


def wait_reason(k, name, reason, status=None, timeout=60):
    def check():
        r = revision(k, name)
        c = condition(r)
        if c.get("reason") == reason and (status is None or c.get("status") == status):
            return r
        return None
    return k.wait_for(check, timeout=timeout, what=f"Revision {name} Ready reason {reason}")


def get(k, host, timeout=30):
    """GET / through the router. A Revision's Ready comes before its Route reaches
    the router's table (the router programs routes asynchronously; IngressReady is
    not yet confirmed by the router), so an unknown host is retried for a while."""
    deadline = time.monotonic() + 30
    while True:
        c = http.client.HTTPConnection("127.0.0.1", k.router_port, timeout=timeout)
        c.request("GET", "/", headers={"Host": host})
        r = c.getresponse()
        body = r.read().decode()
        c.close()
        if r.status != 404 or "no route for host" not in body or time.monotonic() > deadline:
            return r.status, body
        time.sleep(0.1)


def test_revision_is_ready_only_after_the_pull_and_pinned_to_the_registry_digest(
        env, make_registry, make_fault_proxy, testapp_image):
    reg = make_registry()
    d1 = reg.push(testapp_image, "app:v1")
    # A slow link (blobs only) so the pull is seen in progress.
    proxy = make_fault_proxy(reg)
    size = sum(s for _, s in reg.blobs("app", "v1"))
    proxy.throttle(max(size // 8, 64 * 1024))
    k = env.start(reg.knap_config(host=proxy.host, insecure=[proxy.host]))
    image = proxy.image("app:v1")
    pinned = f"{proxy.host}/app@{d1}"

    create_service(k, "slow", image, "slow-one")

    # While pulling: not Ready, the reason says why and the message shows progress;
    # the digest is pinned as soon as the tag is resolved.
    def pulling():
        r = revision(k, "slow-one")
        c = condition(r)
        return r if c.get("reason") == "PullingImage" and " MB" in c.get("message", "") else None
    r = k.wait_for(pulling, timeout=30, what="pull progress in the Revision's status")
    c = condition(r)
    assert c["status"] == "Unknown", c
    assert c["message"].startswith(f"pulling {image}: "), c
    assert image_digest(r) == pinned
    assert condition(r, "ContainerHealthy")["reason"] == "PullingImage"
    described = k.knap("describe", "revision", "slow-one").stdout
    assert "PullingImage" in described and f"pulling {image}" in described, described
    # The Revision has not reached the pod runner: no container exists yet.
    if condition(revision(k, "slow-one")).get("reason") == "PullingImage":
        containers = subprocess.run(["ctr", "-n", env.ns, "containers", "ls", "-q"], capture_output=True,
                                    text=True).stdout.split()
        assert containers == [], containers

    r = wait_ready(k, "slow-one", timeout=120)
    assert image_digest(r) == pinned
    described = k.knap("describe", "revision", "slow-one").stdout
    assert f"Image:      {image}" in described and f"Digest:     {pinned}" in described, described
    assert ctr_images(env.ns).get(pinned) == d1
    code, body = get(k, "slow.default.localhost")
    assert code == 200, body
    assert json.loads(body)["revision"] == "slow-one"


def test_a_re_pushed_tag_does_not_move_a_running_revision_and_a_new_revision_resolves_it(
        env, make_registry, testapp_image, workdir):
    reg = make_registry()
    d1 = reg.push(testapp_image, "app:v1")
    k = env.start(reg.knap_config())
    create_service(k, "pin", reg.image("app:v1"), "pin-one")
    assert image_digest(wait_ready(k, "pin-one")) == f"{reg.host}/app@{d1}"

    marker = os.path.join(workdir, "marker.txt")
    with open(marker, "w") as f:
        f.write("second build\n")
    other = build_testapp_image(os.path.join(workdir, "other.tar"), extra_files=[(marker, "/app/marker.txt")])
    d2 = reg.push(other, "app:v1")
    assert d2 != d1

    # A restart reads the pin back from the Revision's status: no re-resolution.
    k.stop()
    k.start(timeout=60)
    r = wait_ready(k, "pin-one")
    assert image_digest(r) == f"{reg.host}/app@{d1}"
    assert get(k, "pin.default.localhost")[0] == 200

    new_revision(k, "pin", "pin-two")
    r2 = wait_ready(k, "pin-two")
    assert image_digest(r2) == f"{reg.host}/app@{d2}"
    assert image_digest(revision(k, "pin-one")) == f"{reg.host}/app@{d1}"
    k.wait_for(lambda: json.loads(get(k, "pin.default.localhost")[1])["revision"] == "pin-two", timeout=60,
               what="traffic on pin-two")


def test_wrong_credentials_are_an_unauthorized_condition_naming_the_registry(env, make_registry, testapp_image):
    reg = make_registry()
    reg.push(testapp_image, "app:v1")
    k = env.start(reg.knap_config(password="not-the-password"))
    create_service(k, "locked", reg.image("app:v1"), "locked-one")
    r = wait_reason(k, "locked-one", "Unauthorized", status="False")
    c = condition(r)
    assert reg.host in c["message"], c
    assert condition(r, "ContainerHealthy")["status"] == "False"
    assert "Unauthorized" in k.knap("describe", "revision", "locked-one").stdout


def test_a_stopped_registry_is_retried_with_backoff_until_the_revision_is_ready(env, make_registry, testapp_image):
    reg = make_registry()
    d1 = reg.push(testapp_image, "app:v1")
    reg.stop()
    k = env.start(reg.knap_config() + "  pull-retry-max: 2s\n")
    create_service(k, "later", reg.image("app:v1"), "later-one")
    r = wait_reason(k, "later-one", "RegistryUnreachable", status="False")
    assert reg.host in condition(r)["message"], condition(r)
    assert "attempt" not in condition(r)["message"], condition(r)  # no retry counter: no rewrite per retry

    reg.start()  # nothing else is done: the back-off retry finds it
    r = wait_ready(k, "later-one", timeout=90)
    assert image_digest(r) == f"{reg.host}/app@{d1}"
    assert get(k, "later.default.localhost")[0] == 200


def test_an_unknown_tag_is_manifest_unknown(env, make_registry, testapp_image):
    reg = make_registry()
    reg.push(testapp_image, "app:v1")
    k = env.start(reg.knap_config())
    create_service(k, "typo", reg.image("app:v9"), "typo-one")
    r = wait_reason(k, "typo-one", "ManifestUnknown", status="False")
    assert "app" in condition(r)["message"], condition(r)
    assert image_digest(r) is None


def test_pre_pull_images_are_pulled_at_start_before_any_revision(env, make_registry, testapp_image):
    reg = make_registry()
    d1 = reg.push(testapp_image, "app:v1")
    image = reg.image("app:v1")
    k = env.start(reg.knap_config() + f'  pre-pull-images: ["{image}"]\n')
    images = k.wait_for(lambda: (lambda i: i if image in i else None)(ctr_images(env.ns)), timeout=60,
                        what="the pre-pulled image in containerd")
    assert images[image] == d1
    code, body, _ = k.http("GET", "/apis/serving.knative.dev/v1/revisions")
    assert code == 200 and json.loads(body)["items"] == []


def test_image_gc_frees_unused_images_and_keeps_those_of_live_revisions(env, make_registry, testapp_image,
                                                                        workdir):
    reg = make_registry()
    d1 = reg.push(testapp_image, "app:v1")
    marker = os.path.join(workdir, "marker.txt")
    with open(marker, "w") as f:
        f.write("unused\n")
    unused = build_testapp_image(os.path.join(workdir, "unused.tar"), extra_files=[(marker, "/app/marker.txt")])
    reg.push(unused, "unused:v1")
    # Thresholds that any disk is above: every pass frees all it may.
    k = env.start(reg.knap_config() + f'  pre-pull-images: ["{reg.image("unused:v1")}"]\n')
    k.wait_for(lambda: reg.image("unused:v1") in ctr_images(env.ns), timeout=60, what="pre-pulled image")
    create_service(k, "kept", reg.image("app:v1"), "kept-one")
    wait_ready(k, "kept-one")
    k.stop()
    # Restart without the pre-pull list and with aggressive GC.
    k = env.start(reg.knap_config() + "  image-gc-interval: 1s\n  image-gc-min-age: 0s\n"
                  "  image-gc-high-threshold-percent: 1\n  image-gc-low-threshold-percent: 0\n")
    k.wait_for(lambda: reg.image("unused:v1") not in ctr_images(env.ns), timeout=30, what="unused image collected")
    names = ctr_images(env.ns)
    assert names.get(f"{reg.host}/app@{d1}") == d1, names
    r = wait_ready(k, "kept-one")
    assert image_digest(r) == f"{reg.host}/app@{d1}"
    assert get(k, "kept.default.localhost")[0] == 200


def test_a_multi_platform_tag_is_pinned_to_its_index_and_runs_this_machines_image(env, make_registry,
                                                                                  testapp_image, workdir):
    from registry import build_multiplatform_index
    reg = make_registry()
    src, platforms = build_multiplatform_index(os.path.join(workdir, "multi"), testapp_image)
    index_digest = reg.push(src, "multi:v1")
    assert index_digest not in platforms.values()
    k = env.start(reg.knap_config())
    create_service(k, "multi", reg.image("multi:v1"), "multi-one")
    r = wait_ready(k, "multi-one")
    assert image_digest(r) == f"{reg.host}/multi@{index_digest}"  # Knative pins what the tag points at
    code, body = get(k, "multi.default.localhost")
    assert code == 200 and json.loads(body)["revision"] == "multi-one", body


def test_revisions_of_one_image_share_one_pull(env, make_registry, testapp_image):
    reg = make_registry()
    reg.push(testapp_image, "app:v1")
    blobs = [d for d, _ in reg.blobs("app", "v1")]
    before = {d: reg.blob_gets(repo="app", digest=d, status=200) for d in blobs}
    k = env.start(reg.knap_config())
    for i in range(3):
        create_service(k, f"twin{i}", reg.image("app:v1"), f"twin{i}-one")
    digests = {image_digest(wait_ready(k, f"twin{i}-one")) for i in range(3)}
    assert len(digests) == 1, digests
    for d in blobs:
        assert reg.blob_gets(repo="app", digest=d, status=200) - before[d] == 1, (d, reg.requests())
