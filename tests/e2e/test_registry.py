"""Registry pulls end to end: `knap image pull` against Debian's docker-registry.

The registry runs on loopback with TLS from a test CA and htpasswd auth and
holds images pushed with skopeo (fixtures in registry.py). Faults — corrupted
blobs, broken transfers, a registry going down mid-pull — come from the
FaultProxy in registry_faults.py, a plain-HTTP proxy the client reaches
through `insecure-registries`. Each pull goes into its own containerd
namespace, emptied and removed afterwards. Needs root and containerd (skipped
loudly otherwise); fails when docker-registry/skopeo are missing.
"""
import http.client
import json
import platform
import random
import subprocess
import threading
import time
import uuid

import pytest

import registry as R
from conftest import Knapd

MACHINE_PLATFORM = {"x86_64": "linux/amd64", "aarch64": "linux/arm64"}.get(platform.machine(), "linux/amd64")
OTHER_PLATFORM = "linux/arm64" if MACHINE_PLATFORM == "linux/amd64" else "linux/amd64"
PULL_BOUND_SECONDS = 120  # a failing pull (with its retries) must give up within this


def ok(result):
    assert result.rc == 0, result
    assert result.digest_ref, f"no 'pulled IMAGE -> DIGEST_REF (N bytes fetched)' line: {result!r}"
    return result


def failed(result, reason, image):
    assert result.rc == 1, result
    assert result.reason == reason, f"want {reason}: {result!r}"
    assert f"error: pull {image}: {reason}: " in result.stderr, result
    return result


def image_check(ns, name):
    """The `ctr images check` row of `name`: (status, unpacked)."""
    for line in R.ctr(ns, "images", "check").stdout.splitlines()[1:]:
        cols = line.split()
        if cols and cols[0] == name:
            return " ".join(cols[3:5]), cols[-1]
    raise AssertionError(f"{name} not in `ctr -n {ns} images check`:\n{R.ctr(ns, 'images', 'check').stdout}")


def run_testapp(ns, image):
    """Runs the test app from `image` with --fail-start: proves the rootfs is unpacked and runnable."""
    cid = f"reg-e2e-{uuid.uuid4().hex[:8]}"
    p = R.ctr(ns, "run", "--rm", image, cid, "/app/knap-testapp", "--fail-start", check=False, timeout=60)
    assert p.returncode == 1 and "failing at start as asked" in p.stdout + p.stderr, \
        f"ctr run of {image}: rc={p.returncode}\n{p.stdout}\n{p.stderr}"


@pytest.fixture
def cfg(tmp_path, containerd_ns):
    """cfg(registry, **knap_config kwargs) -> path of a CLI config for the test's namespace."""
    def make(reg, **kw):
        return reg.write_config(str(tmp_path / f"knap-{uuid.uuid4().hex[:6]}.yaml"), namespace=containerd_ns, **kw)
    return make


# --------------------------------------------------------------------------
# The fixtures themselves (no root, no CLI): the registry really checks
# credentials and TLS, and the proxy's faults really break a standard client.
# --------------------------------------------------------------------------
def test_fixture_registry_enforces_auth_and_tls(registry, testapp_image):
    digest = registry.push(testapp_image, "fixture/app:v1")
    assert registry.request("GET", "/v2/", creds=False)[0] == 401
    assert registry.request("GET", "/v2/")[0] == 200
    assert registry.digest("fixture/app", "v1") == digest
    with pytest.raises(Exception, match="CERTIFICATE_VERIFY_FAILED"):
        import urllib.request
        urllib.request.urlopen(registry.url + "/v2/", timeout=5)
    blobs = registry.blobs("fixture/app", "v1")
    code, body, _ = registry.request("GET", f"/v2/fixture/app/blobs/{blobs[-1][0]}")
    assert code == 200 and len(body) == blobs[-1][1]
    deadline = time.time() + 5  # the access log line is written just after the response
    while registry.blob_gets("fixture/app", blobs[-1][0]) != 1 and time.time() < deadline:
        time.sleep(0.05)
    assert registry.blob_gets("fixture/app", blobs[-1][0]) == 1, registry.log()


