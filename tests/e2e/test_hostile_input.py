"""Issue 9, input half: each input that used to crash, hang or bloat knapd, or that a web page
could send, is refused quickly with a Kubernetes Status, while knapd stays up and keeps serving
another client (a reader thread lists and checks /readyz throughout)."""
import json
import os
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from conftest import Knapd

API = "/apis/serving.knative.dev/v1/namespaces/default"


def service(name, **spec_extra):
    container = {"image": "example.com/app:1"}
    container.update(spec_extra)
    return {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"template": {"spec": {"containers": [container]}}}}


class Bystander:
    """Another client: lists Services and checks /readyz in a loop while a hostile request runs."""

    def __init__(self, k):
        self.k = k
        self.ok = 0
        self.failures = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            for path in ("/readyz", f"{API}/services"):
                try:
                    code, text, _ = self.k.http("GET", path, timeout=5)
                    if code == 200:
                        self.ok += 1
                    else:
                        self.failures.append((path, code, text[:200]))
                except Exception as e:  # noqa: BLE001 - a refused/timed-out connection is the failure
                    self.failures.append((path, repr(e)))
            time.sleep(0.02)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        time.sleep(0.1)
        self.stop.set()
        self.thread.join(timeout=10)
        assert not self.failures, self.failures[:5]
        assert self.ok > 0
        assert self.k.alive(), self.k.log()


@pytest.fixture
def k(workdir):
    kd = Knapd(workdir, extra_args=["--api-allowed-host", "knap.example", "--min-request-timeout", "2s",
                                    "--watch-bookmark-interval", "1s"]).start()
    yield kd
    kd.stop()


def refused(k, method, path, body, ctype, codes, needle, max_seconds=2.0, headers=None):
    with Bystander(k):
        t0 = time.monotonic()
        code, text, _ = k.http(method, path, body, content_type=ctype, headers=headers, timeout=30)
        took = time.monotonic() - t0
    assert code in codes, (code, text[:500])
    status = json.loads(text)
    assert status["kind"] == "Status" and status["status"] == "Failure", text[:500]
    assert needle in status["message"], status["message"][:500]
    assert took < max_seconds, f"took {took:.2f}s"
    return status


def test_huge_quantity_in_json_is_refused(k):
    body = json.dumps(service("cpu", resources={"limits": {"cpu": "9" * 30000}}))
    refused(k, "POST", f"{API}/services", body, "application/json", (400, 422), "too long")


def test_huge_plain_scalar_in_yaml_is_refused(k):
    body = ("apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata: {name: cpu}\nspec:\n"
            "  template:\n    spec:\n      containers:\n      - image: example.com/app:1\n"
            "        resources: {limits: {cpu: " + "9" * 100000 + "}}\n")
    refused(k, "PATCH", f"{API}/services/cpu?fieldManager=t", body, "application/apply-patch+yaml", (400, 422),
            "too long")


def test_knap_get_yaml_prints_a_stored_huge_number(k):
    obj = service("big")
    obj["metadata"]["annotations"] = {"n": "9" * 100000}
    assert k.http("POST", f"{API}/services", json.dumps(obj))[0] == 201
    p = k.knap("get", "service", "big", "-o", "yaml")
    assert "9" * 100000 in p.stdout
    assert k.alive()


def test_lone_comma_yaml_does_not_hang(k):
    refused(k, "PATCH", f"{API}/services/x?fieldManager=t", ",", "application/apply-patch+yaml", (400,), "yaml")


def test_alias_bomb_is_refused(k):
    lines = ["a: &a [x,x,x,x,x,x,x,x,x]"]
    for i in range(1, 10):
        p, c = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{c}: &{c} [" + ",".join([f"*{p}"] * 9) + "]")
    bomb = "\n".join(lines) + "\n"
    assert len(bomb) < 400
    refused(k, "PATCH", f"{API}/services/x?fieldManager=t", bomb, "application/apply-patch+yaml", (400,),
            "alias expansions included")
    assert int(open(f"/proc/{k.proc.pid}/status").read().split("VmRSS:")[1].split()[0]) < 200 * 1024


def test_deep_nesting_is_refused(k):
    refused(k, "POST", f"{API}/services", "[" * 100000 + "]" * 100000, "application/json", (400,),
            "nests deeper than 64 levels")


def test_self_copying_json_patch_is_refused(k):
    assert k.http("POST", f"{API}/services", json.dumps(service("p")))[0] == 201
    patch = [{"op": "add", "path": "/metadata/annotations", "value": {"a": "x" * 40}}]
    patch += [{"op": "copy", "from": "/metadata/annotations", "path": f"/metadata/annotations/c{i}"}
              for i in range(21)]
    refused(k, "PATCH", f"{API}/services/p", json.dumps(patch), "application/json-patch+json", (413,),
            "would make the object larger")
    assert "c0" not in k.get_json(f"{API}/services/p")["metadata"].get("annotations", {})


