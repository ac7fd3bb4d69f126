"""Restart continuity: knapd restarted 5 times under steady load, 0 failed requests.

The test process plays the service manager: it holds the router's listening
socket and hands it to each knapd through systemd's socket-activation
protocol (LISTEN_PID / LISTEN_FDS / LISTEN_FDNAMES=router:api, fds 3 and
4; the API socket too, so kubectl's address never changes). While one
knapd drains (SIGTERM) and the next starts, new connections wait in the
socket's backlog; the new knapd holds requests until its routes are loaded
and the pod it adopted is reported. The pod is adopted, never restarted: its
container id is the same before and after.

Needs root and a running containerd (the real-pod setup of test_serving.py).
"""
import fcntl
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from conftest import KNAP, KNAPD, Knapd
from test_serving import import_testapp, IMAGE, MKIMAGE, TESTAPP, apply, containerd_ok, service

pytestmark = pytest.mark.skipif(
    not containerd_ok() or not os.path.exists(TESTAPP) or not os.path.exists(MKIMAGE),
    reason="!!! real-pod end-to-end tests SKIPPED: need root, a running containerd and the built test app !!!")

HOST = "steady.default.localhost"
RESTARTS = 5
CLIENTS = 4


def listener():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    s.listen(4096)
    return s


class SocketKnapd(Knapd):
    """A knapd that serves the router and API sockets this test holds (socket activation)."""

    def __init__(self, workdir, router_sock, api_sock, **kw):
        super().__init__(workdir, **kw)
        self.socks = (router_sock, api_sock)
        self.router_port = router_sock.getsockname()[1]
        self.api_port = api_sock.getsockname()[1]  # (self.url follows)

    def start(self, timeout=60):
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
                [sys.executable, "-c", wrapper, KNAPD, "--config", self.config_path, "--runtime", self.runtime],
                stdout=log, stderr=subprocess.STDOUT, pass_fds=hi)
        finally:
            for fd in hi:
                os.close(fd)
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
    subprocess.run(["ctr", "-n", ns, "images", "rm", IMAGE], capture_output=True)


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


def test_five_restarts_under_load_fail_no_request_and_keep_the_pod(steady):
    k = steady
    apply(k, service("steady", annotations={"autoscaling.knative.dev/min-scale": "1"}))
    assert one_request(k.router_port, 0) is None
    k.wait_for(lambda: len(containers(k)) == 1, timeout=30, what="one pod")
    pods_before = containers(k)

    stop = threading.Event()
    lock = threading.Lock()
    done = [0]
    failures = []

    def client(n):
        i = 0
        while not stop.is_set():
            i += 1
            err = one_request(k.router_port, f"{n}-{i}")
            with lock:
                done[0] += 1
                if err:
                    failures.append(err)
            time.sleep(0.005)

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(CLIENTS)]
    for t in threads:
        t.start()
    try:
        time.sleep(2)
        for r in range(RESTARTS):
            before = done[0]
            k.stop()  # SIGTERM: drain, then exit
            assert k.proc.returncode == 0, f"knapd exit code {k.proc.returncode} at restart {r}:\n{k.log()}"
            k.start(timeout=60)
            # Traffic flows through the new knapd before the next restart.
            k.wait_for(lambda: done[0] >= before + 20, timeout=60, what=f"requests after restart {r}")
            time.sleep(1)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    total = done[0]
    print(f"\nrestart continuity: {total} requests across {RESTARTS} knapd restarts, "
          f"{len(failures)} failed")
    assert failures == [], f"{len(failures)} of {total} requests failed: {failures[:10]}\n{k.log()}"
    assert total >= 100, total
    assert containers(k) == pods_before, "the pod was replaced, not adopted"
    code, body, _ = k.http("GET", "/apis/serving.knative.dev/v1/namespaces/default/revisions/steady-00001")
    assert code == 200 and json.loads(body)["status"].get("actualReplicas") == 1, body
