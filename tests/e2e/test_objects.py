"""core/v1 Namespaces, Secrets and ConfigMaps with the real kubectl, and a real
pod (containerd, runc, CNI) reading them through env, envFrom and volumes.

- Namespaces: default, kube-system and kube-public exist; `kubectl create/get/
  delete namespace`; deleting one deletes everything in it; an object in a
  missing namespace is 404 `namespaces "x" not found`.
- Secrets: `kubectl create secret generic|docker-registry|tls`, the type's
  required keys, stringData; encrypted at rest: the value is in no knap.db*
  file (objects nor watch history), in plaintext nor base64.
- ConfigMaps: `kubectl create configmap --from-literal|--from-file`, apply
  twice (strategic merge patch), immutable, watch.
- Pods: env valueFrom, envFrom and secret/configMap/projected volumes; a
  changed ConfigMap reaches the mounted file; a missing key leaves the
  Revision not Ready with CreateContainerConfigError naming it, and creating
  the key makes it Ready.
"""
import base64
import glob
import json
import os
import subprocess

import pytest

from conftest import Knapd, requires_kubectl
from conformance_helpers import Cluster, cond, ksvc, skip_without_pods

CORE = "/api/v1/namespaces/default"


def db_bytes(k):
    out = b""
    for path in glob.glob(os.path.join(k.data_dir, "knap.db*")):
        with open(path, "rb") as f:
            out += f.read()
    return out


@requires_kubectl
def test_namespaces(knapd):
    k = knapd
    out = k.kubectl("get", "namespaces").stdout
    for ns in ("default", "kube-system", "kube-public"):
        assert any(line.split()[:2] == [ns, "Active"] for line in out.splitlines()), out
    assert out.splitlines()[0].split() == ["NAME", "STATUS", "AGE"], out
    k.kubectl("create", "namespace", "team-a")
    assert k.kubectl("get", "ns", "team-a", "-o", "jsonpath={.status.phase}").stdout == "Active"
    # Objects of every kind in it.
    k.kubectl("create", "secret", "generic", "db", "-n", "team-a", "--from-literal=password=pw")
    k.kubectl("create", "configmap", "app", "-n", "team-a", "--from-literal=a=b")
    svc = {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": "hello"},
           "spec": {"template": {"spec": {"containers": [{"image": "example.com/hello@sha256:" + "a" * 64}]}}}}
    k.kubectl("apply", "-n", "team-a", "-f", "-", input=json.dumps(svc))
    k.wait_for(lambda: k.http("GET", "/apis/serving.knative.dev/v1/namespaces/team-a/revisions")[1].count('"Revision"'),
               what="the Revision in team-a")
    # A missing namespace is 404, as in Kubernetes.
    p = k.kubectl("create", "configmap", "x", "-n", "nope", "--from-literal=a=b", check=False)
    assert p.returncode != 0 and 'namespaces "nope" not found' in p.stderr, p.stderr
    code, body, _ = k.http("POST", "/apis/serving.knative.dev/v1/namespaces/nope/services", json.dumps(svc))
    assert code == 404 and json.loads(body)["message"] == 'namespaces "nope" not found', body
    # System namespaces stay.
    p = k.kubectl("delete", "namespace", "default", check=False)
    assert p.returncode != 0 and "forbidden" in p.stderr, p.stderr
    # Deleting the namespace deletes everything in it.
    k.kubectl("delete", "namespace", "team-a")
    assert k.kubectl("get", "ns", "team-a", check=False).returncode != 0
    for path in ("/api/v1/namespaces/team-a/secrets", "/api/v1/namespaces/team-a/configmaps",
                 "/api/v1/namespaces/team-a/events",
                 "/apis/serving.knative.dev/v1/namespaces/team-a/services",
                 "/apis/serving.knative.dev/v1/namespaces/team-a/configurations",
                 "/apis/serving.knative.dev/v1/namespaces/team-a/revisions",
                 "/apis/serving.knative.dev/v1/namespaces/team-a/routes"):
        items = k.get_json(path)["items"]
        assert items == [], (path, items)
    # Discovery: namespaces are cluster-scoped, without deletecollection.
    res = {r["name"]: r for r in k.get_json("/api/v1")["resources"]}
    assert res["namespaces"]["namespaced"] is False
    assert "deletecollection" not in res["namespaces"]["verbs"] and "create" in res["namespaces"]["verbs"]
    for name in ("secrets", "configmaps"):
        assert res[name]["namespaced"] is True
        assert set(res[name]["verbs"]) == {"create", "delete", "deletecollection", "get", "list", "patch", "update",
                                           "watch"}