def test_text_plain_and_form_bodies_are_415(k):
    body = json.dumps(service("csrf"))
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
        refused(k, "POST", f"{API}/services", body, ctype, (415,), "unknown format")
    assert k.http("GET", f"{API}/services/csrf")[0] == 404


def test_cross_origin_write_is_refused(k):
    body = json.dumps(service("csrf"))
    host = f"127.0.0.1:{k.api_port}"
    refused(k, "POST", f"{API}/services", body, "application/json", (403,), "cross-origin",
            headers={"Origin": "http://evil.example"})
    refused(k, "POST", f"{API}/services", body, "text/plain", (403, 415), "",
            headers={"Origin": "http://evil.example"})
    assert k.http("GET", f"{API}/services/csrf")[0] == 404
    # Same origin (a page knapd itself would serve) and reads with any Origin still work.
    assert k.http("GET", f"{API}/services", headers={"Origin": "http://evil.example"})[0] == 200
    assert k.http("POST", f"{API}/services", body, headers={"Origin": f"http://{host}"})[0] == 201


def test_foreign_host_is_refused(k):
    for method, body in (("GET", None), ("DELETE", None), ("POST", json.dumps(service("rebind")))):
        refused(k, method, f"{API}/services" + ("/x" if method == "DELETE" else ""), body, "application/json",
                (403,), "is not allowed", headers={"Host": f"attacker.example:{k.api_port}"})
    refused(k, "GET", f"{API}/services?watch=true", None, "application/json", (403,), "is not allowed",
            headers={"Host": "attacker.example"})
    for host in ("localhost", f"localhost:{k.api_port}", "knap.example", "[::1]:1", "app.localhost"):
        assert k.http("GET", f"{API}/services", headers={"Host": host})[0] == 200, host


def test_server_owned_metadata_cannot_be_set(k):
    assert k.http("POST", f"{API}/services", json.dumps(service("own")))[0] == 201
    live = k.get_json(f"{API}/services/own")["metadata"]
    for patch in ({"metadata": {"deletionTimestamp": "2020-01-01T00:00:00Z"}},
                  {"metadata": {"finalizers": ["example.com/never"]}},
                  {"metadata": {"uid": "00000000-0000-4000-8000-000000000000"}},
                  {"metadata": {"creationTimestamp": "2020-01-01T00:00:00Z"}},
                  {"metadata": {"deletionGracePeriodSeconds": 0}}):
        refused(k, "PATCH", f"{API}/services/own", json.dumps(patch), "application/merge-patch+json", (422,),
                "metadata.")
        json_patch = [{"op": "add", "path": "/metadata/" + next(iter(patch["metadata"])),
                       "value": next(iter(patch["metadata"].values()))}]
        refused(k, "PATCH", f"{API}/services/own", json.dumps(json_patch), "application/json-patch+json", (422,),
                "metadata.")
    obj = service("own2")
    obj["metadata"].update({"deletionTimestamp": "2020-01-01T00:00:00Z"})
    refused(k, "POST", f"{API}/services", json.dumps(obj), "application/json", (422,), "deletionTimestamp")
    obj = service("own2")
    obj["metadata"].update({"uid": "x", "creationTimestamp": "2020-01-01T00:00:00Z", "generation": 7,
                            "managedFields": [{"manager": "evil"}]})
    assert k.http("POST", f"{API}/services", json.dumps(obj))[0] == 201
    got = k.get_json(f"{API}/services/own2")["metadata"]
    assert got["uid"] != "x" and got["generation"] == 1 and got["creationTimestamp"] != "2020-01-01T00:00:00Z"
    after = k.get_json(f"{API}/services/own")["metadata"]
    assert "deletionTimestamp" not in after and not after.get("finalizers")
    assert after["uid"] == live["uid"] and after["creationTimestamp"] == live["creationTimestamp"]
    # Sending them back unchanged (get | replace) still works.
    whole = k.get_json(f"{API}/services/own")
    assert k.http("PUT", f"{API}/services/own", json.dumps(whole))[0] == 200


