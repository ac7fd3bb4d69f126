"""Authentication and authorization of knapd's TCP API (issue 9), end to end:
TLS with the CA knapd creates, the admin kubeconfig it writes, bearer tokens
from a token file, role bindings, 401/403 as kube-apiserver answers them,
`kubectl auth can-i` / `kubectl auth whoami`, the knap CLI, browser defences,
and the start-up refusals (a hostile token file, plain HTTP beyond loopback)."""
import base64
import json
import os
import socket
import ssl
import subprocess
import time

import pytest

from conftest import KNAP, Knapd, data_file, requires_kubectl

API = "/apis/serving.knative.dev/v1/namespaces/default"

TOKENS = (
    "# knap test tokens\n"
    "view-token-0123456789,viewer,1001\n"
    "edit-token-0123456789,dev,1002,\"devs,qa\"\n"
)
BINDINGS = (
    "  api-role-bindings:\n"
    "  - view user:viewer default\n"
    "  - edit group:devs default\n"
)

SERVICE = {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": "hello"},
           "spec": {"template": {"spec": {"containers": [{"image": "example.com/hello:1"}]}}}}


def write(path, text, mode=0o600):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, mode)
    return path


@pytest.fixture
def authd(workdir):
    tokens = write(os.path.join(workdir, "tokens.csv"), TOKENS)
    k = Knapd(workdir, extra_config=f"  api-token-file: {tokens}\n" + BINDINGS).start()
    yield k
    k.stop()


def token_kubeconfig(k, token, name):
    """A kubeconfig with knapd's CA and a bearer token (no client certificate); token None: no credential."""
    ca = base64.b64encode(open(os.path.join(k.pki, "ca.crt"), "rb").read()).decode()
    user = f"  user:\n    token: {token}\n" if token else "  user: {}\n"
    return write(os.path.join(k.workdir, f"{name}.kubeconfig"), f"""apiVersion: v1
kind: Config
clusters:
- name: knap
  cluster:
    server: {k.url}
    certificate-authority-data: {ca}
contexts:
- name: knap
  context: {{cluster: knap, user: {name}, namespace: default}}
current-context: knap
users:
- name: {name}
""" + user)


def kubectl_as(k, kubeconfig, *args, check=True):
    env = dict(os.environ, HOME=k.workdir)
    p = subprocess.run(["kubectl", "--kubeconfig", kubeconfig, *args], capture_output=True, text=True, env=env,
                       timeout=60)
    if check and p.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def test_pki_and_kubeconfig_are_created_private_and_reused(knapd):
    k = knapd
    for name in ("ca.key", "server.key", "admin.key"):
        assert os.stat(os.path.join(k.pki, name)).st_mode & 0o777 == 0o600, name
    assert os.stat(k.pki).st_mode & 0o777 == 0o700
    text = open(k.kubeconfig).read()
    assert f"server: https://127.0.0.1:{k.api_port}" in text
    for field in ("certificate-authority-data", "client-certificate-data", "client-key-data"):
        assert field in text, text
    before = {n: open(os.path.join(k.pki, n)).read() for n in ("ca.crt", "server.crt", "admin.crt")}
    k.stop()
    k.start()
    after = {n: open(os.path.join(k.pki, n)).read() for n in ("ca.crt", "server.crt", "admin.crt")}
    assert before == after, "a restart must reuse the CA and certificates"
    assert k.http("GET", f"{API}/services")[0] == 200


@requires_kubectl
def test_kubectl_with_the_generated_kubeconfig(knapd):
    k = knapd
    out = k.kubectl("apply", "-f", data_file("e2e", "hello.yaml")).stdout
    assert "created" in out, out
    assert "hello" in k.kubectl("get", "ksvc").stdout
    svc = k.get_json(f"{API}/services/hello")
    assert svc["metadata"]["annotations"]["serving.knative.dev/creator"] == "knap-admin"
    who = k.kubectl("auth", "whoami").stdout
    assert "knap-admin" in who and "system:masters" in who, who
    assert k.kubectl("auth", "can-i", "create", "ksvc").stdout.strip() == "yes"
    # kubectl api-resources reads every advertised group, the review groups included.
    res = k.kubectl("api-resources").stdout
    assert "selfsubjectaccessreviews" in res and "ksvc" in res, res


def test_no_credentials_is_401_but_health_and_version_are_open(authd):
    k = authd
    code, body, _ = k.http("GET", f"{API}/services", client_cert=False)
    assert code == 401, body
    status = json.loads(body)
    assert status["kind"] == "Status" and status["reason"] == "Unauthorized" and status["message"] == "Unauthorized"
    for path in ("/healthz", "/readyz", "/livez", "/version"):
        assert k.http("GET", path, client_cert=False)[0] == 200, path
    assert k.http("POST", f"{API}/services", json.dumps(SERVICE), client_cert=False)[0] == 401
    assert k.http("GET", "/version", token="not-a-token")[0] == 401
    assert k.http("GET", f"{API}/services/hello", client_cert=False)[0] == 401


