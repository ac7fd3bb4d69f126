"""Built-in ACME (issue 14) against Debian's pebble ACME test server, all on loopback.

pebble runs with its own TLS certificate (made here with openssl; knap trusts it through
knap.acme-ca-file), httpPort = knapd's router port, PEBBLE_VA_NOSLEEP=1, PEBBLE_WFE_NONCEREJECT=0, a
certificate lifetime of 120 s and -dnsserver pointing at a tiny DNS server in this file that answers A
127.0.0.1 for every name except broken.* (127.0.0.2, where nothing listens on the router port).
knapd has external-domain-tls: Enabled, knap.acme-directory = pebble and acme-renew-before 90 s, so a
certificate is renewed 30 s after it is issued (the early-renewal path, without a restart). Shown:
- a Service gets a certificate: curl --cacert <pebble's root from /roots/0> over HTTPS answers 200 and
  the Route's CertificateProvisioned is True; the key is 0600 under <data-dir>/acme/certs;
- the renewed certificate (a new serial) is served by a later handshake, knapd not restarted;
- a Service whose validation fails shows CertificateProvisioned False naming the ACME error;
- a DomainMapping (app.example.org) gets its own certificate from the same ACME client: status.url is
  https://, CertificateProvisioned True, served by SNI (curl with pebble's root answers 200 from the pod)
  and renewed without a restart; a DomainMapping whose validation fails (broken.example.org) shows
  CertificateProvisioned False on the DomainMapping while the healthy one keeps being served.
"""
import json
import os
import socket
import ssl
import stat
import struct
import subprocess
import threading
import time
import urllib.request

import pytest

from conftest import Knapd, free_port
from registry import teardown_knapd_pods
from test_https import curl_https, served_cert, until
from test_serving import apply, containerd_ok, import_testapp, service

needs_pebble = pytest.mark.skipif(
    not containerd_ok() or not os.path.exists("/usr/bin/pebble"),
    reason="!!! ACME end-to-end tests SKIPPED: need root, a running containerd and /usr/bin/pebble !!!")

DOMAIN = "example.com"


