"""Bad input gets a clear 4xx, knapd stays up, and nothing stored changes."""
import json
import socket

import pytest

API = "/apis/serving.knative.dev/v1/namespaces/default"

GOOD = {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": "good"},
        "spec": {"template": {"spec": {"containers": [{"image": "example.com/app:1"}]}}}}


def with_changes(**changes):
    obj = json.loads(json.dumps(GOOD))
    obj["metadata"]["name"] = "bad"
    for path, value in changes.items():
        cur = obj
        keys = path.split("__")
        for key in keys[:-1]:
            cur = cur[int(key)] if isinstance(cur, list) else cur.setdefault(key, {})
        cur[keys[-1]] = value
    return json.dumps(obj)


def stored(k):
    """Every stored object (the controllers may still write status, so wait before comparing)."""
    return tuple(k.get_json(f"{API}/{plural}")["items"] for plural in ("services", "configurations", "routes"))


CASES = [
    ("malformed json", "{\"apiVersion\": ", "application/json", 400, "parse error"),
    ("malformed yaml", "kind: Service\n  bad: [", "application/apply-patch+yaml", 400, ""),
    ("wrong type", with_changes(spec__template__spec__containerConcurrency="ten"), "application/json", None,
     "containerConcurrency"),
    ("unknown field", with_changes(spec__foo=1), "application/json", 400, 'unknown field "spec.foo"'),
    ("invalid name", with_changes(metadata__name="Bad_Name"), "application/json", 422, "metadata.name"),
    ("traffic sum", with_changes(spec__traffic=[{"latestRevision": True, "percent": 40}]), "application/json", 422,
     "Traffic targets sum to 40, want 100"),
    ("duplicate tags", with_changes(spec__traffic=[{"latestRevision": True, "percent": 50, "tag": "a"},
                                                   {"latestRevision": True, "percent": 50, "tag": "a"}]),
     "application/json", 422, "spec.traffic[1].tag"),
    ("missing image", with_changes(spec__template__spec__containers=[{"name": "c"}]), "application/json", 422,
     "spec.template.spec.containers[0].image"),
    ("reserved port", with_changes(spec__template__spec__containers=[{"image": "x", "ports": [{"containerPort": 8012}]}]),
     "application/json", 422, "containerPort"),
]


@pytest.mark.parametrize("name,body,ctype,code,needle", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_and_changes_nothing(knapd, name, body, ctype, code, needle):
    k = knapd
    assert k.http("POST", f"{API}/services", json.dumps(GOOD))[0] == 201
    k.wait_for(lambda: any(c["type"] == "Ready" and c["status"] == "True"
                           for c in stored(k)[0][0].get("status", {}).get("conditions", [])), what="good Ready")
    before = stored(k)
    if ctype == "application/apply-patch+yaml":
        got, text, headers = k.http("PATCH", f"{API}/services/bad?fieldManager=t", body, content_type=ctype)
    else:
        got, text, headers = k.http("POST", f"{API}/services", body, content_type=ctype)
    if code is None:
        assert got in (400, 422), text
    else:
        assert got == code, text
    status = json.loads(text)
    assert status["kind"] == "Status" and status["status"] == "Failure"
    explained = status["message"] + " " + json.dumps(status.get("details", {}))
    assert needle.lower() in explained.lower(), text
    assert stored(k) == before
    assert k.http("GET", "/readyz")[0] == 200


def test_oversized_body_is_refused(knapd):
    k = knapd
    big = json.dumps({**GOOD, "metadata": {"name": "big", "annotations": {"x": "y" * (4 * 1024 * 1024)}}})
    code, text, _ = k.http("POST", f"{API}/services", big)
    assert code == 413, text
    assert k.http("GET", f"{API}/services/big")[0] == 404
    assert k.http("GET", "/readyz")[0] == 200


def test_garbage_and_slow_clients_do_not_stall_the_server(knapd):
    k = knapd
    # A client that sends half a request and goes quiet.
    slow = k.api_socket()
    slow.sendall(b"GET /version HTTP/1.1\r\nHost: x\r\n")
    # A client that sends garbage.
    junk = k.api_socket()
    junk.sendall(b"\x00\x01\x02 not http at all\r\n\r\n")
    junk.settimeout(5)
    try:
        reply = junk.recv(200)
    except socket.timeout:
        reply = b""
    assert reply == b"" or reply.startswith(b"HTTP/1.1 400")
    # Meanwhile normal requests are served.
    for _ in range(20):
        assert k.http("GET", "/version")[0] == 200
    slow.close()
    junk.close()


def test_users_cannot_create_revisions(knapd):
    k = knapd
    rev = {"apiVersion": "serving.knative.dev/v1", "kind": "Revision", "metadata": {"name": "r"},
           "spec": {"containers": [{"image": "x"}]}}
    code, text, _ = k.http("POST", f"{API}/revisions", json.dumps(rev))
    assert code in (403, 405), text
    assert "Configuration" in text