def test_a_view_token_can_get_but_not_create(authd):
    k = authd
    assert k.http("POST", f"{API}/services", json.dumps(SERVICE))[0] == 201  # the admin certificate
    code, body, _ = k.http("GET", f"{API}/services/hello", token="view-token-0123456789")
    assert code == 200, body
    code, body, _ = k.http("POST", f"{API}/services", json.dumps({**SERVICE, "metadata": {"name": "nope"}}),
                           token="view-token-0123456789")
    assert code == 403, body
    status = json.loads(body)
    assert status["reason"] == "Forbidden"
    assert status["message"] == ('services.serving.knative.dev is forbidden: User "viewer" cannot create resource '
                                 '"services" in API group "serving.knative.dev" in the namespace "default"')
    code, body, _ = k.http("DELETE", f"{API}/services/hello", token="view-token-0123456789")
    assert code == 403 and 'cannot delete resource "services"' in json.loads(body)["message"], body
    assert k.http("GET", f"{API}/services/nope")[0] == 404
    # An editor (by group) writes in its namespace only, and is recorded as the creator.
    code, body, _ = k.http("POST", f"{API}/services", json.dumps({**SERVICE, "metadata": {"name": "bydev"}}),
                           token="edit-token-0123456789")
    assert code == 201, body
    assert json.loads(body)["metadata"]["annotations"]["serving.knative.dev/creator"] == "dev"
    other = "/apis/serving.knative.dev/v1/namespaces/other/services"
    code, body, _ = k.http("POST", other, json.dumps(SERVICE), token="edit-token-0123456789")
    assert code == 403 and 'in the namespace "other"' in json.loads(body)["message"], body


@requires_kubectl
def test_kubectl_auth_can_i_and_whoami_per_role(authd):
    k = authd
    viewer = token_kubeconfig(k, "view-token-0123456789", "viewer")
    editor = token_kubeconfig(k, "edit-token-0123456789", "dev")
    p = kubectl_as(k, viewer, "auth", "can-i", "create", "ksvc", check=False)
    assert p.returncode == 1 and p.stdout.strip() == "no", (p.stdout, p.stderr)
    assert kubectl_as(k, viewer, "auth", "can-i", "get", "ksvc").stdout.strip() == "yes"
    assert kubectl_as(k, editor, "auth", "can-i", "create", "ksvc").stdout.strip() == "yes"
    p = kubectl_as(k, editor, "auth", "can-i", "create", "ksvc", "-n", "other", check=False)
    assert p.returncode == 1 and p.stdout.strip() == "no", (p.stdout, p.stderr)
    who = kubectl_as(k, editor, "auth", "whoami").stdout
    assert "dev" in who and "devs" in who and "qa" in who and "system:authenticated" in who, who
    # kubectl itself: the viewer lists, and its create is refused with kube-apiserver's words.
    assert "No resources found" in kubectl_as(k, viewer, "get", "ksvc").stderr
    p = kubectl_as(k, viewer, "apply", "-f", data_file("e2e", "hello.yaml"), check=False)
    assert p.returncode == 1, p.stdout
    assert "Error from server (Forbidden)" in p.stderr and 'User "viewer" cannot' in p.stderr, p.stderr
    # A token knapd does not know: kubectl reports the 401.
    rogue = token_kubeconfig(k, "not-a-known-token", "rogue")
    p = kubectl_as(k, rogue, "get", "ksvc", check=False)
    assert p.returncode == 1 and "Unauthorized" in p.stderr, (p.stdout, p.stderr)


