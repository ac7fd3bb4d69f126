"""Restart and crash safety of knapd's stored state."""
import json
import threading
import time

from conftest import Knapd

API = "/apis/serving.knative.dev/v1/namespaces/default"


def service(name, target="x"):
    return json.dumps({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"template": {"spec": {"containers": [{"image": "example.com/app:1",
                                                       "env": [{"name": "TARGET", "value": target}]}]}}}})


def snapshot(k):
    out = {}
    for plural in ("services", "configurations", "revisions", "routes"):
        for item in k.get_json(f"{API}/{plural}")["items"]:
            m = item["metadata"]
            out[(plural, m["name"])] = (m["uid"], m["generation"], m["resourceVersion"], json.dumps(item, sort_keys=True))
    return out


def test_restart_keeps_every_object_generation_and_resource_version(knapd):
    k = knapd
    for i in range(5):
        code, body, _ = k.http("POST", f"{API}/services", service(f"s{i}"))
        assert code == 201, body
    # Generation 2 for one of them.
    code, body, _ = k.http("PATCH", f"{API}/services/s0", json.dumps(
        {"spec": {"template": {"spec": {"containers": [{"image": "example.com/app:2"}]}}}}),
        content_type="application/merge-patch+json")
    assert code == 200, body
    k.wait_for(lambda: len(k.get_json(f"{API}/revisions")["items"]) == 6, what="6 revisions")
    k.wait_for(lambda: all(
        s.get("status", {}).get("observedGeneration") == s["metadata"]["generation"] and
        s["status"].get("latestReadyRevisionName") == s["status"].get("latestCreatedRevisionName") and
        any(c["type"] == "Ready" and c["status"] == "True" for c in s["status"].get("conditions", []))
        for s in k.get_json(f"{API}/services")["items"]), what="services reconciled and Ready")
    time.sleep(1)  # let the last status writes land
    before = snapshot(k)
    list_rv = k.get_json(f"{API}/services")["metadata"]["resourceVersion"]
    k.stop()
    k.start()
    after = snapshot(k)
    assert set(before) == set(after)
    for key in before:
        assert before[key][:3] == after[key][:3], key
    assert k.get_json(f"{API}/services")["metadata"]["resourceVersion"] == list_rv
    assert k.get_json(f"{API}/services/s0")["metadata"]["generation"] == 2
    # New writes get larger resourceVersions than anything before the restart.
    code, body, _ = k.http("POST", f"{API}/services", service("after"))
    assert code == 201
    assert int(json.loads(body)["metadata"]["resourceVersion"]) > int(list_rv)


def test_sigkill_during_write_stream_loses_no_acknowledged_write(workdir):
    k = Knapd(workdir).start()
    acked = {}
    stop = threading.Event()

    def writer(prefix):
        i = 0
        while not stop.is_set():
            name = f"{prefix}-{i}"
            try:
                code, body, _ = k.http("POST", f"{API}/services", service(name), timeout=5)
            except OSError:
                return  # knapd died under us: this write was never acknowledged
            if code == 201:
                acked[name] = json.loads(body)["metadata"]["resourceVersion"]
            i += 1

    threads = [threading.Thread(target=writer, args=(p,)) for p in ("a", "b", "c")]
    for t in threads:
        t.start()
    k.wait_for(lambda: len(acked) >= 150, timeout=60, what="150 acknowledged writes")
    k.kill()  # SIGKILL in the middle of the stream
    stop.set()
    for t in threads:
        t.join()
    count = len(acked)
    k.start()
    names = {i["metadata"]["name"]: i for i in k.get_json(f"{API}/services")["items"]}
    missing = [n for n in acked if n not in names]
    assert not missing, f"{len(missing)} of {count} acknowledged writes lost: {missing[:5]}"
    for n, rv in acked.items():
        assert int(names[n]["metadata"]["resourceVersion"]) >= int(rv)
    # The database is consistent: the daemon serves and accepts writes, and the
    # controllers converge every survivor to its children.
    code, _, _ = k.http("POST", f"{API}/services", service("post-crash"))
    assert code == 201
    k.wait_for(lambda: len(k.get_json(f"{API}/configurations")["items"]) == len(names) + 1, timeout=60,
               what="a configuration per service")
    k.stop()
