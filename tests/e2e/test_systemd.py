"""knapd speaks systemd's protocols without systemd: a NOTIFY_SOCKET listener
(an abstract unix datagram socket, as systemd uses) receives STATUS lines, then
READY=1 only once the API serves, WATCHDOG=1 at half of WATCHDOG_USEC, and
STOPPING=1 on SIGTERM; with JOURNAL_STREAM naming its stderr, knapd's log lines
carry their syslog level (<6> info). The booted-systemd version of these checks
is the package test (tests/package/run.sh)."""
import os
import signal
import socket
import subprocess
import time

from conftest import KNAPD, Knapd


def _receive_all(sock, until, timeout):
    """Datagrams until one satisfies `until` (returned last) or `timeout` s pass."""
    got = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        sock.settimeout(max(0.05, deadline - time.time()))
        try:
            msg = sock.recv(4096).decode()
        except socket.timeout:
            break
        got.append(msg)
        if until(msg):
            return got
    raise AssertionError(f"no matching notification within {timeout}s; got {got}")


def test_notify_ready_watchdog_stopping_and_journal_levels(workdir):
    k = Knapd(workdir)
    name = f"@knap-e2e-notify-{os.getpid()}-{k.api_port}"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind("\0" + name[1:])
    stderr_path = os.path.join(workdir, "stderr.log")
    with open(stderr_path, "w") as err:
        st = os.fstat(err.fileno())
        env = dict(os.environ, NOTIFY_SOCKET=name, WATCHDOG_USEC="1000000",
                   JOURNAL_STREAM=f"{st.st_dev}:{st.st_ino}")
        proc = subprocess.Popen([KNAPD, "--config", k.config_path, "--runtime", "none"],
                                stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        got = _receive_all(listener, lambda m: m.startswith("READY=1"), timeout=60)
        statuses = [m for m in got if m.startswith("STATUS=")]
        assert any("opening the store" in m for m in statuses), got
        ready = got[-1].split("\n")
        assert ready[0] == "READY=1", got
        assert f"MAINPID={proc.pid}" in ready, ready
        assert any(line.startswith("STATUS=serving: api https://127.0.0.1:") for line in ready), ready
        # READY=1 is sent only once the API serves: it answers right away (over TLS, as the admin).
        code, _, _ = k.http("GET", "/readyz", timeout=5)
        assert code == 200

        # WATCHDOG_USEC=1s: pings every 0.5 s; two within a generous 20 s.
        pings = 0
        deadline = time.time() + 20
        while pings < 2 and time.time() < deadline:
            listener.settimeout(max(0.05, deadline - time.time()))
            try:
                if listener.recv(4096).decode() == "WATCHDOG=1":
                    pings += 1
            except socket.timeout:
                break
        assert pings >= 2, "knapd did not send WATCHDOG=1 twice within 20 s"

        proc.send_signal(signal.SIGTERM)
        got = _receive_all(listener, lambda m: m.startswith("STOPPING=1"), timeout=30)
        assert "received Terminated" in got[-1], got
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        listener.close()

    lines = open(stderr_path).read().splitlines()
    ready_lines = [line for line in lines if "knapd ready" in line]
    assert ready_lines and ready_lines[0].startswith("<6>I "), lines[-10:]
    assert all(line.startswith("<") for line in lines if line[:1] in "IWE<"), lines[-10:]


def test_no_notify_socket_no_prefix(workdir):
    """Outside systemd nothing changes: plain log lines, no notifications needed."""
    k = Knapd(workdir)
    env = {key: v for key, v in os.environ.items() if key not in ("NOTIFY_SOCKET", "JOURNAL_STREAM")}
    stderr_path = os.path.join(workdir, "stderr.log")
    with open(stderr_path, "w") as err:
        proc = subprocess.Popen([KNAPD, "--config", k.config_path, "--runtime", "none"],
                                stdout=subprocess.DEVNULL, stderr=err, env=env)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and "knapd ready" not in open(stderr_path).read():
            assert proc.poll() is None, open(stderr_path).read()
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    ready = [line for line in open(stderr_path).read().splitlines() if "knapd ready" in line]
    assert ready and ready[0].startswith("I "), ready
