"""HTTPS for served traffic (issue 14): the router's TLS listener in front of real pods.

knapd runs with --runtime containerd (its own namespace, bridge and subnet), knap.router-tls-listen on
loopback and a certificate directory holding a wildcard certificate for *.default.example.com signed
by a CA made here with the openssl CLI. Checked with curl (and Python's ssl for the certificate served):
- status.url is https:// (external-domain-tls: Enabled) and the Service answers 200 over HTTPS;
- http-protocol: Redirected answers plain HTTP with 308 to the https:// URL; Disabled (after a restart
  with that config) answers 404 over HTTP while HTTPS goes on;
- a replaced certificate file is served by a later handshake, without a restart;
- a kubernetes.io/tls Secret serves its own namespace's host (not another namespace's), and an update
  of the Secret is served by a later handshake;
- HTTP/2 (ALPN h2): curl --http2 gets HTTP/2 200 with the pod's body; 40 parallel transfers share one
  connection and each gets its own answer; a 1.5 MiB upload is echoed whole; HTTP/1.1 clients (ALPN
  http/1.1, or none) on the same listener are still served;
- a host without a certificate fails the handshake;
- a client sending no SNI (Python's ssl, openssl s_client -noservername) gets an unrecognized_name alert;
  with knap.router-tls-default-host (after the restart) it gets that host's certificate and a 200;
- an inherited listening socket named "router-tls" (socket activation) is served as the HTTPS listener.
"""
import base64
import fcntl
import http.client
import json
import os
import socket
import ssl
import subprocess
import sys
import time

import pytest

from conftest import KNAPD, Knapd, free_port
from registry import teardown_knapd_pods
from test_serving import apply, containerd_ok, get, import_testapp, service

needs_containerd = pytest.mark.skipif(
    not containerd_ok(), reason="!!! HTTPS end-to-end tests SKIPPED: need root and a running containerd !!!")

DOMAIN = "example.com"


def openssl(*args, cwd):
    p = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    assert p.returncode == 0, f"openssl {' '.join(args)}:\n{p.stderr}"


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
            "-keyout", f"{name}.key", "-out", f"{name}.crt", "-subj", f"/CN=knap e2e {name}", cwd=d)
    return os.path.join(d, f"{name}.crt")


def make_cert(d, out, names, ca):
    """Writes <d>/<out>.crt and .key: a leaf for DNS `names`, signed by CA `ca` (a make_ca name in d)."""
    ext = os.path.join(d, f"{out}.ext")
    with open(ext, "w") as f:
        f.write("subjectAltName=" + ",".join("DNS:" + n for n in names) + "\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", f"{out}.key",
            "-out", f"{out}.csr", "-subj", f"/CN={names[0]}", cwd=d)
    openssl("x509", "-req", "-in", f"{out}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-days", "2", "-out", f"{out}.crt", "-extfile", ext, cwd=d)
    with open(os.path.join(d, f"{out}.crt")) as c, open(os.path.join(d, f"{out}.key")) as k:
        return c.read(), k.read()


