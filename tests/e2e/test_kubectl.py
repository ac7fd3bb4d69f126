"""The real kubectl against a running knapd (issue: foundation, "Must show")."""
import json
import subprocess
import time

from conftest import KUBECTL, data_file, requires_kubectl

pytestmark = requires_kubectl


def ready(k, kind, name):
    obj = json.loads(k.kubectl("get", kind, name, "-o", "json").stdout)
    conds = {c["type"]: c["status"] for c in obj.get("status", {}).get("conditions", [])}
    return conds.get("Ready") == "True" and obj["status"].get("observedGeneration") == obj["metadata"]["generation"]


def test_apply_get_patch_ssa_watch_delete(knapd):
    k = knapd
    out = k.kubectl("apply", "-f", data_file("e2e", "hello.yaml")).stdout
    assert "service.serving.knative.dev/hello created" in out

    # The Service's children appear: Configuration, Route, Revision hello-00001.
    k.wait_for(lambda: "hello-00001" in k.kubectl("get", "revisions").stdout, what="revision hello-00001")
    k.wait_for(lambda: ready(k, "ksvc", "hello"), what="ksvc hello Ready")

    table = k.kubectl("get", "ksvc").stdout
    assert table.splitlines()[0].split()[:2] == ["NAME", "URL"], table
    assert "hello" in table and "http://hello.default." in table

    svc = json.loads(k.kubectl("get", "ksvc", "hello", "-o", "json").stdout)
    assert svc["metadata"]["generation"] == 1
    assert svc["spec"]["template"]["spec"]["containers"][0]["env"] == [{"name": "TARGET", "value": "World"}]
    # Defaults were applied the Knative way.
    assert svc["spec"]["template"]["spec"]["containerConcurrency"] == 0
    assert svc["spec"]["template"]["spec"]["timeoutSeconds"] == 300
    assert svc["spec"]["traffic"] == [{"latestRevision": True, "percent": 100}]
    assert svc["status"]["latestReadyRevisionName"] == "hello-00001"
    yaml_out = k.kubectl("get", "ksvc", "hello", "-o", "yaml").stdout
    assert "kind: Service" in yaml_out and "apiVersion: serving.knative.dev/v1" in yaml_out

    for kind in ("configurations", "routes", "rev", "rt", "kcfg" if False else "config"):
        assert "hello" in k.kubectl("get", kind).stdout

    # A second identical apply changes nothing stored. (kubectl may still print
    # "configured": its JSON merge patch resends the containers list, which the
    # server defaults back to the same object, as on Knative.)
    rv = svc["metadata"]["resourceVersion"]
    k.kubectl("apply", "-f", data_file("e2e", "hello.yaml"))
    again = json.loads(k.kubectl("get", "ksvc", "hello", "-o", "json").stdout)
    assert (again["metadata"]["generation"], again["metadata"]["resourceVersion"]) == (1, rv)

    # Start watching before the update; the watch must see the change.
    env = {"HOME": k.workdir, "PATH": "/usr/bin:/bin"}
    watcher = subprocess.Popen([KUBECTL, "--kubeconfig", k.kubeconfig, "get", "ksvc", "hello", "-w",
                                "-o", "jsonpath={.metadata.generation}{\"\\n\"}"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        time.sleep(1.0)
        k.kubectl("patch", "ksvc", "hello", "--type", "merge", "-p",
                  '{"spec":{"template":{"spec":{"containers":[{"image":"ghcr.io/knative/helloworld-go:latest",'
                  '"env":[{"name":"TARGET","value":"Patched"}]}]}}}}')
        k.wait_for(lambda: "hello-00002" in k.kubectl("get", "rev").stdout, what="revision hello-00002")
    finally:
        time.sleep(0.5)
        watcher.terminate()
        seen, err = watcher.communicate(timeout=10)
    assert "2" in seen.split(), f"watch did not see generation 2: {seen!r} {err!r}"

    # Server-side apply of a changed file creates generation 3 / revision 00003.
    out = k.kubectl("apply", "--server-side", "--force-conflicts", "-f", data_file("e2e", "hello-v2.yaml")).stdout
    assert "serverside-applied" in out
    k.wait_for(lambda: "hello-00003" in k.kubectl("get", "rev").stdout, what="revision hello-00003")
    svc = json.loads(k.kubectl("get", "ksvc", "hello", "-o", "json").stdout)
    assert svc["metadata"]["generation"] == 3
    assert svc["spec"]["template"]["spec"]["containers"][0]["env"][0]["value"] == "Knative"

    # A merge patch that changes nothing keeps the resourceVersion.
    rv = svc["metadata"]["resourceVersion"]
    out = k.kubectl("patch", "ksvc", "hello", "--type", "merge", "-p", '{"spec":{"template":{"spec":{"timeoutSeconds":300}}}}').stdout
    assert "no change" in out
    assert json.loads(k.kubectl("get", "ksvc", "hello", "-o", "json").stdout)["metadata"]["resourceVersion"] == rv

    # Delete removes the Service and everything it owns.
    assert 'service.serving.knative.dev "hello" deleted' in k.kubectl("delete", "ksvc", "hello").stdout
    for kind in ("ksvc", "configurations", "routes", "revisions"):
        out = k.kubectl("get", kind, check=False)
        assert "hello" not in out.stdout, f"{kind} still has hello: {out.stdout}"


def test_kubectl_wait_and_errors(knapd):
    k = knapd
    k.kubectl("apply", "-f", data_file("e2e", "split.yaml"))
    out = k.kubectl("wait", "ksvc/split", "--for=condition=Ready", "--timeout=30s").stdout
    assert "condition met" in out
    route = json.loads(k.kubectl("get", "route", "split", "-o", "json").stdout)
    tags = {t.get("tag"): t for t in route["status"]["traffic"]}
    assert tags["current"]["revisionName"] == "split-v2"
    assert tags["current"]["url"].startswith("http://current-split.default.")

    missing = k.kubectl("get", "ksvc", "nope", check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr

    bad = k.kubectl("apply", "-f", "-", check=False, input=(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: bad\n"
        "spec:\n  template:\n    spec:\n      containers:\n      - image: x\n  traffic:\n"
        "  - latestRevision: true\n    percent: 50\n"))
    assert bad.returncode != 0
    assert "Traffic targets sum to 50, want 100" in bad.stderr, bad.stderr

    unknown = k.kubectl("apply", "-f", "-", check=False, input=(
        "apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: bad2\n"
        "spec:\n  foo: 1\n  template:\n    spec:\n      containers:\n      - image: x\n"))
    assert unknown.returncode != 0 and 'unknown field "spec.foo"' in unknown.stderr, unknown.stderr
    assert "bad" not in k.kubectl("get", "ksvc").stdout.split()


def test_apply_prune_by_label(knapd, tmp_path):
    """kubectl apply --prune -l: kubectl maps every kind of its default prune allowlist (pods, deployments, jobs,
    ingresses...) before it lists them with the selector; knapd advertises those it has none of, with empty lists."""
    k = knapd
    image = "example.com/hello@sha256:" + "a" * 64

    def svc(name):
        return json.dumps({"apiVersion": "serving.knative.dev/v1", "kind": "Service",
                           "metadata": {"name": name, "labels": {"app": "x"}},
                           "spec": {"template": {"spec": {"containers": [{"image": image}]}}}})
    (tmp_path / "a.json").write_text(svc("a"))
    (tmp_path / "b.json").write_text(svc("b"))
    (tmp_path / "cm.json").write_text(json.dumps({"apiVersion": "v1", "kind": "ConfigMap",
                                                  "metadata": {"name": "c", "labels": {"app": "x"}},
                                                  "data": {"k": "v"}}))
    # Not in the directory, not labelled app=x: never pruned.
    k.kubectl("create", "configmap", "other", "--from-literal=k=v")
    out = k.kubectl("apply", "--prune", "-l", "app=x", "-f", str(tmp_path)).stdout
    assert "service.serving.knative.dev/a created" in out and "configmap/c created" in out, out
    # The default allowlist (ConfigMap is in it; Knative Services are not).
    (tmp_path / "cm.json").unlink()
    out = k.kubectl("apply", "--prune", "-l", "app=x", "-f", str(tmp_path)).stdout
    assert "configmap/c pruned" in out, out
    assert k.kubectl("get", "configmap", "c", check=False).returncode != 0
    # Knative Services through --prune-allowlist.
    (tmp_path / "b.json").unlink()
    out = k.kubectl("apply", "--prune", "-l", "app=x", "-f", str(tmp_path),
                    "--prune-allowlist=serving.knative.dev/v1/Service").stdout
    assert "service.serving.knative.dev/b pruned" in out and "service.serving.knative.dev/a pruned" not in out, out
    assert k.kubectl("get", "ksvc", "b", check=False).returncode != 0
    assert k.kubectl("get", "ksvc", "a").returncode == 0
    assert k.kubectl("get", "configmap", "other").returncode == 0
    # The placeholder kinds: listable, empty, read-only.
    assert k.kubectl("get", "pods,deployments,jobs,ingresses", "-A").stderr.strip() == "No resources found"
    code, body, _ = k.http("GET", "/apis/apps/v1/namespaces/default/deployments/web")
    assert code == 404 and json.loads(body)["message"] == 'deployments "web" not found', body
    assert k.http("POST", "/api/v1/namespaces/default/pods", "{}")[0] == 405