class DnsStub:
    """Answers A queries: 127.0.0.2 for names starting with "broken.", 127.0.0.1 otherwise; other types
    get an empty NOERROR answer."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.stopping = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        self.sock.settimeout(0.5)
        while not self.stopping:
            try:
                q, addr = self.sock.recvfrom(512)
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                self.sock.sendto(self.answer(q), addr)
            except (ValueError, IndexError, struct.error, OSError):
                continue

    @staticmethod
    def answer(q):
        qid, flags, qdcount = struct.unpack("!HHH", q[:6])
        i, labels = 12, []
        while q[i] != 0:
            n = q[i]
            labels.append(q[i + 1:i + 1 + n].decode("ascii", "replace").lower())
            i += 1 + n
        qtype, qclass = struct.unpack("!HH", q[i + 1:i + 5])
        question = q[12:i + 5]
        answers = b""
        count = 0
        if qtype == 1:
            ip = "127.0.0.2" if labels and labels[0] == "broken" else "127.0.0.1"
            answers = b"\xc0\x0c" + struct.pack("!HHIH", 1, 1, 5, 4) + socket.inet_aton(ip)
            count = 1
        header = struct.pack("!HHHHHH", qid, 0x8180 | (flags & 0x0100), 1, count, 0, 0)
        return header + question + answers

    def stop(self):
        self.stopping = True
        self.sock.close()


def openssl(*args, cwd):
    p = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    assert p.returncode == 0, f"openssl {' '.join(args)}:\n{p.stderr}"


@pytest.fixture
def acme(workdir):
    tag = os.getpid() % 150 + 60
    ns = f"knap-e2e-{tag}"
    bridge = f"knape2e{tag}"
    pki = os.path.join(workdir, "pebble")
    os.makedirs(pki)
    # pebble's own HTTPS certificate (for 127.0.0.1), from a CA knap is told to trust.
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "2",
            "-keyout", "ca.key", "-out", "ca.crt", "-subj", "/CN=knap e2e pebble CA", cwd=pki)
    with open(os.path.join(pki, "ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "srv.key",
            "-out", "srv.csr", "-subj", "/CN=127.0.0.1", cwd=pki)
    openssl("x509", "-req", "-in", "srv.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
            "-out", "srv.crt", "-extfile", "ext", cwd=pki)
    dns = DnsStub()
    acme_port, mgmt_port, tls_port = free_port(), free_port(), free_port()
    knap_section = (f"  containerd-namespace: {ns}\n"
                    f"  bridge-name: {bridge}\n"
                    f"  pod-subnet: 10.217.{tag}.0/24\n"
                    "  metrics-listen: 127.0.0.1:0\n"
                    f"  router-tls-listen: 127.0.0.1:{tls_port}\n"
                    f"  acme-directory: https://127.0.0.1:{acme_port}/dir\n"
                    "  acme-email: ops@example.com\n"
                    f"  acme-ca-file: {pki}/ca.crt\n"
                    "  acme-renew-before: 90s\n")
    config = ("network:\n  external-domain-tls: Enabled\n"
              f"domain:\n  {DOMAIN}: \"\"\n")
    k = Knapd(workdir, runtime="containerd", extra_config=knap_section + config)
    k.tls_port = tls_port
    with open(os.path.join(pki, "pebble.json"), "w") as f:
        json.dump({"pebble": {"listenAddress": f"127.0.0.1:{acme_port}",
                              "managementListenAddress": f"127.0.0.1:{mgmt_port}",
                              "certificate": os.path.join(pki, "srv.crt"),
                              "privateKey": os.path.join(pki, "srv.key"),
                              "httpPort": k.router_port, "tlsPort": free_port(),
                              "ocspResponderURL": "", "externalAccountBindingRequired": False,
                              "certificateValidityPeriod": 120}}, f)
    env = dict(os.environ, PEBBLE_VA_NOSLEEP="1", PEBBLE_WFE_NONCEREJECT="0", PEBBLE_AUTHZREUSE="0")
    pebble_log = open(os.path.join(workdir, "pebble.log"), "w")
    pebble = subprocess.Popen(["/usr/bin/pebble", "-config", os.path.join(pki, "pebble.json"),
                               "-dnsserver", f"127.0.0.1:{dns.port}"],
                              env=env, stdout=pebble_log, stderr=subprocess.STDOUT)
    k.pebble_log = os.path.join(workdir, "pebble.log")
    k.mgmt = f"https://127.0.0.1:{mgmt_port}"
    k.ca_ctx = ssl.create_default_context(cafile=os.path.join(pki, "ca.crt"))
    import_testapp(workdir, ns)
    try:
        until(lambda: _port_open(acme_port), timeout=30, what="pebble listening")
        k.start(timeout=60)
        yield k
    finally:
        if k.alive():
            teardown_knapd_pods(k, ns, bridge)
        else:
            k.kill()
            teardown_knapd_pods(None, ns, bridge)
        pebble.terminate()
        try:
            pebble.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pebble.kill()
            pebble.wait()
        pebble_log.close()
        dns.stop()


def _port_open(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False


def route_condition(k, name, ctype):
    r = k.get_json(f"/apis/serving.knative.dev/v1/namespaces/default/routes/{name}")
    for c in r.get("status", {}).get("conditions", []):
        if c["type"] == ctype:
            return c
    return None


def dm_condition(k, name, ctype):
    dm = k.get_json(f"/apis/serving.knative.dev/v1beta1/namespaces/default/domainmappings/{name}")
    for c in dm.get("status", {}).get("conditions", []):
        if c["type"] == ctype:
            return c
    return None


def domain_mapping(name, target):
    return json.dumps({"apiVersion": "serving.knative.dev/v1beta1", "kind": "DomainMapping",
                       "metadata": {"name": name, "namespace": "default"},
                       "spec": {"ref": {"apiVersion": "serving.knative.dev/v1", "kind": "Service", "name": target}}})


def pebble_root(k, workdir):
    """pebble's root (from its management endpoint) as a file: it verifies the certificates knap serves."""
    with urllib.request.urlopen(k.mgmt + "/roots/0", context=k.ca_ctx, timeout=30) as r:
        root = r.read().decode()
    rootfile = os.path.join(workdir, "pebble-root.pem")
    with open(rootfile, "w") as f:
        f.write(root)
    return rootfile


def serial_of(der):
    p = subprocess.run(["openssl", "x509", "-inform", "DER", "-noout", "-serial"], input=der, capture_output=True)
    assert p.returncode == 0, p.stderr
    return p.stdout.decode().strip()