@requires_kubectl
def test_secrets_and_encryption_at_rest(knapd, tmp_path):
    k = knapd
    canary = "canary-" + os.urandom(6).hex()
    k.kubectl("create", "secret", "generic", "db", f"--from-literal=password={canary}", "--from-literal=user=admin")
    got = json.loads(k.kubectl("get", "secret", "db", "-o", "json").stdout)
    assert got["type"] == "Opaque"
    assert base64.b64decode(got["data"]["password"]).decode() == canary
    # docker-registry
    k.kubectl("create", "secret", "docker-registry", "regcred", "--docker-server=registry.example.com",
              "--docker-username=u", f"--docker-password={canary}-reg")
    reg = json.loads(k.kubectl("get", "secret", "regcred", "-o", "json").stdout)
    assert reg["type"] == "kubernetes.io/dockerconfigjson"
    assert "registry.example.com" in json.loads(base64.b64decode(reg["data"][".dockerconfigjson"]))["auths"]
    # tls, with a real key pair (kubectl checks that it parses)
    crt, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=objects.test",
                    "-days", "2", "-keyout", str(key), "-out", str(crt)], check=True, capture_output=True)
    k.kubectl("create", "secret", "tls", "web", f"--cert={crt}", f"--key={key}")
    assert json.loads(k.kubectl("get", "secret", "web", "-o", "json").stdout)["type"] == "kubernetes.io/tls"
    table = k.kubectl("get", "secrets").stdout.splitlines()
    assert table[0].split() == ["NAME", "TYPE", "DATA", "AGE"], table
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert rows["db"][1:3] == ["Opaque", "2"] and rows["web"][1:3] == ["kubernetes.io/tls", "2"], rows
    # The type's required keys, as kube-apiserver checks them.
    code, body, _ = k.http("POST", CORE + "/secrets", json.dumps({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "half"}, "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": "x"}}))
    assert code == 422 and "data[tls.key]: Required value" in json.loads(body)["message"], body
    code, body, _ = k.http("POST", CORE + "/secrets", json.dumps({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "bad"}, "data": {"k": "not base64!"}}))
    assert code == 422 and "not base64" not in body, body
    # stringData merges into data; immutable freezes data.
    code, body, _ = k.http("POST", CORE + "/secrets", json.dumps({
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "frozen"}, "immutable": True,
        "data": {"a": base64.b64encode(b"1").decode()}, "stringData": {"b": "2"}}))
    assert code == 201, body
    assert set(json.loads(body)["data"]) == {"a", "b"} and "stringData" not in json.loads(body)
    p = k.kubectl("patch", "secret", "frozen", "-p", '{"stringData":{"a":"3"}}', check=False)
    assert p.returncode != 0 and "field is immutable when `immutable` is set" in p.stderr, p.stderr
    # An update and a delete also land in the watch history.
    k.kubectl("patch", "secret", "db", "-p", json.dumps({"stringData": {"password": canary + "-2"}}))
    k.kubectl("delete", "secret", "regcred")
    # Encrypted at rest: neither the value nor its base64 is in any database file.
    data = db_bytes(k)
    assert len(data) > 4096 and b'"Opaque"' not in data
    for secret in (canary, canary + "-2", canary + "-reg"):
        for form in (secret.encode(), base64.b64encode(secret.encode())):
            assert form not in data, f"{form!r} is readable in knap.db*"
    assert b"knap:enc:aes-256-gcm:" in data
    keys = glob.glob(os.path.join(k.data_dir, "keys", "*.key"))
    assert keys and all(os.stat(p).st_mode & 0o777 == 0o600 for p in keys), keys
    # ...and still readable after a restart.
    k.stop()
    k.start()
    got = json.loads(k.kubectl("get", "secret", "db", "-o", "json").stdout)
    assert base64.b64decode(got["data"]["password"]).decode() == canary + "-2"