def test_fixture_fault_proxy_breaks_skopeo(registry, make_fault_proxy, tmp_path):
    big = R.build_big_image(str(tmp_path / "big"), layer_mb=(2,))
    registry.push(big, "fixture/big:v1")
    proxy = make_fault_proxy(registry)

    def skopeo_pull():
        return subprocess.run([R.SKOPEO, "copy", "--retry-times", "1", "--src-tls-verify=false", "--src-creds",
                               f"{registry.user}:{registry.password}", "docker://" + proxy.image("fixture/big:v1"),
                               "oci:" + str(tmp_path / f"out-{uuid.uuid4().hex[:6]}")], capture_output=True, text=True)
    proxy.corrupt_blobs()
    p = skopeo_pull()
    assert p.returncode != 0 and "Digest did not match" in p.stderr, p.stderr
    proxy.corrupt_blobs([])
    proxy.cut_blobs(100_000)
    p = skopeo_pull()
    assert p.returncode == 0, p.stderr
    assert proxy.cut_count() == 1, proxy.describe()
    proxy.go_down_after(100_000)
    p = skopeo_pull()
    assert p.returncode != 0 and proxy.refused_connections > 0, proxy.describe()


# --------------------------------------------------------------------------
# Pulls that work
# --------------------------------------------------------------------------
def test_pull_by_tag_unpacks_a_runnable_image_and_refetches_nothing(registry, testapp_image, containerd_ns, cfg,
                                                                     knap_pull):
    digest = registry.push(testapp_image, "team/app:v1")
    image = registry.image("team/app:v1")
    r = ok(knap_pull(image, cfg(registry)))
    assert r.digest_ref == registry.image(f"team/app@{digest}"), r
    blobs = registry.blobs("team/app", "v1")
    assert r.bytes_fetched == sum(size for _, size in blobs), r
    images = R.ctr_images(containerd_ns)
    assert images.get(image) == digest and images.get(r.digest_ref) == digest, images
    for name in (image, r.digest_ref):
        status, unpacked = image_check(containerd_ns, name)
        assert status.startswith("complete") and unpacked == "true", (name, status, unpacked)
    assert {d for d, _ in blobs} <= R.ctr_content(containerd_ns)
    run_testapp(containerd_ns, image)

    gets = {d: registry.blob_gets("team/app", d) for d, _ in blobs}
    assert all(n == 1 for n in gets.values()), gets
    again = ok(knap_pull(image, cfg(registry)))
    assert again.digest_ref == r.digest_ref and again.bytes_fetched == 0, again
    assert {d: registry.blob_gets("team/app", d) for d, _ in blobs} == gets, "blobs fetched again"


def test_pull_by_digest(registry, testapp_image, containerd_ns, cfg, knap_pull):
    digest = registry.push(testapp_image, "team/app:v2")
    image = registry.image(f"team/app@{digest}")
    r = ok(knap_pull(image, cfg(registry), "--namespace", containerd_ns))
    assert r.digest_ref == image, r
    assert R.ctr_images(containerd_ns).get(image) == digest
    assert registry.image("team/app:v2") not in R.ctr_images(containerd_ns)
    status, unpacked = image_check(containerd_ns, image)
    assert status.startswith("complete") and unpacked == "true"
    run_testapp(containerd_ns, image)