def test_knap_cli_uses_the_kubeconfig_and_tokens(authd):
    k = authd
    assert k.knap("apply", "-f", data_file("e2e", "hello.yaml")).returncode == 0
    assert "hello" in k.knap("get", "services").stdout
    viewer = token_kubeconfig(k, "view-token-0123456789", "viewer")
    p = subprocess.run([KNAP, "--kubeconfig", viewer, "get", "services"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and "hello" in p.stdout, (p.stdout, p.stderr)
    p = subprocess.run([KNAP, "--kubeconfig", viewer, "delete", "service", "hello"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode != 0 and "forbidden" in p.stderr, (p.stdout, p.stderr)
    # --token with the kubeconfig's server and CA; a token that is not in the file is refused.
    p = subprocess.run([KNAP, "--kubeconfig", viewer, "--token", "wrong", "get", "services"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode != 0 and "Unauthorized" in p.stderr, (p.stdout, p.stderr)
    # https without knapd's CA: the server certificate is not trusted.
    p = subprocess.run([KNAP, "--server", k.url, "--token", "view-token-0123456789", "get", "services"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode != 0 and "certificate" in p.stderr.lower(), (p.stdout, p.stderr)


def test_a_client_certificate_from_another_ca_is_refused(knapd, workdir):
    k = knapd
    key, crt = os.path.join(workdir, "rogue.key"), os.path.join(workdir, "rogue.crt")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", key, "-out", crt, "-days", "1", "-subj", "/O=system:masters/CN=mallory"],
                   check=True, capture_output=True)
    ctx = ssl.create_default_context(cafile=os.path.join(k.pki, "ca.crt"))
    ctx.load_cert_chain(crt, key)
    refused = False
    try:
        with socket.create_connection(("127.0.0.1", k.api_port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                s.sendall(f"GET {API}/services HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
                reply = s.recv(100)
                refused = not reply.startswith(b"HTTP/1.1 200")
    except (ssl.SSLError, OSError):
        refused = True
    assert refused
    assert k.http("GET", f"{API}/services")[0] == 200  # and knapd serves on


def test_browser_defences_hold_for_an_authenticated_caller(knapd):
    k = knapd
    body = json.dumps(SERVICE)
    code, text, _ = k.http("POST", f"{API}/services", body, content_type="text/plain",
                           headers={"Origin": "http://evil.example"})
    assert code == 403 and "cross-origin" in text, text
    code, text, _ = k.http("POST", f"{API}/services", body, content_type="text/plain")
    assert code == 415, text
    code, text, _ = k.http("GET", f"{API}/services", headers={"Host": f"attacker.example:{k.api_port}"})
    assert code == 403 and "is not allowed" in text, text
    assert k.http("GET", f"{API}/services/hello")[0] == 404


def start_fails(k):
    with pytest.raises(RuntimeError) as e:
        k.start(timeout=20)
    k.proc.wait(timeout=10)
    assert k.proc.returncode == 1, f"knapd must exit cleanly, got {k.proc.returncode}:\n{k.log()}"
    return str(e.value)


def test_a_token_file_with_garbage_lines_is_refused_at_start_naming_the_lines(workdir):
    tokens = write(os.path.join(workdir, "tokens.csv"),
                   "good-token-0123456789,alice,1\n"
                   "only-two,columns\n"
                   ",empty-token,3\n"
                   "bad\x01control,x,4\n"
                   "\"unterminated,x,5\n"
                   "good-token-0123456789,again,6\n")
    k = Knapd(workdir, extra_config=f"  api-token-file: {tokens}\n")
    message = start_fails(k)
    for line in (2, 3, 4, 5, 6):
        assert f"{tokens} line {line}:" in message, message
    assert "line 1:" not in message
    assert "knap.api-token-file" in message


def test_binary_garbage_token_file_is_refused_without_a_crash(workdir):
    path = os.path.join(workdir, "tokens.csv")
    with open(path, "wb") as f:
        f.write(bytes(range(256)) * 64 + b"\n" + b"\xff" * 70000 + b"\n")
    k = Knapd(workdir, extra_config=f"  api-token-file: {path}\n")
    message = start_fails(k)
    assert "line 1:" in message, message


def test_plain_http_beyond_loopback_is_refused_at_start(workdir):
    k = Knapd(workdir, insecure=True)
    with open(k.config_path, "w") as f:
        f.write(f"knap:\n  data-dir: {k.data_dir}\n  api-listen: 0.0.0.0:{k.api_port}\n"
                f"  router-listen: 127.0.0.1:{k.router_port}\n  api-insecure-loopback: true\n")
    message = start_fails(k)
    assert "refusing to serve the API on 0.0.0.0:" in message and "without TLS and authentication" in message, message


def test_insecure_loopback_is_an_explicit_opt_in(workdir):
    k = Knapd(workdir, insecure=True).start()
    try:
        assert k.url.startswith("http://")
        code, body, _ = k.http("POST", f"{API}/services", json.dumps(SERVICE))
        assert code == 201, body
        assert f"server: http://127.0.0.1:{k.api_port}" in open(k.kubeconfig).read()
        assert "hello" in k.knap("get", "services").stdout
    finally:
        k.stop()


def test_role_bindings_are_checked_at_start(workdir):
    k = Knapd(workdir, extra_config="  api-role-bindings:\n  - owner user:bob default\n")
    message = start_fails(k)
    assert "knap.api-role-bindings" in message and "admin, edit or view" in message, message
