"""The knap CLI against a running knapd."""
import json

from conftest import data_file


def test_apply_get_describe_delete(knapd):
    k = knapd
    out = k.knap("apply", "-f", data_file("e2e", "hello.yaml"), "--wait", "--timeout", "30").stdout
    assert "Service 'hello' created in namespace 'default'." in out
    assert "is ready" in out and "http://hello.default." in out

    again = k.knap("apply", "-f", data_file("e2e", "hello.yaml")).stdout
    assert "unchanged" in again
    changed = k.knap("apply", "-f", data_file("e2e", "hello-v2.yaml")).stdout
    assert "configured" in changed

    table = k.knap("get", "services").stdout.splitlines()
    assert table[0].split()[:3] == ["NAME", "URL", "LATEST"]
    assert table[1].split()[0] == "hello"

    k.wait_for(lambda: "hello-00002" in k.knap("get", "revisions").stdout, what="second revision")
    revs = k.knap("get", "revisions").stdout
    assert "hello-00001" in revs and "hello-00002" in revs

    doc = json.loads(k.knap("get", "service", "hello", "-o", "json").stdout)
    assert doc["metadata"]["name"] == "hello"
    assert "kind: Service" in k.knap("get", "ksvc", "hello", "-o", "yaml").stdout

    k.wait_for(lambda: "100%  hello-00002" in k.knap("describe", "service", "hello").stdout, what="traffic moved")
    desc = k.knap("describe", "service", "hello").stdout
    for needle in ("Name:       hello", "URL:", "Traffic:", "Revisions:", "Conditions:", "Autoscaling",
                   "target-utilization-percentage", "ConfigurationsReady"):
        assert needle in desc, f"{needle!r} missing from:\n{desc}"

    out = k.knap("delete", "service", "hello").stdout
    assert "Service 'hello' successfully deleted" in out
    assert "No services found." in k.knap("get", "services").stdout
    assert "No revisions found." in k.knap("get", "revisions").stdout


def test_errors_are_clear(knapd):
    k = knapd
    p = k.knap("get", "service", "nope", check=False)
    assert p.returncode == 1 and 'not found' in p.stderr
    p = k.knap("get", "widgets", check=False)
    assert p.returncode == 2 and "unknown kind" in p.stderr
    p = k.knap("apply", "-f", "/nonexistent.yaml", check=False)
    assert p.returncode == 1 and "cannot read /nonexistent.yaml" in p.stderr
    p = k.knap("apply", "-f", "-", check=False, input="apiVersion: serving.knative.dev/v1\nkind: Service\n"
               "metadata:\n  name: x\nspec:\n  template:\n    spec:\n      containers:\n      - name: c\n")
    assert p.returncode == 1 and "spec.template.spec.containers[0].image" in p.stderr, p.stderr
    p = k.knap("--server", "http://127.0.0.1:1", "get", "services", check=False)
    assert p.returncode == 1 and "cannot reach knapd" in p.stderr