@requires_kubectl
def test_configmaps(knapd, tmp_path):
    k = knapd
    k.kubectl("create", "configmap", "lit", "--from-literal=GREETING=hello", "--from-literal=COLOR=blue")
    conf = tmp_path / "app.yaml"
    conf.write_text("port: 8080\n")
    blob = tmp_path / "logo.bin"
    blob.write_bytes(b"\x00\xff\x10binary")
    k.kubectl("create", "configmap", "files", f"--from-file={conf}", f"--from-file={blob}")
    files = json.loads(k.kubectl("get", "cm", "files", "-o", "json").stdout)
    assert files["data"]["app.yaml"] == "port: 8080\n"
    assert base64.b64decode(files["binaryData"]["logo.bin"]) == b"\x00\xff\x10binary"
    table = k.kubectl("get", "configmaps").stdout.splitlines()
    assert table[0].split() == ["NAME", "DATA", "AGE"], table
    rows = {line.split()[0]: line.split() for line in table[1:]}
    assert rows["lit"][1] == "2" and rows["files"][1] == "2", rows
    # kubectl apply twice: the second is a strategic merge patch.
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied"}, "data": {"a": "1", "b": "2"}}
    k.kubectl("apply", "-f", "-", input=json.dumps(doc))
    doc["data"] = {"a": "10"}
    out = k.kubectl("apply", "-f", "-", input=json.dumps(doc)).stdout
    assert "configured" in out, out
    assert json.loads(k.kubectl("get", "cm", "applied", "-o", "json").stdout)["data"] == {"a": "10"}
    # Watch sees a change.
    rv = k.get_json(CORE + "/configmaps")["metadata"]["resourceVersion"]
    k.kubectl("patch", "cm", "lit", "--type", "merge", "-p", '{"data":{"GREETING":"hi"}}')
    code, body, _ = k.http("GET", CORE + f"/configmaps?watch=true&resourceVersion={rv}&timeoutSeconds=1", timeout=20)
    events = [json.loads(line) for line in body.splitlines() if line]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("MODIFIED", "lit")], events
    assert events[0]["object"]["data"]["GREETING"] == "hi"
    # Keys are checked; immutable freezes data and binaryData.
    p = k.kubectl("create", "configmap", "bad", "--from-literal=a b=c", check=False)
    assert p.returncode != 0 and "a valid config key" in p.stderr, p.stderr
    k.kubectl("patch", "cm", "files", "--type", "merge", "-p", '{"immutable":true}')
    p = k.kubectl("patch", "cm", "files", "--type", "merge", "-p", '{"data":{"app.yaml":"x"}}', check=False)
    assert p.returncode != 0 and "immutable" in p.stderr, p.stderr
    k.kubectl("delete", "configmap", "lit")
    assert k.kubectl("get", "cm", "lit", check=False).returncode != 0


# ------------------------------------------------------------------ pods

@pytest.fixture(scope="module")
def cl():
    c = Cluster("10.226", "knapobj")
    yield c
    c.close()


def core_create(cl, kind, doc):
    code, body, _ = cl.k.http("POST", f"{CORE}/{kind}", json.dumps(doc))
    assert code == 201, f"create {kind}: {code} {body}"


def file_content(cl, url, path):
    status, _, body = cl.request(url, "/file?path=" + path)
    return json.loads(body)["content"] if status == 200 else None


