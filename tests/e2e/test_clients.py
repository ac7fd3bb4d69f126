"""Independent Kubernetes clients against knapd: python3-kubernetes (Debian) and
@kubernetes/client-node (npm, installed by tools/install-node-clients.sh from
tests/e2e/node/package-lock.json).

Both load the kubeconfig knapd writes, so they follow the API wherever it goes
(plain loopback today, TLS with a credential once issue 9 lands). Each client
does CRUD, a watch, an informer-style cache that follows a relabel (the object
leaves the label selector: DELETED; comes back: ADDED), limit/continue paging,
and a patch storm against a Service the controller keeps rewriting, where no
patch may get a 409.
"""
import concurrent.futures
import json
import os
import shutil
import subprocess
import threading
import time

import pytest

from conftest import ROOT, Knapd

kubernetes = pytest.importorskip(
    "kubernetes", reason="!!! python3-kubernetes is not installed (tools/packages/clients.test): SKIPPED !!!")
from kubernetes import client as kclient, config as kconfig, watch as kwatch  # noqa: E402

G = dict(group="serving.knative.dev", version="v1", namespace="default", plural="services")
NODE_DIR = os.path.join(ROOT, "tests", "e2e", "node")


def service(name, labels=None):
    return {"apiVersion": "serving.knative.dev/v1", "kind": "Service",
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"template": {"spec": {"containers": [{"image": "ghcr.io/knative/helloworld-go:latest"}]}}}}


@pytest.fixture
def knapd(workdir):
    # Its own metrics port too, so that another knapd on this machine does not collide.
    k = Knapd(workdir, extra_config="  metrics-listen: 127.0.0.1:0\n").start()
    yield k
    k.stop()


@pytest.fixture
def api(knapd):
    c = kconfig.new_client_from_config(config_file=knapd.kubeconfig)
    yield kclient.CustomObjectsApi(c)
    c.close()


def test_python_client_crud(api):
    created = api.create_namespaced_custom_object(**G, body=service("py-crud", {"app": "crud"}))
    assert created["metadata"]["uid"]
    got = api.get_namespaced_custom_object(**G, name="py-crud")
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    patched = api.patch_namespaced_custom_object(**G, name="py-crud", body={"metadata": {"labels": {"p": "1"}}})
    assert patched["metadata"]["labels"] == {"app": "crud", "p": "1"}
    # Read-modify-write retried on conflict, as client-go's RetryOnConflict does: knapd's controller writes
    # the Service's status concurrently, so a replace at the version just read may lose that race (409).
    for _ in range(20):
        latest = api.get_namespaced_custom_object(**G, name="py-crud")
        latest["metadata"]["annotations"]["replaced"] = "yes"
        try:
            replaced = api.replace_namespaced_custom_object(**G, name="py-crud", body=latest)
            break
        except kclient.exceptions.ApiException as e:
            assert e.status == 409, e
    else:
        raise AssertionError("replace lost 20 races in a row")
    assert replaced["metadata"]["annotations"]["replaced"] == "yes"
    assert replaced["metadata"]["labels"] == {"app": "crud", "p": "1"}
    # A stale resourceVersion on replace is still a 409.
    with pytest.raises(kclient.exceptions.ApiException) as stale:
        api.replace_namespaced_custom_object(**G, name="py-crud", body=got)
    assert stale.value.status == 409
    names = [i["metadata"]["name"] for i in api.list_namespaced_custom_object(**G, label_selector="app=crud")["items"]]
    assert names == ["py-crud"]
    api.delete_namespaced_custom_object(**G, name="py-crud")
    with pytest.raises(kclient.exceptions.ApiException) as gone:
        api.get_namespaced_custom_object(**G, name="py-crud")
    assert gone.value.status == 404


def test_python_client_watch_sees_added_modified_deleted(api):
    seen = []
    started = threading.Event()
    # A sentinel that exists before the watch: its ADDED (from the watch's initial state) shows the watch is
    # established, so the changes below cannot happen before it (a fixed sleep raced the TLS set-up).
    api.create_namespaced_custom_object(**G, body=service("py-watch-sentinel", {"app": "watch"}))

    def run():
        w = kwatch.Watch()
        # The Python client sends watch=True (capital T).
        for ev in w.stream(api.list_namespaced_custom_object, **G, label_selector="app=watch", timeout_seconds=20):
            seen.append((ev["type"], ev["object"]["metadata"]["name"]))
            if ev["object"]["metadata"]["name"] == "py-watch-sentinel":
                started.set()
            if ev["type"] == "DELETED" and ev["object"]["metadata"]["name"] == "py-watch":
                w.stop()

    t = threading.Thread(target=run)
    t.start()
    assert started.wait(timeout=20), f"the watch did not start: {seen}"
    api.create_namespaced_custom_object(**G, body=service("py-watch", {"app": "watch"}))
    api.patch_namespaced_custom_object(**G, name="py-watch", body={"metadata": {"annotations": {"n": "1"}}})
    api.delete_namespaced_custom_object(**G, name="py-watch")
    t.join(timeout=25)
    api.delete_namespaced_custom_object(**G, name="py-watch-sentinel")
    types = [s[0] for s in seen if s[1] == "py-watch"]
    assert types and types[0] == "ADDED" and "MODIFIED" in types and types[-1] == "DELETED", seen


