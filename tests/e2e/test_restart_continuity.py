"""Restart continuity: knapd restarted 5 times and upgraded once under steady load, 0 failed requests.

The test process plays the service manager: it holds the router's listening
socket and hands it to each knapd through systemd's socket-activation
protocol (LISTEN_PID / LISTEN_FDS / LISTEN_FDNAMES=router:api, fds 3 and
4; the API socket too, so kubectl's address never changes), and listens on
a NOTIFY_SOCKET: each knapd counts as started when its READY=1 (with its
MAINPID) arrives, as systemd's Type=notify does. While one knapd drains
(SIGTERM) and the next starts, new connections wait in the socket's
backlog; the new knapd holds requests until its routes are loaded and the
pod it adopted is reported. The pod is adopted, never restarted: its
container id is the same before and after.

The upgrade: after the 5 restarts, knapd is replaced by the knapd of a
Debian package built from this build by tools/package.sh (version
UPGRADE_VERSION, extracted with dpkg-deb -x; a stripped binary at another
path that finds its knap-logdrain under the extracted usr/libexec), as
`apt install ./knap_<new>.deb` does: stop the old knapd, start the new one
on the same sockets and data dir. Without what tools/package.sh needs
(dpkg-buildpackage, dh, lintian: tools/setup.sh --test) the test says so
loudly and upgrades to a copy of the build's knapd at another path instead.

Load: 4 client threads, a new connection per request; each knapd (the
first, the 5 restarted, the upgraded one) serves at least MIN_REQUESTS / 7
of them before the next restart, so at least MIN_REQUESTS in all.

Needs root and a running containerd (the real-pod setup of test_serving.py).
"""
import fcntl
import filecmp
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import BUILD, KNAPD, ROOT, Knapd
from test_serving import import_testapp, IMAGE, MKIMAGE, TESTAPP, apply, containerd_ok, service

pytestmark = pytest.mark.skipif(
    not containerd_ok() or not os.path.exists(TESTAPP) or not os.path.exists(MKIMAGE),
    reason="!!! real-pod end-to-end tests SKIPPED: need root, a running containerd and the built test app !!!")

HOST = "steady.default.localhost"
RESTARTS = 5
CLIENTS = 4
MIN_REQUESTS = 5000
PER_KNAPD = MIN_REQUESTS // (RESTARTS + 2)  # requests served by each knapd (the first, 5 restarted, the upgraded)
UPGRADE_VERSION = "99.0+continuity1"


def listener():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(4096)
    return s