@pytest.mark.parametrize("fmt", [None, "v2s2"], ids=["oci-index", "docker-manifest-list"])
def test_multiplatform_index_picks_this_machine_and_platform_flag_picks_other(registry, testapp_image, containerd_ns,
                                                                              cfg, knap_pull, tmp_path, fmt):
    src, _ = R.build_multiplatform_index(str(tmp_path / "multi"), testapp_image, tag="v1")
    if MACHINE_PLATFORM != "linux/amd64":
        pytest.fail("the multi-platform test image's runnable half is linux/amd64; this machine is "
                    + MACHINE_PLATFORM)
    index_digest = registry.push(src, "team/multi:v1", all=True, format=fmt)
    platforms = registry.platform_digests("team/multi", "v1")
    assert set(platforms) == {"linux/amd64", "linux/arm64"}, platforms
    other_blobs = {d for d, _ in registry.blobs("team/multi", "v1", platform=OTHER_PLATFORM)}
    mine_blobs = {d for d, _ in registry.blobs("team/multi", "v1", platform=MACHINE_PLATFORM)}
    image = registry.image("team/multi:v1")

    r = ok(knap_pull(image, cfg(registry)))
    assert r.digest_ref == registry.image(f"team/multi@{platforms[MACHINE_PLATFORM]}"), (r, platforms)
    assert all(registry.blob_gets("team/multi", d) == 1 for d in mine_blobs - other_blobs)
    assert all(registry.blob_gets("team/multi", d) == 0 for d in other_blobs - mine_blobs), \
        "fetched the other platform's blobs"
    images = R.ctr_images(containerd_ns)
    assert image in images and r.digest_ref in images, images
    assert images[image] in (index_digest, platforms[MACHINE_PLATFORM]), images
    run_testapp(containerd_ns, image)

    other = ok(knap_pull(registry.image("team/multi:v1"), cfg(registry), "--platform", OTHER_PLATFORM))
    assert other.digest_ref == registry.image(f"team/multi@{platforms[OTHER_PLATFORM]}"), (other, platforms)
    assert all(registry.blob_gets("team/multi", d) == 1 for d in other_blobs - mine_blobs)
    assert other.digest_ref in R.ctr_images(containerd_ns)


def test_platform_from_config(registry, testapp_image, containerd_ns, cfg, knap_pull, tmp_path):
    src, _ = R.build_multiplatform_index(str(tmp_path / "multi"), testapp_image, tag="v1")
    registry.push(src, "team/multi:v1", all=True)
    platforms = registry.platform_digests("team/multi", "v1")
    r = ok(knap_pull(registry.image("team/multi:v1"), cfg(registry, extra="  platform: linux/arm64\n")))
    assert r.digest_ref == registry.image(f"team/multi@{platforms['linux/arm64']}"), (r, platforms)


# --------------------------------------------------------------------------
# Pulls that fail with a reason a person can act on
# --------------------------------------------------------------------------
def test_wrong_credentials_are_unauthorized(registry, testapp_image, containerd_ns, cfg, knap_pull):
    registry.push(testapp_image, "team/app:v1")
    image = registry.image("team/app:v1")
    r = failed(knap_pull(image, cfg(registry, password="not-the-password")), "Unauthorized", image)
    assert registry.host in r.message, r
    assert r.seconds < PULL_BOUND_SECONDS, r
    assert image not in R.ctr_images(containerd_ns)


def test_no_credentials_are_unauthorized(registry, testapp_image, containerd_ns, cfg, knap_pull):
    registry.push(testapp_image, "team/app:v1")
    image = registry.image("team/app:v1")
    r = failed(knap_pull(image, cfg(registry, auth=False)), "Unauthorized", image)
    assert registry.host in r.message, r
    assert R.ctr_images(containerd_ns) == {}


def test_unknown_tag_and_repository_are_manifest_unknown(registry, testapp_image, containerd_ns, cfg, knap_pull):
    registry.push(testapp_image, "team/app:v1")
    for ref in ("team/app:v404", "team/nothing:v1", "team/app@sha256:" + "0" * 64):
        image = registry.image(ref)
        failed(knap_pull(image, cfg(registry)), "ManifestUnknown", image)
    assert R.ctr_images(containerd_ns) == {}


def test_invalid_image_name(registry, containerd_ns, cfg, knap_pull):
    for image in (registry.image("Team/App:v1"), registry.image("team/app:bad tag"), registry.image("team/app:v1/"),
                  registry.image("team/app@sha256:abc")):
        failed(knap_pull(image, cfg(registry)), "InvalidImageName", image)