def served_cert(port, host, timeout=10):
    """The DER leaf certificate the router presents for SNI `host` (no verification), or None when the
    handshake fails."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            with ctx.wrap_socket(s, server_hostname=host) as t:
                return t.getpeercert(binary_form=True)
    except (ssl.SSLError, OSError):
        return None


def no_sni_get(port, host, cafile):
    """(DER leaf, HTTP status) of a GET with Host `host` from a client that sends no SNI (an IP-address
    client, an old client), verifying the chain against `cafile` (not the name: there is none to check);
    (None, error text) when the handshake or the request fails."""
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.check_hostname = False
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            with ctx.wrap_socket(s, server_hostname=None) as t:
                t.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
                head = b""
                while b"\r\n" not in head:
                    chunk = t.recv(4096)
                    if not chunk:
                        break
                    head += chunk
                return t.getpeercert(binary_form=True), head.split(b"\r\n", 1)[0].decode(errors="replace")
    except (ssl.SSLError, OSError) as e:
        return None, str(e)


def openssl_no_sni(port):
    """The output of `openssl s_client -noservername` against the HTTPS listener."""
    p = subprocess.run(["openssl", "s_client", "-noservername", "-connect", f"127.0.0.1:{port}"],
                       input="", capture_output=True, text=True, timeout=60)
    return p.stdout + p.stderr


def der(pem):
    return ssl.PEM_cert_to_DER_cert(pem)


def curl_https(port, host, cafile, path="/"):
    """(exit code, HTTP status, body) of curl verifying the server with `cafile`."""
    p = subprocess.run(["curl", "-sS", "--max-time", "30", "--cacert", cafile, "--resolve", f"{host}:{port}:127.0.0.1",
                        "-o", "-", "-w", "\n%{http_code}", f"https://{host}:{port}{path}"],
                       capture_output=True, text=True)
    body, _, code = p.stdout.rpartition("\n")
    return p.returncode, code, body + p.stderr


def curl_h2(port, host, cafile, path="/"):
    """(exit code, HTTP version, status, body) of `curl --http2` (ALPN h2, falling back to http/1.1)."""
    p = subprocess.run(["curl", "-sS", "--http2", "--max-time", "30", "--cacert", cafile, "--resolve",
                        f"{host}:{port}:127.0.0.1", "-o", "-", "-w", "\n%{http_version} %{http_code}",
                        f"https://{host}:{port}{path}"], capture_output=True, text=True)
    body, _, tail = p.stdout.rpartition("\n")
    version, _, code = tail.partition(" ")
    return p.returncode, version, code, body + p.stderr


STREAMS = 40


def check_h2_streams_and_http11(k, host):
    """Many concurrent HTTP/2 streams on one connection each get their own answer from the pod; a large
    upload streams through flow control; HTTP/1.1 clients on the same listener are served as before."""
    out = os.path.join(k.workdir, "h2out")
    os.makedirs(out, exist_ok=True)
    # curl multiplexes parallel transfers to one host over one HTTP/2 connection (it waits for the
    # first connection's ALPN rather than opening more): one local port for all, each its own body.
    p = subprocess.run(["curl", "-sS", "--http2", "--parallel", "--parallel-max", str(STREAMS), "--max-time", "90",
                        "--cacert", k.cafile, "--resolve", f"{host}:{k.tls_port}:127.0.0.1",
                        "-w", "%{http_version} %{http_code} %{local_port} %{url_effective}\n",
                        "-o", os.path.join(out, "r#1"), f"https://{host}:{k.tls_port}/headers?i=[0-{STREAMS - 1}]"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.split()
    rows = [lines[i:i + 4] for i in range(0, len(lines), 4)]
    assert len(rows) == STREAMS, p.stdout
    assert {(v, c) for v, c, _, _ in rows} == {("2", "200")}, p.stdout
    assert len({port for _, _, port, _ in rows}) == 1, "not one connection:\n" + p.stdout
    for i in range(STREAMS):
        with open(os.path.join(out, f"r{i}")) as f:
            answer = json.load(f)
        assert answer["target"] == f"/headers?i={i}", answer
        assert answer["host"] == f"{host}:{k.tls_port}", answer
        assert {n.lower(): v for n, v in answer["headers"].items()}.get("x-forwarded-proto") == "https", answer

    # A body larger than the stream and connection windows, echoed back whole.
    blob = os.path.join(out, "blob")
    with open(blob, "wb") as f:
        f.write(bytes(range(256)) * (6 * 1024))  # 1.5 MiB
    p = subprocess.run(["curl", "-sS", "--http2", "--max-time", "90", "--cacert", k.cafile, "--resolve",
                        f"{host}:{k.tls_port}:127.0.0.1", "--data-binary", f"@{blob}", "-H",
                        "Content-Type: application/octet-stream", "-o", os.path.join(out, "echo"), "-w",
                        "%{http_version} %{http_code}", f"https://{host}:{k.tls_port}/echo"],
                       capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stdout) == (0, "2 200"), p.stdout + p.stderr
    with open(blob, "rb") as a, open(os.path.join(out, "echo"), "rb") as b:
        assert a.read() == b.read()

    # HTTP/1.1 on the same listener (ALPN http/1.1, and no ALPN at all).
    for flags in (["--http1.1"], ["--http1.1", "--no-alpn"]):
        p = subprocess.run(["curl", "-sS", *flags, "--max-time", "30", "--cacert", k.cafile, "--resolve",
                            f"{host}:{k.tls_port}:127.0.0.1", "-o", "-", "-w", "\n%{http_version} %{http_code}",
                            f"https://{host}:{k.tls_port}/hello"], capture_output=True, text=True, timeout=60)
        body, _, tail = p.stdout.rpartition("\n")
        assert (p.returncode, tail) == (0, "1.1 200"), p.stdout + p.stderr
        assert body.startswith("Hello World!"), body


def until(pred, timeout=60, what="condition"):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def secret(ns, name, cert, key):
    def b64(s):
        return base64.b64encode(s.encode()).decode()
    return json.dumps({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                       "metadata": {"name": name, "namespace": ns},
                       "data": {"tls.crt": b64(cert), "tls.key": b64(key)}})


def config_text(protocol):
    return ("network:\n"
            "  external-domain-tls: Enabled\n"
            f"  http-protocol: {protocol}\n"
            "domain:\n"
            f"  {DOMAIN}: \"\"\n")


@pytest.fixture
def https(workdir):
    tag = os.getpid() % 150 + 60
    ns = f"knap-e2e-{tag}"
    bridge = f"knape2e{tag}"
    certs = os.path.join(workdir, "tls")
    pki = os.path.join(workdir, "pki")
    os.makedirs(certs)
    os.makedirs(pki)
    make_ca(pki, "ca")
    make_cert(pki, "wild", [f"*.default.{DOMAIN}"], "ca")
    os.rename(os.path.join(pki, "wild.crt"), os.path.join(certs, "wild.crt"))
    os.rename(os.path.join(pki, "wild.key"), os.path.join(certs, "wild.key"))
    tls_port = free_port()
    knap_section = (f"  containerd-namespace: {ns}\n"
                    f"  bridge-name: {bridge}\n"
                    f"  pod-subnet: 10.217.{tag}.0/24\n"
                    "  metrics-listen: 127.0.0.1:0\n"
                    f"  router-tls-listen: 127.0.0.1:{tls_port}\n"
                    f"  router-tls-certificates-dir: {certs}\n")
    k = Knapd(workdir, runtime="containerd", extra_config=knap_section + config_text("Redirected"))
    k.tls_port = tls_port
    k.certs = certs
    k.test_pki = pki
    k.knap_section = knap_section
    k.cafile = os.path.join(pki, "ca.crt")
    import_testapp(workdir, ns)
    try:
        k.start(timeout=60)
    except Exception:
        k.kill()  # a knapd that did not become ready must not outlive the test (it holds ports)
        teardown_knapd_pods(None, ns, bridge)
        raise
    yield k
    if k.alive():
        k.http("DELETE", "/apis/serving.knative.dev/v1/namespaces/team/services/api")
    teardown_knapd_pods(k, ns, bridge)


@needs_containerd
def test_https_files_secrets_redirect_and_reload(https):
    k = https
    pki = k.test_pki
    host = f"web.default.{DOMAIN}"
    apply(k, service("web"))
    svc = k.get_json("/apis/serving.knative.dev/v1/namespaces/default/services/web")
    assert svc["status"]["url"] == f"https://{host}", svc["status"]

    # HTTPS with the wildcard certificate from the directory, verified by curl.
    rc, code, body = until(lambda: (lambda r: r if r[1] == "200" else None)(curl_https(k.tls_port, host, k.cafile)),
                           what="HTTPS 200 from " + host)
    assert rc == 0 and code == "200", body

    # HTTP/2 to the same Service: same route, same pod, the pod's own body.
    rc, version, code, body2 = curl_h2(k.tls_port, host, k.cafile, "/hello")
    assert (rc, version, code) == (0, "2", "200"), body2
    assert body2.startswith("Hello World! How about some tasty noodles?"), body2
    p = subprocess.run(["curl", "-sS", "-i", "--http2", "--max-time", "30", "--cacert", k.cafile, "--resolve",
                        f"{host}:{k.tls_port}:127.0.0.1", f"https://{host}:{k.tls_port}/hello"],
                       capture_output=True, text=True)
    assert p.stdout.startswith("HTTP/2 200"), p.stdout + p.stderr
    check_h2_streams_and_http11(k, host)

    # http-protocol: Redirected.
    c = http.client.HTTPConnection("127.0.0.1", k.router_port, timeout=30)
    c.request("GET", "/some/path?x=1", headers={"Host": host})
    r = c.getresponse()
    r.read()
    assert r.status == 308
    assert r.getheader("Location") == f"https://{host}:{k.tls_port}/some/path?x=1"
    c.close()

    # A host no certificate covers: the handshake fails.
    assert served_cert(k.tls_port, f"web.other.{DOMAIN}") is None
    rc, _, _ = curl_https(k.tls_port, f"nothing.{DOMAIN}", k.cafile)
    assert rc != 0

    # No SNI and no knap.router-tls-default-host: a clear unrecognized_name alert, not a reset.
    cert, err = no_sni_get(k.tls_port, host, k.cafile)
    assert cert is None and "UNRECOGNIZED_NAME" in err.upper(), err
    out = openssl_no_sni(k.tls_port)
    assert "unrecognized name" in out, out

    # A replaced file (new key, new certificate) is served by a later handshake, no restart.
    new_cert, new_key = make_cert(pki, "wild2", [f"*.default.{DOMAIN}"], "ca")
    for ext, text in (("key", new_key), ("crt", new_cert)):
        tmp = os.path.join(k.certs, f".wild.{ext}.tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.rename(tmp, os.path.join(k.certs, f"wild.{ext}"))
    until(lambda: served_cert(k.tls_port, host) == der(new_cert), timeout=30, what="the replaced file served")
    rc, code, body = curl_https(k.tls_port, host, k.cafile)
    assert (rc, code) == (0, "200"), body

    # Secrets: a kubernetes.io/tls Secret serves its own namespace's routed hosts only.
    api_host = f"api.team.{DOMAIN}"
    k.kubectl("create", "namespace", "team")
    apply(k, service("api").replace('"name": "api"}', '"name": "api", "namespace": "team"}'))
    make_ca(pki, "ca2")
    c1, k1 = make_cert(pki, "api1", [api_host], "ca2")
    # In another namespace it is not used.
    k.kubectl("apply", "-f", "-", input=secret("default", "steal", c1, k1))
    time.sleep(1)
    assert served_cert(k.tls_port, api_host) is None
    k.kubectl("apply", "-f", "-", input=secret("team", "api-tls", c1, k1))
    ca2 = os.path.join(pki, "ca2.crt")
    until(lambda: curl_https(k.tls_port, api_host, ca2)[1] == "200", what="HTTPS 200 with the Secret")
    assert served_cert(k.tls_port, api_host) == der(c1)
    # An updated Secret is served by a later handshake.
    c2, k2 = make_cert(pki, "api2", [api_host], "ca2")
    k.kubectl("apply", "-f", "-", input=secret("team", "api-tls", c2, k2))
    until(lambda: served_cert(k.tls_port, api_host) == der(c2), timeout=30, what="the updated Secret served")
    rc, code, body = curl_https(k.tls_port, api_host, ca2)
    assert (rc, code) == (0, "200"), body

    # http-protocol: Disabled, after a restart with that config: HTTP 404, HTTPS 200.
    # knap.router-tls-default-host too: a client without SNI gets that host's certificate.
    k.stop()
    with open(k.config_path, "w") as f:
        f.write("knap:\n"
                f"  data-dir: {k.data_dir}\n"
                f"  api-listen: 127.0.0.1:{k.api_port}\n"
                f"  router-listen: 127.0.0.1:{k.router_port}\n"
                f"  router-tls-default-host: {host}\n" + k.knap_section + config_text("Disabled"))
    k.start(timeout=60)
    status, body = get(k, host)
    assert status == 404 and "served over HTTPS only" in body, (status, body)
    rc, code, body = until(lambda: (lambda r: r if r[1] == "200" else None)(curl_https(k.tls_port, host, k.cafile)),
                           what="HTTPS 200 after the restart")
    assert rc == 0
    cert, line = until(lambda: (lambda r: r if r[0] is not None and " 200 " in r[1] else None)(
        no_sni_get(k.tls_port, host, k.cafile)), what="HTTPS 200 without SNI (the default host's certificate)")
    assert cert == der(new_cert), line  # the file covering the default host, verified against the test CA
    out = openssl_no_sni(k.tls_port)
    assert "unrecognized name" not in out and f"*.default.{DOMAIN}" in out, out


def test_inherited_router_tls_socket_is_the_https_listener(workdir):
    """No router-tls-listen in the config: the socket handed over as LISTEN_FDNAMES=router-tls serves TLS."""
    pki = os.path.join(workdir, "pki")
    certs = os.path.join(workdir, "tls")
    os.makedirs(pki)
    os.makedirs(certs)
    make_ca(pki, "ca")
    cert, _ = make_cert(pki, "one", [f"one.default.{DOMAIN}"], "ca")
    for ext in ("crt", "key"):
        os.rename(os.path.join(pki, f"one.{ext}"), os.path.join(certs, f"one.{ext}"))
    held = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    held.bind(("127.0.0.1", 0))
    held.listen(128)
    port = held.getsockname()[1]
    k = Knapd(workdir, extra_config=f"  metrics-listen: \"\"\n  router-tls-certificates-dir: {certs}\n")
    hi = fcntl.fcntl(held.fileno(), fcntl.F_DUPFD_CLOEXEC, 20)
    # The wrapper moves the socket to fd 3 and execs knapd, so LISTEN_PID is knapd's pid.
    wrapper = ("import os, sys\n"
               f"os.dup2({hi}, 3); os.close({hi})\n"
               "os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='1', LISTEN_FDNAMES='router-tls')\n"
               "os.execv(sys.argv[1], sys.argv[1:])\n")
    log = open(k.log_path, "a")
    try:
        k.proc = subprocess.Popen([sys.executable, "-c", wrapper, KNAPD, "--config", k.config_path, "--runtime", "none"],
                                  stdout=log, stderr=subprocess.STDOUT, pass_fds=[hi])
    finally:
        os.close(hi)
    try:
        got = until(lambda: served_cert(port, f"one.default.{DOMAIN}", timeout=2), timeout=60,
                    what="a TLS handshake on the inherited socket")
        assert got == der(cert)
        assert served_cert(port, f"two.default.{DOMAIN}", timeout=5) is None
        assert "router HTTPS listener on port " + str(port) in k.log()
    finally:
        k.stop()
        held.close()