def test_python_informer_follows_a_relabel(api):
    """A list+watch cache (what an informer keeps) with a label selector: the
    object leaving the selector must be removed from it, and re-added on return."""
    cache = {}
    log = []
    listed = api.list_namespaced_custom_object(**G, label_selector="tier=in")
    for o in listed["items"]:
        cache[o["metadata"]["name"]] = o
    rv = listed["metadata"]["resourceVersion"]
    stop = threading.Event()

    def run():
        w = kwatch.Watch()
        for ev in w.stream(api.list_namespaced_custom_object, **G, label_selector="tier=in", resource_version=rv,
                           timeout_seconds=30):
            name = ev["object"]["metadata"]["name"]
            log.append((ev["type"], name))
            if ev["type"] == "DELETED":
                cache.pop(name, None)
            else:
                cache[name] = ev["object"]
            if stop.is_set():
                w.stop()

    t = threading.Thread(target=run, daemon=True)
    t.start()

    def wait(pred, what):
        deadline = time.time() + 10
        while time.time() < deadline:
            if pred():
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}: {log}")

    api.create_namespaced_custom_object(**G, body=service("py-inf", {"tier": "in"}))
    wait(lambda: "py-inf" in cache, "the object in the cache")
    api.patch_namespaced_custom_object(**G, name="py-inf", body={"metadata": {"labels": {"tier": "out"}}})
    wait(lambda: "py-inf" not in cache, "the relabelled object to leave the cache")
    api.patch_namespaced_custom_object(**G, name="py-inf", body={"metadata": {"labels": {"tier": "in"}}})
    wait(lambda: "py-inf" in cache, "the object to come back")
    stop.set()
    api.patch_namespaced_custom_object(**G, name="py-inf", body={"metadata": {"annotations": {"end": "1"}}})
    t.join(timeout=10)
    # MODIFIED events (the controller writes the Service's status) may come in between.
    assert [e for e in log if e[1] == "py-inf" and e[0] != "MODIFIED"][:3] == [
        ("ADDED", "py-inf"), ("DELETED", "py-inf"), ("ADDED", "py-inf")], log


def test_python_client_pages_with_limit_and_continue(api):
    for i in range(7):
        api.create_namespaced_custom_object(**G, body=service(f"py-page{i}", {"paged": "py"}))
    pages, token, rvs = [], None, set()
    while True:
        kw = {"_continue": token} if token else {}
        page = api.list_namespaced_custom_object(**G, label_selector="paged=py", limit=3, **kw)
        pages.append([i["metadata"]["name"] for i in page["items"]])
        rvs.add(page["metadata"]["resourceVersion"])
        token = page["metadata"].get("continue")
        if not token:
            break
        assert page["metadata"]["remainingItemCount"] == 7 - sum(len(p) for p in pages)
        assert len(pages) < 5
    assert pages == [["py-page0", "py-page1", "py-page2"], ["py-page3", "py-page4", "py-page5"], ["py-page6"]]
    assert len(rvs) == 1, "every page reports the first page's resourceVersion"


def test_python_patch_storm_against_a_busy_object_gets_no_409(api):
    api.create_namespaced_custom_object(**G, body=service("py-busy"))

    def patch(i):
        # A template change makes the controller create a Revision and rewrite
        # the Service's status; label changes race those status writes.
        body = ({"spec": {"template": {"metadata": {"annotations": {"storm": str(i)}}}}} if i % 5 == 0
                else {"metadata": {"labels": {f"l{i % 4}": str(i)}}})
        try:
            api.patch_namespaced_custom_object(**G, name="py-busy", body=body)
            return 200
        except kclient.exceptions.ApiException as e:
            return e.status

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(patch, range(80)))
    assert codes.count(200) == 80, {c: codes.count(c) for c in set(codes)}
    svc = api.get_namespaced_custom_object(**G, name="py-busy")
    assert svc["metadata"]["generation"] == 1 + 16  # 16 template changes, each one new generation


@pytest.fixture
def node_client():
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("!!! node/npm are not installed: @kubernetes/client-node e2e SKIPPED !!!")
    p = subprocess.run(["sh", os.path.join(ROOT, "tools", "install-node-clients.sh")], capture_output=True, text=True,
                       timeout=600)
    assert p.returncode == 0, "npm ci failed:\n" + p.stdout + p.stderr
    return os.path.join(NODE_DIR, "client.mjs")


def test_node_client(knapd, node_client):
    p = subprocess.run(["node", node_client, knapd.kubeconfig, "node"], capture_output=True, text=True, timeout=180,
                       cwd=NODE_DIR)
    assert p.returncode == 0, p.stdout + p.stderr + knapd.log()
    r = json.loads(p.stdout.strip().splitlines()[-1])
    crud = r["crud"]
    assert crud["created"] == crud["got"] == "node-crud" and crud["uid"]
    assert crud["patched"] == "yes" and crud["replaced"] == "yes"
    assert crud["listed"] == ["node-crud"] and crud["afterDelete"] == 404
    assert r["watch"][0] == "ADDED node-watch" and "MODIFIED node-watch" in r["watch"], r["watch"]
    assert r["watch"][-1] == "DELETED node-watch", r["watch"]
    inf = r["informer"]
    assert inf["droppedAfterRelabel"]
    mine = [e for e in inf["events"] if e.endswith(" node-inf") and not e.startswith("update")]
    assert mine[:3] == ["add node-inf", "delete node-inf", "add node-inf"], inf["events"]
    assert r["paging"]["pages"] == [["node-page0", "node-page1"], ["node-page2", "node-page3"], ["node-page4"]]
    assert len(r["paging"]["resourceVersions"]) == 1
    storm = r["patchStorm"]
    assert storm["codes"] == {"200": 80}, storm
    assert all(storm["labels"][f"w{w}"] == "19" for w in range(4)), storm