def test_untrusted_tls_is_unreachable_with_certificate_in_message(registry, testapp_image, containerd_ns, cfg,
                                                                   knap_pull):
    registry.push(testapp_image, "team/app:v1")
    image = registry.image("team/app:v1")
    r = failed(knap_pull(image, cfg(registry, ca=False)), "RegistryUnreachable", image)
    assert "certificate" in r.message.lower(), r
    assert r.seconds < PULL_BOUND_SECONDS, r
    assert R.ctr_images(containerd_ns) == {}


def test_plain_http_registry_needs_insecure_registries(make_registry, testapp_image, containerd_ns, cfg, knap_pull,
                                                       tmp_path):
    plain = make_registry(tls=False)
    digest = plain.push(testapp_image, "team/app:v1")
    image = plain.image("team/app:v1")
    # Without insecure-registries the client must not fall back to plain HTTP.
    cfg_secure = str(tmp_path / "no-insecure.yaml")
    with open(cfg_secure, "w") as f:
        f.write(f"knap:\n  containerd-namespace: {containerd_ns}\n  registry-auth-file: {plain.auth_file()}\n")
    failed(knap_pull(image, cfg_secure), "RegistryUnreachable", image)
    r = ok(knap_pull(image, cfg(plain)))
    assert r.digest_ref == plain.image(f"team/app@{digest}")


def test_corrupted_blob_is_rejected_by_digest_and_not_stored(registry, testapp_image, containerd_ns, cfg, knap_pull,
                                                               make_fault_proxy):
    digest = registry.push(testapp_image, "team/app:v1")
    proxy = make_fault_proxy(registry)
    layer = registry.blobs("team/app", "v1")[-1][0]
    proxy.corrupt_blobs([layer])
    image = proxy.image("team/app:v1")
    config = cfg(registry, host=proxy.host, insecure=[proxy.host])
    r = failed(knap_pull(image, config), "DigestMismatch", image)
    assert r.seconds < PULL_BOUND_SECONDS, r
    assert any(q.corrupted for q in proxy.blob_gets(layer)), proxy.describe()
    assert layer not in R.ctr_content(containerd_ns), "corrupted blob committed to the content store"
    assert image not in R.ctr_images(containerd_ns)
    # Once the registry serves it right, the same pull works (nothing poisoned was kept).
    proxy.corrupt_blobs([])
    r = ok(knap_pull(image, config))
    assert r.digest_ref == proxy.image(f"team/app@{digest}")
    assert layer in R.ctr_content(containerd_ns)
    run_testapp(containerd_ns, image)


# --------------------------------------------------------------------------
# Broken transfers and a registry that goes away
# --------------------------------------------------------------------------
@pytest.fixture
def big(registry, tmp_path):
    """(repo:tag, [(digest, size)]) of a pushed image with two distinct 8 MiB random layers."""
    src = R.build_big_image(str(tmp_path / "big"), layer_mb=(8, 8))
    registry.push(src, "team/big:v1")
    return "team/big:v1", registry.blobs("team/big", "v1")


def test_connection_cut_once_mid_blob_is_retried_and_the_pull_succeeds(registry, big, containerd_ns, cfg,
                                                                        knap_pull, make_fault_proxy):
    ref, blobs = big
    proxy = make_fault_proxy(registry)
    layer = blobs[1][0]
    proxy.cut_blobs(1_000_000, times=1, digest=layer)
    r = ok(knap_pull(proxy.image(ref), cfg(registry, host=proxy.host, insecure=[proxy.host])))
    assert proxy.cut_count() == 1, proxy.describe()
    gets = proxy.blob_gets(layer)
    assert len(gets) >= 2, proxy.describe()
    assert gets[0].cut and not gets[-1].cut and gets[-1].status in (200, 206), proxy.describe()
    content = R.ctr(containerd_ns, "content", "ls").stdout
    assert all(d in content for d, _ in blobs), content
    assert r.digest_ref in R.ctr_images(containerd_ns)