@skip_without_pods
def test_pod_reads_secrets_and_configmaps(cl):
    core_create(cl, "secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"},
                                "stringData": {"password": "s3cr3t", "user": "admin"}})
    core_create(cl, "configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "app"},
                                   "data": {"GREETING": "hello", "app.yaml": "v: 1\n"}})
    doc = ksvc("objects", container={
        "env": [{"name": "DB_PASSWORD", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}},
                {"name": "GREETING_REF", "valueFrom": {"configMapKeyRef": {"name": "app", "key": "GREETING"}}},
                {"name": "MAYBE", "valueFrom": {"secretKeyRef": {"name": "db", "key": "absent", "optional": True}}}],
        "envFrom": [{"configMapRef": {"name": "app"}, "prefix": "CM_"}, {"secretRef": {"name": "db"}}],
        "volumeMounts": [{"name": "conf", "mountPath": "/etc/app", "readOnly": True},
                         {"name": "creds", "mountPath": "/etc/creds", "readOnly": True},
                         {"name": "scratch", "mountPath": "/scratch"}]},
        spec={"volumes": [
            {"name": "conf", "configMap": {"name": "app"}},
            {"name": "creds", "projected": {"defaultMode": 0o440, "sources": [
                {"secret": {"name": "db", "items": [{"key": "password", "path": "db/password"}]}}]}},
            {"name": "scratch", "emptyDir": {"medium": "Memory", "sizeLimit": "8Mi"}}]})
    svc = cl.create_service_ready(doc, timeout=120)
    url = svc["status"]["url"]
    _, _, body = cl.wait_endpoint(url, "/env", lambda s, h, b: s == 200)
    env = json.loads(body)
    assert env["DB_PASSWORD"] == "s3cr3t" and env["GREETING_REF"] == "hello", env
    assert env["CM_GREETING"] == "hello" and env["password"] == "s3cr3t" and env["user"] == "admin", env
    assert "MAYBE" not in env and "CM_app.yaml" in env, env
    assert file_content(cl, url, "/etc/app/app.yaml") == "v: 1\n"
    assert file_content(cl, url, "/etc/creds/db/password") == "s3cr3t"
    # A changed ConfigMap reaches the mounted file (atomic ..data swap).
    code, body, _ = cl.k.http("PATCH", f"{CORE}/configmaps/app", json.dumps({"data": {"app.yaml": "v: 2\n"}}),
                              content_type="application/merge-patch+json")
    assert code == 200, body
    cl.wait_endpoint(url, "/file?path=/etc/app/app.yaml",
                     lambda s, h, b: s == 200 and json.loads(b)["content"] == "v: 2\n", timeout=60,
                     what="the updated ConfigMap in the pod")


@skip_without_pods
def test_missing_key_leaves_the_revision_not_ready_until_it_exists(cl):
    core_create(cl, "secrets", {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "partial"},
                                "stringData": {"user": "admin"}})
    doc = ksvc("missing-key", container={"env": [
        {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "partial", "key": "password"}}}]})
    cl.must_create("services", doc)
    rev = cl.wait("revisions", "missing-key-00001",
                  lambda r: cond(r, "ContainerHealthy").get("status") == "False", timeout=90,
                  what="ContainerHealthy False")
    ch = cond(rev, "ContainerHealthy")
    assert ch["reason"] == "CreateContainerConfigError", ch
    assert ch["message"] == "couldn't find key password in Secret default/partial", ch
    assert cond(rev, "Ready")["status"] == "False", rev["status"]
    # The key appears: the Revision becomes Ready.
    code, body, _ = cl.k.http("PATCH", f"{CORE}/secrets/partial", json.dumps({"stringData": {"password": "pw"}}),
                              content_type="application/merge-patch+json")
    assert code == 200, body
    svc = cl.wait_ready("services", "missing-key", timeout=120)
    _, _, body = cl.wait_endpoint(svc["status"]["url"], "/env", lambda s, h, b: s == 200)
    assert json.loads(body)["PW"] == "pw"