class SocketKnapd(Knapd):
    """A knapd that serves the router and API sockets this test holds (socket activation) and reports
    READY=1 on this test's NOTIFY_SOCKET (Type=notify)."""

    def __init__(self, workdir, router_sock, api_sock, **kw):
        super().__init__(workdir, **kw)
        self.socks = (router_sock, api_sock)
        self.router_port = router_sock.getsockname()[1]
        self.api_port = api_sock.getsockname()[1]  # (self.url follows)
        self.binary = KNAPD
        self.notify_path = os.path.join(workdir, "notify.sock")
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.bind(self.notify_path)
        self.ready_messages = []  # the READY=1 datagram of every start

    def wait_ready_notification(self, timeout):
        """The READY=1 datagram of the knapd just started (its MAINPID must be ours), or an error with the log."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"knapd exited with {self.proc.returncode}:\n{self.log()}")
            self.notify.settimeout(0.2)
            try:
                msg = self.notify.recv(4096).decode()
            except socket.timeout:
                continue
            lines = msg.split("\n")
            if "READY=1" in lines:
                assert f"MAINPID={self.proc.pid}" in lines, f"READY=1 from another process: {msg!r}"
                self.ready_messages.append(msg)
                return msg
        raise RuntimeError("no READY=1 on NOTIFY_SOCKET:\n" + self.log())

    def start(self, timeout=60):
        # Notifications of the previous knapd (STOPPING=1, ...) are not this one's.
        self.notify.setblocking(False)
        try:
            while True:
                self.notify.recv(4096)
        except BlockingIOError:
            pass
        log = open(self.log_path, "a")
        # Copies at fds >= 20, so that moving them to 3 and 4 overwrites nothing.
        hi = [fcntl.fcntl(s.fileno(), fcntl.F_DUPFD_CLOEXEC, 20) for s in self.socks]
        # A tiny exec wrapper moves the sockets to fds 3 and 4 and execs
        # knapd, so LISTEN_PID (the wrapper's pid) is knapd's pid.
        wrapper = ("import os, sys\n"
                   f"os.dup2({hi[0]}, 3); os.dup2({hi[1]}, 4); os.close({hi[0]}); os.close({hi[1]})\n"
                   "os.environ.update(LISTEN_PID=str(os.getpid()), LISTEN_FDS='2', LISTEN_FDNAMES='router:api')\n"
                   "os.execv(sys.argv[1], sys.argv[1:])\n")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", wrapper, self.binary, "--config", self.config_path, "--runtime", self.runtime],
                stdout=log, stderr=subprocess.STDOUT, pass_fds=hi, env=dict(os.environ, NOTIFY_SOCKET=self.notify_path))
        finally:
            for fd in hi:
                os.close(fd)
        # Type=notify: started means READY=1 arrived; then the API answers at once.
        self.wait_ready_notification(timeout)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"knapd exited with {self.proc.returncode}:\n{self.log()}")
            code = None
            try:
                code, _, _ = self.http("GET", "/readyz", timeout=1)
            except OSError:
                pass
            if code == 200:
                return self
            time.sleep(0.05)
        raise RuntimeError("knapd did not become ready:\n" + self.log())


@pytest.fixture
def steady(workdir):
    tag = os.getpid() % 150 + 60
    ns = f"knap-e2e-{tag}"
    router_sock, api_sock = listener(), listener()
    k = SocketKnapd(workdir, router_sock, api_sock, runtime="containerd", extra_config=(
        f"  containerd-namespace: {ns}\n"
        f"  bridge-name: knape2e{tag}\n"
        f"  pod-subnet: 10.217.{tag}.0/24\n"
        "  metrics-listen: \"\"\n"
        "  warm-pool-size: 0\n"))
    k.ns = ns
    import_testapp(workdir, ns)
    k.start(timeout=60)
    yield k
    if not k.alive():
        k.start(timeout=60)
    k.http("DELETE", "/apis/serving.knative.dev/v1/namespaces/default/services/steady")
    time.sleep(3)  # let the runner stop and destroy the pod
    k.stop()
    router_sock.close()
    api_sock.close()
    k.notify.close()
    subprocess.run(["ctr", "-n", ns, "images", "rm", IMAGE], capture_output=True)


def upgraded_knapd(workdir):
    """The knapd to upgrade to, and what it is (see the module docstring)."""
    out = os.path.join(workdir, "deb")
    if all(shutil.which(tool) for tool in ("dpkg-buildpackage", "dh", "lintian")):  # what tools/package.sh needs
        t0 = time.time()
        p = subprocess.run([os.path.join(ROOT, "tools", "package.sh"), "--build-dir", BUILD, "--version",
                            UPGRADE_VERSION, "--out", out, "--no-lintian"],
                           capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, f"tools/package.sh failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        deb = p.stdout.strip().splitlines()[-1]
        version = subprocess.run(["dpkg-deb", "-f", deb, "Version"], capture_output=True, text=True,
                                 check=True).stdout.strip()
        assert version == UPGRADE_VERSION, version
        root = os.path.join(workdir, "upgrade-root")
        subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
        binary = os.path.join(root, "usr", "bin", "knapd")
        assert not filecmp.cmp(binary, KNAPD, shallow=False), "the packaged knapd is the build's file"
        assert os.path.exists(os.path.join(root, "usr", "libexec", "knap", "knap-logdrain"))
        return binary, f"knapd of {os.path.basename(deb)} (built in {time.time() - t0:.0f} s, dpkg-deb -x)"
    print("\n" + "#" * 78 + "\n!!! dpkg-buildpackage, dh or lintian is missing (tools/setup.sh --test): "
          "the upgrade runs a COPY of the build's knapd at another path, not a packaged one !!!\n" + "#" * 78)
    binary = os.path.join(workdir, "upgrade", "knapd")
    os.makedirs(os.path.dirname(binary))
    shutil.copy2(KNAPD, binary)
    return binary, "a copy of the build's knapd"


def containers(k):
    out = subprocess.run(["ctr", "-n", k.ns, "containers", "ls", "-q"], capture_output=True, text=True).stdout
    return sorted(c for c in out.split() if c.startswith("steady-"))


def one_request(port, i, host=HOST):
    """One GET on a new connection; None when it succeeded, else what went wrong."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(f"GET /whoami HTTP/1.1\r\nHost: {host}\r\nX-Request-Id: r{i}\r\n"
                      "Connection: close\r\n\r\n".encode())
            data = b""
            while True:
                d = s.recv(65536)
                if not d:
                    break
                data += d
    except OSError as e:
        return f"request {i}: {type(e).__name__}: {e}"
    head, _, body = data.partition(b"\r\n\r\n")
    status = head.split(b"\r\n", 1)[0]
    if not status.startswith(b"HTTP/1.1 200 "):
        return f"request {i}: {status!r} {body[:200]!r}"
    if f'"r{i}"'.encode() not in body:
        return f"request {i}: answered for another request: {body[:200]!r}"
    return None