def watch_lines(k, query, seconds):
    """Raw watch over a socket: (lines received, whether the server ended the stream, elapsed)."""
    s = k.api_socket(timeout=seconds)
    s.sendall(f"GET {API}/services?watch=true&{query} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    t0 = time.monotonic()
    data = b""
    ended = False
    try:
        while time.monotonic() - t0 < seconds:
            chunk = s.recv(65536)
            if not chunk:
                ended = True
                break
            data += chunk
    except socket.timeout:
        pass
    finally:
        s.close()
    lines = [json.loads(line) for line in data.split(b"\r\n") if line.startswith(b"{")]
    return lines, ended, time.monotonic() - t0


def test_watch_bookmarks_and_server_timeout(k):
    assert k.http("POST", f"{API}/services", json.dumps(service("w")))[0] == 201
    with Bystander(k):
        lines, ended, took = watch_lines(k, "allowWatchBookmarks=true&timeoutSeconds=4", 8)
    bookmarks = [e for e in lines if e["type"] == "BOOKMARK"]
    assert len(bookmarks) >= 2, lines
    assert int(bookmarks[-1]["object"]["metadata"]["resourceVersion"]) > 0
    assert ended and 3.5 < took < 6, (ended, took)
    # No timeoutSeconds: the server ends the watch after min-request-timeout (2s) plus jitter (< 2s).
    lines, ended, took = watch_lines(k, "", 10)
    assert ended and 1.5 < took < 5, (ended, took)
    assert not [e for e in lines if e["type"] == "BOOKMARK"]


def run(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


@pytest.fixture
def small_mount():
    d = tempfile.mkdtemp(prefix="knap-e2e-mnt-")
    run("mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", d)
    yield d
    subprocess.run(["umount", "-l", d], capture_output=True)
    os.rmdir(d)


def test_disk_full_is_500_naming_the_data_dir(small_mount):
    kd = Knapd(small_mount)
    kd.log_path = small_mount + ".log"
    kd.start()
    try:
        assert kd.http("POST", f"{API}/services", json.dumps(service("before")))[0] == 201
        # Unbuffered: a buffered file keeps what ENOSPC refused and raises it
        # again when closed (that failed one CI run).
        with open(os.path.join(small_mount, "filler"), "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
            except OSError:
                pass
        obj = service("full")
        obj["metadata"]["annotations"] = {"pad": "x" * 200000}
        code, text, _ = kd.http("POST", f"{API}/services", json.dumps(obj))
        assert code == 500, text
        assert "disk full" in text and kd.data_dir in text, text
        assert kd.http("GET", f"{API}/services/before")[0] == 200
        assert kd.alive()
        os.unlink(os.path.join(small_mount, "filler"))
        assert kd.http("POST", f"{API}/services", json.dumps(service("after")))[0] == 201
    finally:
        kd.stop()
        os.unlink(kd.log_path)


def test_read_only_data_dir_is_a_clear_start_up_error(small_mount, workdir):
    os.makedirs(os.path.join(small_mount, "data"))
    run("mount", "-o", "remount,ro", small_mount)
    kd = Knapd(workdir)
    with open(kd.config_path, "w") as f:
        f.write(f"knap:\n  data-dir: {small_mount}/data\n  api-listen: 127.0.0.1:{kd.api_port}\n"
                f"  router-listen: 127.0.0.1:{kd.router_port}\n")
    t0 = time.monotonic()
    with pytest.raises(RuntimeError) as e:
        kd.start(timeout=10)
    assert time.monotonic() - t0 < 3
    assert f"the data dir {small_mount}/data is not writable" in str(e.value), str(e.value)


def service_ready(k, name):
    code, text, _ = k.http("GET", f"{API}/services/{name}")
    if code != 200:
        return False
    conds = {c.get("type"): c.get("status") for c in json.loads(text).get("status", {}).get("conditions", [])}
    return conds.get("Ready") == "True"


def test_malformed_stored_objects_do_not_stop_knapd(workdir):
    """Issue 15, exception policy: objects written straight into the store, bypassing admission
    (a Service whose spec.template is a string, a Revision whose annotations are a number and whose
    spec is a string), fail their own reconciles; knapd starts, stays up, and another Service
    still reconciles to Ready."""
    import sqlite3

    k = Knapd(workdir)
    k.start()
    try:
        code, text, _ = k.http("POST", f"{API}/services", json.dumps(service("first")))
        assert code == 201, text
        k.wait_for(lambda: service_ready(k, "first"), timeout=60, what="Service first Ready")
        k.stop()

        db = sqlite3.connect(os.path.join(k.data_dir, "knap.db"))
        rv = db.execute("SELECT value FROM meta WHERE key = 'resource_version'").fetchone()[0]
        bad = [("Service", "bad-template", {"apiVersion": "serving.knative.dev/v1", "kind": "Service",
                                            "metadata": {}, "spec": {"template": "a string"}}),
               ("Revision", "bad-rev", {"apiVersion": "serving.knative.dev/v1", "kind": "Revision",
                                        "metadata": {"annotations": 7}, "spec": "a string"})]
        for i, (kind, name, body) in enumerate(bad):
            rv += 1
            uid = f"00000000-0000-0000-0000-00000000000{i}"
            body["metadata"].update({"name": name, "namespace": "default", "uid": uid,
                                     "resourceVersion": str(rv), "generation": 1})
            db.execute("INSERT INTO objects(kind, namespace, name, uid, resource_version, generation, body) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?)", (kind, "default", name, uid, rv, 1, json.dumps(body)))
        db.execute("UPDATE meta SET value = ? WHERE key = 'resource_version'", (rv,))
        db.commit()
        db.close()

        k.start()
        code, text, _ = k.http("POST", f"{API}/services", json.dumps(service("second")))
        assert code == 201, text
        k.wait_for(lambda: service_ready(k, "second"), timeout=60, what="Service second Ready")
        assert service_ready(k, "first")
        code, text, _ = k.http("GET", f"{API}/services")
        assert code == 200, text
        assert {"first", "second", "bad-template"} <= {i["metadata"]["name"] for i in json.loads(text)["items"]}
        assert k.alive(), k.log()
    finally:
        k.stop()