@needs_pebble
def test_acme_issues_renews_and_reports_failures(acme, workdir):
    k = acme
    host = f"web.default.{DOMAIN}"
    apply(k, service("web"))  # --wait: Ready needs CertificateProvisioned, i.e. the certificate issued
    cond = until(lambda: (lambda c: c if c and c["status"] == "True" else None)(
        route_condition(k, "web", "CertificateProvisioned")), timeout=90, what="CertificateProvisioned True")
    assert cond["reason"] == "CertificateProvisioned", cond

    rootfile = pebble_root(k, workdir)
    rc, code, body = until(lambda: (lambda r: r if r[1] == "200" else None)(curl_https(k.tls_port, host, rootfile)),
                           timeout=90, what="HTTPS 200 with pebble's certificate\n" + k.log())
    assert rc == 0, body
    key = os.path.join(k.data_dir, "acme", "certs", host + ".key")
    assert stat.S_IMODE(os.stat(key).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.join(k.data_dir, "acme", "account.key")).st_mode) == 0o600

    # Early renewal (lifetime 120 s, renew-before 90 s): a new serial is served, no restart.
    first = serial_of(served_cert(k.tls_port, host))
    pid = k.proc.pid
    until(lambda: (lambda d: d is not None and serial_of(d) != first)(served_cert(k.tls_port, host)),
          timeout=150, what="a renewed certificate served")
    assert k.proc.pid == pid and k.alive()
    until(lambda: curl_https(k.tls_port, host, rootfile)[1] == "200", timeout=90, what="HTTPS 200 after renewal")

    # A failing order: the DNS stub sends pebble's validation to 127.0.0.2, where nothing listens.
    doc = service("broken")
    k.kubectl("apply", "-f", "-", input=doc)
    cond = until(lambda: (lambda c: c if c and c["status"] == "False" else None)(
        route_condition(k, "broken", "CertificateProvisioned")), timeout=90,
        what="CertificateProvisioned False on the broken Route")
    assert cond["reason"] == "CertificateProvisionFailed", cond
    assert "broken.default.example.com" in cond["message"] and "urn:ietf:params:acme:error" in cond["message"], cond
    # The healthy host keeps being served.
    until(lambda: curl_https(k.tls_port, host, rootfile)[1] == "200", timeout=90, what="HTTPS 200 still")


@needs_pebble
def test_acme_domain_mapping_gets_renews_and_reports(acme, workdir):
    k = acme
    apply(k, service("web"))
    mapped = "app.example.org"
    k.kubectl("apply", "-f", "-", input=domain_mapping(mapped, "web"))
    # Unknown (CertificateNotReady) until the ACME client has the certificate, then True.
    cond = until(lambda: (lambda c: c if c and c["status"] != "Unknown" else None)(
        dm_condition(k, mapped, "CertificateProvisioned")), timeout=120,
        what="CertificateProvisioned settled on the DomainMapping\n" + k.log())
    assert cond["status"] == "True" and cond["reason"] == "CertificateProvisioned", cond
    until(lambda: (lambda c: c and c["status"] == "True")(dm_condition(k, mapped, "Ready")), timeout=90,
          what="the DomainMapping Ready")
    dm = k.get_json(f"/apis/serving.knative.dev/v1beta1/namespaces/default/domainmappings/{mapped}")
    assert dm["status"]["url"] == f"https://{mapped}", dm["status"]

    rootfile = pebble_root(k, workdir)
    rc, code, body = until(lambda: (lambda r: r if r[1] == "200" else None)(curl_https(k.tls_port, mapped, rootfile)),
                           timeout=90, what="HTTPS 200 for the mapped host with pebble's certificate\n" + k.log())
    assert rc == 0 and json.loads(body)["revision"].startswith("web-"), body  # the mapped Service's pod
    assert os.path.exists(os.path.join(k.data_dir, "acme", "certs", mapped + ".crt"))

    # Renewal (lifetime 120 s, renew-before 90 s): a new serial for the mapped host, no restart.
    first = serial_of(served_cert(k.tls_port, mapped))
    pid = k.proc.pid
    until(lambda: (lambda d: d is not None and serial_of(d) != first)(served_cert(k.tls_port, mapped)),
          timeout=180, what="a renewed certificate served for the mapped host")
    assert k.proc.pid == pid and k.alive()

    # A failing order on a mapping: the DNS stub sends pebble's validation of broken.* to 127.0.0.2.
    broken = "broken.example.org"
    k.kubectl("apply", "-f", "-", input=domain_mapping(broken, "web"))
    cond = until(lambda: (lambda c: c if c and c["status"] == "False" else None)(
        dm_condition(k, broken, "CertificateProvisioned")), timeout=120,
        what="CertificateProvisioned False on the broken DomainMapping\n" + k.log())
    assert cond["reason"] == "CertificateProvisionFailed", cond
    assert broken in cond["message"] and "urn:ietf:params:acme:error" in cond["message"], cond
    assert dm_condition(k, broken, "Ready")["status"] == "False"
    # The healthy mapping keeps being served.
    until(lambda: curl_https(k.tls_port, mapped, rootfile)[1] == "200", timeout=90, what="HTTPS 200 still")