class SteadyLoad:
    """`clients` threads sending one_request()s (a new connection each, 5 ms apart) while the `with` block runs;
    `done` counts the answers, `failures` lists what went wrong. A context manager."""

    def __init__(self, port, clients, host=HOST):
        self.done = 0
        self.failures = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._client, args=(port, n, host), daemon=True)
                         for n in range(clients)]

    def _client(self, port, n, host):
        i = 0
        while not self._stop.is_set():
            i += 1
            err = one_request(port, f"{n}-{i}", host=host)
            with self._lock:
                self.done += 1
                if err:
                    self.failures.append(err)
            time.sleep(0.005)

    def __enter__(self):
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        for t in self._threads:
            t.join(timeout=120)


def test_five_restarts_and_an_upgrade_under_load_fail_no_request_and_keep_the_pod(steady, workdir):
    k = steady
    # The package first: building it while the load runs would only slow the load down.
    upgrade_binary, upgrade_what = upgraded_knapd(workdir)
    apply(k, service("steady", annotations={"autoscaling.knative.dev/min-scale": "1"}))
    assert one_request(k.router_port, 0) is None
    k.wait_for(lambda: len(containers(k)) == 1, timeout=30, what="one pod")
    pods_before = containers(k)

    def restart(what, binary, load):
        before = load.done
        k.stop()  # SIGTERM: drain, then exit
        assert k.proc.returncode == 0, f"knapd exit code {k.proc.returncode} at {what}:\n{k.log()}"
        k.binary = binary
        k.start(timeout=60)  # READY=1 on the NOTIFY_SOCKET, then /readyz
        # Traffic flows through the new knapd before the next restart: an equal share of the load per knapd.
        k.wait_for(lambda: load.done >= before + PER_KNAPD, timeout=300, what=f"{PER_KNAPD} requests after {what}")

    t0 = time.time()
    with SteadyLoad(k.router_port, CLIENTS) as load:
        k.wait_for(lambda: load.done >= PER_KNAPD, timeout=300, what=f"{PER_KNAPD} requests before the first restart")
        for r in range(RESTARTS):
            restart(f"restart {r}", KNAPD, load)
        restart("the upgrade", upgrade_binary, load)
        # At least MIN_REQUESTS in all (the load goes on through the upgraded knapd).
        k.wait_for(lambda: load.done >= MIN_REQUESTS, timeout=600, what=f"{MIN_REQUESTS} requests")
    failures = load.failures
    total = load.done
    print(f"\nrestart continuity: {total} requests in {time.time() - t0:.0f} s across {RESTARTS} knapd restarts "
          f"and 1 upgrade (to {upgrade_what}), {len(failures)} failed; "
          f"{len(k.ready_messages)} READY=1 notifications")
    assert failures == [], f"{len(failures)} of {total} requests failed: {failures[:10]}\n{k.log()}"
    assert total >= MIN_REQUESTS, total
    assert len(k.ready_messages) == 1 + RESTARTS + 1, k.ready_messages
    assert containers(k) == pods_before, "the pod was replaced, not adopted"
    assert k.proc.args[3] == upgrade_binary, k.proc.args  # the upgraded knapd serves now
    code, body, _ = k.http("GET", "/apis/serving.knative.dev/v1/namespaces/default/revisions/steady-00001")
    assert code == 200 and json.loads(body)["status"].get("actualReplicas") == 1, body
