"""Shared fixtures for knap's end-to-end tests.

Each test gets a real knapd process (built by meson into $KNAP_BUILD_DIR) with
its own data dir and loopback ports, a kubeconfig pointing at it, and helpers
to drive it with the real kubectl and the knap CLI.

knapd runs the secure default: its TCP API speaks TLS with the CA it creates
under <data-dir>/pki, and every helper here (http, api_socket, kubectl, knap)
authenticates as the admin with the client certificate knapd issued, exactly
as the kubeconfig knapd writes does. Knapd(insecure=True) is the explicit
opt-in to plain HTTP on loopback (knap.api-insecure-loopback).
"""
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.request
import urllib.error

import pytest

# Registry fixtures (registry.py): registry_ca, registry, make_registry, make_fault_proxy, testapp_image,
# containerd_ns, knap_pull.
from ports import free_port  # noqa: F401,E402 - re-exported for the tests
from registry import (containerd_ns, knap_pull, make_fault_proxy, make_registry, registry,  # noqa: F401,E402
                      registry_ca, testapp_image)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("KNAP_BUILD_DIR", os.path.join(ROOT, "build"))
KNAPD = os.path.join(BUILD, "daemon", "knapd")
KNAP = os.path.join(BUILD, "tools", "knap")
DATA = os.path.join(ROOT, "tests", "data")
KUBECTL = shutil.which("kubectl")




class Knapd:
    """A knapd process under test. start()/kill()/stop() may be called repeatedly."""

    def __init__(self, workdir, runtime="none", extra_config="", extra_args=(), insecure=False):
        self.workdir = workdir
        self.insecure = insecure
        if insecure:
            extra_config += "  api-insecure-loopback: true\n"
        self.extra_args = list(extra_args)
        self.data_dir = os.path.join(workdir, "data")
        self.api_port = free_port()
        self.router_port = free_port()
        self.runtime = runtime
        self.config_path = os.path.join(workdir, "config.yaml")
        with open(self.config_path, "w") as f:
            f.write(
                "knap:\n"
                f"  data-dir: {self.data_dir}\n"
                f"  api-listen: 127.0.0.1:{self.api_port}\n"
                f"  router-listen: 127.0.0.1:{self.router_port}\n" + extra_config
            )
        self.kubeconfig = os.path.join(self.data_dir, "kubeconfig")
        self.pki = os.path.join(self.data_dir, "pki")
        self.proc = None
        self.log_path = os.path.join(workdir, "knapd.log")

    @property
    def url(self):
        return f"{'http' if self.insecure else 'https'}://127.0.0.1:{self.api_port}"

    def ssl_context(self, client_cert=True):
        """Trusts knapd's CA; with client_cert, presents the admin certificate (CN=knap-admin, O=system:masters).
        Cached until the next start() (knapd may re-issue certificates when it starts)."""
        cache = self.__dict__.setdefault("_ssl_contexts", {})
        if client_cert not in cache:
            ctx = ssl.create_default_context(cafile=os.path.join(self.pki, "ca.crt"))
            if client_cert:
                ctx.load_cert_chain(os.path.join(self.pki, "admin.crt"), os.path.join(self.pki, "admin.key"))
            cache[client_cert] = ctx
        return cache[client_cert]

    def api_socket(self, timeout=None, client_cert=True):
        """A raw connection to the API (TLS-wrapped unless insecure), for tests that write HTTP by hand."""
        s = socket.create_connection(("127.0.0.1", self.api_port), timeout=timeout)
        if self.insecure:
            return s
        return self.ssl_context(client_cert).wrap_socket(s, server_hostname="127.0.0.1")

    def start(self, timeout=20):
        self.__dict__.pop("_ssl_contexts", None)
        log = open(self.log_path, "a")
        self.proc = subprocess.Popen(
            [KNAPD, "--config", self.config_path, "--runtime", self.runtime, *self.extra_args],
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"knapd exited with {self.proc.returncode}:\n{self.log()}")
            # /readyz is open to anonymous callers; the CA exists once knapd has created its PKI.
            if self.insecure or os.path.exists(os.path.join(self.pki, "ca.crt")):
                try:
                    ctx = None if self.insecure else self.ssl_context(client_cert=False)
                    with urllib.request.urlopen(self.url + "/readyz", timeout=1, context=ctx) as r:
                        if r.status == 200:
                            return self
                except (urllib.error.URLError, ConnectionError, OSError, ssl.SSLError):
                    pass
            time.sleep(0.05)
        raise RuntimeError("knapd did not become ready:\n" + self.log())

    def log(self):
        try:
            with open(self.log_path) as f:
                return f.read()[-8000:]
        except OSError:
            return ""

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self):
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def stop(self):
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    # --- raw HTTP -------------------------------------------------------
    def http(self, method, path, body=None, content_type="application/json", accept="application/json", timeout=10,
             headers=None, token=None, client_cert=None):
        """One request as the admin (client certificate), or with `token` as a bearer token and no certificate,
        or with client_cert=False and no token: no credentials at all."""
        data = body.encode() if isinstance(body, str) else body
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if client_cert is None:
            client_cert = token is None
        ctx = None if self.insecure else self.ssl_context(client_cert)
        if token is not None:
            req.add_header("Authorization", f"Bearer {token}")
        if data is not None and content_type is not None:
            req.add_header("Content-Type", content_type)
        req.add_header("Accept", accept)
        for name, value in (headers or {}).items():
            req.add_header(name, value)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=ctx) as r:
                return r.status, r.read().decode(), dict(r.headers)
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode(), dict(e.headers)

    def get_json(self, path):
        code, body, _ = self.http("GET", path)
        assert code == 200, f"GET {path}: {code} {body}"
        return json.loads(body)

    # --- clients --------------------------------------------------------
    def kubectl(self, *args, check=True, input=None, timeout=60):
        env = dict(os.environ, HOME=self.workdir)  # own discovery cache per test
        p = subprocess.run([KUBECTL, "--kubeconfig", self.kubeconfig, *args], capture_output=True, text=True,
                           input=input, env=env, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        return p

    def knap(self, *args, check=True, input=None, timeout=60):
        p = subprocess.run([KNAP, "--kubeconfig", self.kubeconfig, *args], capture_output=True, text=True,
                           input=input, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"knap {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        return p

    def wait_for(self, predicate, timeout=20, what="condition"):
        deadline = time.time() + timeout
        last = None
        while time.time() < deadline:
            last = predicate()
            if last:
                return last
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what} (last: {last!r})\n--- knapd log ---\n{self.log()}")


@pytest.fixture
def workdir():
    d = tempfile.mkdtemp(prefix="knap-e2e-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def knapd(workdir):
    k = Knapd(workdir).start()
    yield k
    k.stop()


def data_file(*parts):
    return os.path.join(DATA, *parts)


requires_kubectl = pytest.mark.skipif(
    KUBECTL is None, reason="!!! kubectl is not installed on this machine: kubectl end-to-end tests SKIPPED !!!")