def test_broken_transfer_resumes_from_where_it_stopped(registry, big, containerd_ns, cfg, knap_pull,
                                                       make_fault_proxy):
    ref, blobs = big
    proxy = make_fault_proxy(registry)
    layer = blobs[1][0]
    proxy.cut_blobs(3_000_000, times=1, digest=layer)
    ok(knap_pull(proxy.image(ref), cfg(registry, host=proxy.host, insecure=[proxy.host])))
    gets = proxy.blob_gets(layer)
    assert gets[0].cut, proxy.describe()
    resumed = [g for g in gets[1:] if g.range and g.status == 206]
    assert resumed, "the retry fetched the blob from the start instead of resuming:\n" + proxy.describe()
    start = int(resumed[0].range.split("=")[1].split("-")[0])
    assert 0 < start <= gets[0].sent, proxy.describe()


@pytest.mark.parametrize("mode", ["reset", "closed"])
def test_registry_gone_mid_pull_is_retried_then_unreachable(registry, big, containerd_ns, cfg, knap_pull,
                                                             make_fault_proxy, mode):
    ref, blobs = big
    proxy = make_fault_proxy(registry)
    proxy.go_down_after(1_000_000, digest=blobs[1][0], mode=mode)
    image = proxy.image(ref)
    r = failed(knap_pull(image, cfg(registry, host=proxy.host, insecure=[proxy.host]), timeout=PULL_BOUND_SECONDS + 60),
               "RegistryUnreachable", image)
    assert r.seconds < PULL_BOUND_SECONDS, r
    assert proxy.cut_count() == 1, proxy.describe()
    if mode == "reset":
        assert proxy.refused_connections >= 1, "no retry after the connection broke:\n" + proxy.describe()
    assert proxy.host in r.message, r
    assert image not in R.ctr_images(containerd_ns)
    assert blobs[1][0] not in R.ctr_content(containerd_ns)
    # The registry is back: the pull now works.
    proxy.accept()
    ok(knap_pull(image, cfg(registry, host=proxy.host, insecure=[proxy.host])))


