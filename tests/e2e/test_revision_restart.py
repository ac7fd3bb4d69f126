"""Restart of a Revision's pods (POST .../revisions/NAME/restart, `knap revision restart`).

A rolling restart in the pod runner: a new pod is started and Ready before
the old one leaves the endpoints, and the old one is stopped only after a
drain, so steady load sees no failed request while every container is
replaced (new container ids). A Revision at zero has nothing to restart and
says so. The role checks (view: 403, edit: allowed) are in
api/server/api_server_test.cc and tests/e2e/test_console.py.

Needs root and a running containerd (the real-pod setup of test_serving.py).
"""
import json
import os
import subprocess

import pytest

from test_restart_continuity import SteadyLoad
from test_serving import MKIMAGE, TESTAPP, apply, containerd_ok, get, service, serving  # noqa: F401 (fixture)

pytestmark = pytest.mark.skipif(
    not containerd_ok() or not os.path.exists(TESTAPP) or not os.path.exists(MKIMAGE),
    reason="!!! real-pod end-to-end tests SKIPPED: need root, a running containerd and the built test app !!!")

CLIENTS = 4
REV = "/apis/serving.knative.dev/v1/namespaces/default/revisions/"
RESTART = "/apis/knap.dev/v1/namespaces/default/revisions/{}/restart"


def containers(k, prefix):
    """The pod containers (ids) whose names start with `prefix`, in knapd's containerd namespace."""
    with open(k.config_path) as f:
        ns = [line.split(":", 1)[1].strip() for line in f if "containerd-namespace:" in line][0]
    out = subprocess.run(["ctr", "-n", ns, "containers", "ls", "-q"], capture_output=True, text=True).stdout
    return sorted(c for c in out.split() if c.startswith(prefix))


def test_restart_under_load_replaces_every_pod_and_fails_no_request(serving):
    k = serving
    apply(k, service("steady", annotations={"autoscaling.knative.dev/min-scale": "2"}))
    k.wait_for(lambda: len(containers(k, "steady-00001-")) == 2, timeout=60, what="two pods")
    old = containers(k, "steady-00001-")

    with SteadyLoad(k.router_port, CLIENTS, host="steady.default.localhost") as load:
        k.wait_for(lambda: load.done >= 100, timeout=60, what="load before the restart")
        p = k.knap("revision", "restart", "steady-00001")
        assert "restarting 2 pods" in p.stdout, p.stdout
        for pod in old:
            assert f"replacing pod {pod}" in p.stdout, p.stdout

        def replaced():
            now = containers(k, "steady-00001-")
            return len(now) == 2 and not set(now) & set(old) and now
        new = k.wait_for(replaced, timeout=120, what="both pods replaced")
        before = load.done
        k.wait_for(lambda: load.done >= before + 100, timeout=60, what="load after the restart")
    failures = load.failures
    total = load.done
    print(f"\nrevision restart: {total} requests while 2 pods were replaced, {len(failures)} failed")
    assert failures == [], f"{len(failures)} of {total} requests failed: {failures[:10]}\n{k.log()}"
    assert not set(new) & set(old), (old, new)
    rev = k.get_json(REV + "steady-00001")
    assert rev["status"].get("actualReplicas") == 2, rev["status"]
    ready = [c for c in rev["status"]["conditions"] if c["type"] == "Ready"][0]
    assert ready["status"] == "True", rev["status"]
    # The restart is on the Revision's Events.
    events = k.get_json("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dsteady-00001")
    assert any(e["reason"] == "Restarting" for e in events["items"]), events


def test_restart_at_zero_says_there_is_nothing_to_restart(serving):
    k = serving
    apply(k, service("sleepy", annotations={"autoscaling.knative.dev/min-scale": "0"}))
    assert get(k, "sleepy.default.localhost")[0] == 200
    k.wait_for(lambda: k.get_json(REV + "sleepy-00001").get("status", {}).get("actualReplicas", 1) == 0,
               timeout=90, what="revision scaled to zero")
    code, body, _ = k.http("POST", RESTART.format("sleepy-00001"))
    assert code == 200, body
    doc = json.loads(body)
    assert doc["kind"] == "RevisionRestart" and doc["pods"] == [], doc
    assert "scaled to zero" in doc["message"], doc
    p = k.knap("revision", "restart", "sleepy-00001")
    assert "nothing to restart" in p.stdout, p.stdout
    # Unknown Revisions and services are errors naming what is wrong.
    p = k.knap("revision", "restart", "nope-00001", check=False)
    assert p.returncode != 0 and "nope-00001" in p.stderr, p.stdout + p.stderr
    p = k.knap("service", "restart", "sleepy", check=False)
    assert p.returncode == 2 and "only revisions restart" in p.stderr, p.stderr
    # Still serves after all that.
    assert get(k, "sleepy.default.localhost")[0] == 200