def test_real_registry_stopped_mid_pull(registry, big, containerd_ns, cfg, knap_pull, make_fault_proxy):
    """docker-registry itself is stopped while a (throttled) blob transfer is running."""
    ref, blobs = big
    proxy = make_fault_proxy(registry)
    proxy.throttle(2_000_000)  # ~8 s for the two 8 MiB layers
    image = proxy.image(ref)
    config = cfg(registry, host=proxy.host, insecure=[proxy.host])
    p = subprocess.Popen(R.knap_pull_cmd(image, config), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t0 = time.time()
    try:
        deadline = time.time() + 30
        while not any(g.sent > 500_000 for g in proxy.blob_gets()):
            assert time.time() < deadline and p.poll() is None, "pull did not start fetching:\n" + proxy.describe()
            time.sleep(0.05)
        registry.stop(kill=True)
        out, err = p.communicate(timeout=PULL_BOUND_SECONDS + 60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    r = R.PullResult(subprocess.CompletedProcess(p.args, p.returncode, out, err), time.time() - t0)
    failed(r, "RegistryUnreachable", image)
    assert r.seconds < PULL_BOUND_SECONDS, r
    assert any(g.upstream_error for g in proxy.log()), proxy.describe()
    registry.start()
    proxy.throttle(None)
    ok(knap_pull(image, config))


# --------------------------------------------------------------------------
# Concurrency
# --------------------------------------------------------------------------
def test_concurrent_cli_pulls_of_one_image_both_succeed_with_one_consistent_image(registry, big, containerd_ns,
                                                                                    cfg, make_fault_proxy):
    """Two `knap image pull` processes at once (throttled so they overlap). One process's single-flight
    sharing is knapd's (tests of images/ and the pre-puller); here: both succeed, same digest ref, one
    image, each blob stored once, and no blob fetched more than once per process."""
    ref, blobs = big
    proxy = make_fault_proxy(registry)
    proxy.throttle(8_000_000)
    image = proxy.image(ref)
    config = cfg(registry, host=proxy.host, insecure=[proxy.host])
    results = [None, None]

    def pull(i):
        results[i] = R.run_knap_pull(image, config, timeout=PULL_BOUND_SECONDS)
    threads = [threading.Thread(target=pull, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    a, b = (ok(x) for x in results)
    assert a.digest_ref == b.digest_ref == proxy.image(f"team/big@{registry.digest('team/big', 'v1')}"), (a, b)
    images = R.ctr_images(containerd_ns)
    assert set(images) == {image, a.digest_ref}, images
    assert images[image] == images[a.digest_ref]
    content = R.ctr(containerd_ns, "content", "ls").stdout.splitlines()
    for d, size in blobs:
        rows = [row for row in content if row.startswith(d)]
        assert len(rows) == 1, (d, content)
        assert len(proxy.blob_gets(d)) <= 2, proxy.describe()
    status, unpacked = image_check(containerd_ns, image)
    assert status.startswith("complete") and unpacked == "true"


# --------------------------------------------------------------------------
# Through knapd: two Revisions of one image, one pull
# --------------------------------------------------------------------------
SERVICES = "/apis/serving.knative.dev/v1/namespaces/default/services"
REVISIONS = "/apis/serving.knative.dev/v1/namespaces/default/revisions"


def _ready_revision(k, name):
    code, body, _ = k.http("GET", f"{REVISIONS}/{name}")
    if code != 200:
        return None
    rev = json.loads(body)
    for c in (rev.get("status") or {}).get("conditions", []):
        if c.get("type") == "Ready" and c.get("status") == "True":
            return rev
    return None


def test_knapd_two_services_of_one_image_share_one_pull(registry, testapp_image, workdir, containerd_ns,
                                                        make_fault_proxy):
    """Two Services created together with one registry image: knapd pulls it once (every blob is
    fetched once from the registry) while both wait, and both then serve."""
    digest = registry.push(testapp_image, "team/shared:v1")
    blobs = registry.blobs("team/shared", "v1")
    proxy = make_fault_proxy(registry)
    proxy.throttle(max(sum(size for _, size in blobs) // 4, 64 * 1024))  # the pull takes ~4 s
    tag = random.randrange(60, 210)
    k = Knapd(workdir, runtime="containerd", extra_config=(
        f"  containerd-namespace: {containerd_ns}\n"
        f"  bridge-name: knapreg{tag}\n"
        f"  pod-subnet: 10.216.{tag}.0/24\n"
        "  metrics-listen: 127.0.0.1:0\n" + registry.knap_config(host=proxy.host, insecure=[proxy.host])))
    k.start(timeout=60)
    image = proxy.image("team/shared:v1")
    try:
        for name in ("one", "two"):
            doc = {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": name},
                   "spec": {"template": {"metadata": {"name": f"{name}-rev"},
                                         "spec": {"containers": [{"image": image}]}}}}
            code, body, _ = k.http("POST", SERVICES, json.dumps(doc))
            assert code == 201, body
        both_created = time.time()
        revs = [k.wait_for(lambda n=n: _ready_revision(k, n), timeout=120, what=f"Revision {n} Ready")
                for n in ("one-rev", "two-rev")]
        pinned = proxy.image(f"team/shared@{digest}")
        for rev in revs:
            assert rev["status"]["containerStatuses"][0]["imageDigest"] == pinned, rev["status"]
        layer_gets = proxy.blob_gets(blobs[-1][0])
        assert layer_gets and layer_gets[0].done > both_created, \
            "the pull was over before the second Service existed: nothing was shared\n" + proxy.describe()
        for d, _ in blobs:
            assert len(proxy.blob_gets(d)) == 1, f"{d} fetched more than once:\n{proxy.describe()}"
            assert registry.blob_gets("team/shared", d) == 1, registry.requests()
        for name in ("one", "two"):
            # A Revision is Ready before its Route reaches the router (the
            # Route's IngressReady is not yet confirmed by the router): wait
            # for the host to be routed, bounded, before judging the answer.
            deadline = time.monotonic() + 30
            while True:
                c = http.client.HTTPConnection("127.0.0.1", k.router_port, timeout=60)
                c.request("GET", "/", headers={"Host": f"{name}.default.localhost"})
                r = c.getresponse()
                body = r.read().decode()
                c.close()
                if r.status != 404 or "no route for host" not in body or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            assert r.status == 200 and json.loads(body)["revision"] == f"{name}-rev", body
    finally:
        for name in ("one", "two"):
            k.http("DELETE", f"{SERVICES}/{name}")
        deadline = time.time() + 30  # let the runner stop and destroy the pods
        while time.time() < deadline and R.ctr(containerd_ns, "containers", "ls", "-q", check=False).stdout.strip():
            time.sleep(0.2)
        k.stop()
        subprocess.run(["ip", "link", "del", f"knapreg{tag}"], capture_output=True)


def _revision_condition(k, name, ctype):
    code, body, _ = k.http("GET", f"{REVISIONS}/{name}")
    if code != 200:
        return None
    for c in (json.loads(body).get("status") or {}).get("conditions", []):
        if c.get("type") == ctype:
            return c
    return None


def test_knapd_image_pull_secrets(registry, testapp_image, workdir, containerd_ns):
    """A registry that requires auth and a knapd with no registry-auth-file: a Revision without
    imagePullSecrets fails its pull with a clear condition; a kubernetes.io/dockerconfigjson Secret created
    with `kubectl create secret docker-registry` and named in imagePullSecrets makes the pull succeed."""
    registry.push(testapp_image, "team/private:v1")
    tag = random.randrange(60, 210)
    k = Knapd(workdir, runtime="containerd", extra_config=(
        f"  containerd-namespace: {containerd_ns}\n"
        f"  bridge-name: knappsec{tag}\n"
        f"  pod-subnet: 10.228.{tag}.0/24\n"
        "  metrics-listen: 127.0.0.1:0\n" + registry.knap_config(auth=False)))
    k.start(timeout=60)
    image = registry.image("team/private:v1")

    def service(name, secrets=None):
        spec = {"containers": [{"image": image}]}
        if secrets:
            spec["imagePullSecrets"] = [{"name": s} for s in secrets]
        return json.dumps({"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": name},
                           "spec": {"template": {"metadata": {"name": f"{name}-rev"}, "spec": spec}}})
    try:
        code, body, _ = k.http("POST", SERVICES, service("nosecret"))
        assert code == 201, body
        cond = k.wait_for(lambda: (lambda c: c if c and c.get("status") == "False" else None)(
            _revision_condition(k, "nosecret-rev", "ContainerHealthy")), timeout=60, what="the pull refused")
        assert cond["reason"] == "Unauthorized", cond
        assert registry.host in cond["message"] and "imagePullSecrets" in cond["message"], cond
        k.http("DELETE", f"{SERVICES}/nosecret")
        k.wait_for(lambda: k.http("GET", f"{REVISIONS}/nosecret-rev")[0] == 404, what="the failed Revision gone")

        # A Secret of another type is not a registry credential: still refused.
        k.kubectl("create", "secret", "generic", "notreg", "--from-literal=.dockerconfigjson={}")
        k.kubectl("create", "secret", "docker-registry", "regcred", f"--docker-server={registry.host}",
                  f"--docker-username={registry.user}", f"--docker-password={registry.password}")
        code, body, _ = k.http("POST", SERVICES, service("withsecret", ["missing", "notreg", "regcred"]))
        assert code == 201, body
        rev = k.wait_for(lambda: _ready_revision(k, "withsecret-rev"), timeout=120, what="withsecret-rev Ready")
        assert rev["status"]["containerStatuses"][0]["imageDigest"].startswith(registry.image("team/private@sha256:"))
        deadline = time.monotonic() + 30
        while True:
            c = http.client.HTTPConnection("127.0.0.1", k.router_port, timeout=60)
            c.request("GET", "/", headers={"Host": "withsecret.default.localhost"})
            r = c.getresponse()
            body = r.read().decode()
            c.close()
            if r.status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert r.status == 200 and json.loads(body)["revision"] == "withsecret-rev", body
    finally:
        R.teardown_knapd_pods(k, containerd_ns, f"knappsec{tag}")
