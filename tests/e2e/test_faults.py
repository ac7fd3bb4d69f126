"""Faults an operator meets on a bad day, with real pods (containerd, runc, CNI).

The data dir (store, pod directories and their logs, CNI state) is a disk this
test mounts and owns; nothing outside it is touched. "Disk full": a small
tmpfs and a filler file. "Read-only disk": a FUSE passthrough (rofs.py) whose
writes fail with EROFS, open files included, until a switch file goes away:
Linux refuses to remount a file system read-only while files are open for
writing on it (EBUSY), and ext4's own emergency read-only is only cleared by an
unmount, so a real disk cannot go read-only and back under a running knapd
(rofs.py says more). Each test uses its own containerd namespace, bridge and
subnet (the serving fixture's scheme).
"""
import concurrent.futures
import errno
import importlib.util
import json
import os
import subprocess
import threading
import time

import pytest

from conftest import KNAP, KNAPD, Knapd
from test_serving import import_testapp, IMAGE, MKIMAGE, TESTAPP, containerd_ok, get

pytestmark = pytest.mark.skipif(
    not containerd_ok() or not os.path.exists(TESTAPP) or not os.path.exists(MKIMAGE),
    reason="!!! fault end-to-end tests SKIPPED: need root, a running containerd and the built test app !!!")

SERVICES = "/apis/serving.knative.dev/v1/namespaces/default/services"


def mount_tmpfs(path, size):
    os.makedirs(path, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", path], check=True)


def umount(path):
    subprocess.run(["umount", "-l", path], capture_output=True)


ROFS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rofs.py")


class ReadOnlySwitch:
    """`path` as a disk that turns read-only (EROFS, open files included) and back: rofs.py over `backing`."""

    def __init__(self, backing, path):
        self.path, self.switch = path, path + ".read-only"
        os.makedirs(backing, exist_ok=True)
        os.makedirs(path, exist_ok=True)
        self.log = open(path + ".rofs.log", "a")
        self.proc = subprocess.Popen(["/usr/bin/python3", ROFS, backing, path, self.switch], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while not self.mounted():
            if self.proc.poll() is not None or time.time() > deadline:
                self.close()
                raise RuntimeError("rofs did not mount: " + open(self.log.name).read()[-2000:])
            time.sleep(0.05)

    def mounted(self):
        with open("/proc/mounts") as f:
            return any(line.split()[1] == self.path for line in f)

    def read_only(self, on):
        if on:
            open(self.switch, "w").close()
        elif os.path.exists(self.switch):
            os.unlink(self.switch)

    def close(self):
        self.read_only(False)
        # Pod mounts (each pod's /tmp) may still sit on it when knapd failed: lazily, innermost first.
        with open("/proc/mounts") as f:
            inner = [line.split()[1] for line in f if line.split()[1].startswith(self.path + "/")]
        for m in sorted(inner, reverse=True):
            umount(m)
        umount(self.path)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def fill(path):
    """Fills the file system of `path` with a filler file; returns its path."""
    filler = os.path.join(path, "filler")
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1M"], capture_output=True)
    # dd stops at ENOSPC; leave not even the last partial block
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}.2", "bs=4k"], capture_output=True)
    return filler


def free(filler):
    for f in (filler, filler + ".2"):
        try:
            os.unlink(f)
        except FileNotFoundError:
            pass


def service_doc(name):
    # One pod each: a scale-up while the disk is full is not what is tested here.
    scale = {"autoscaling.knative.dev/min-scale": "1", "autoscaling.knative.dev/max-scale": "1"}
    return json.dumps({
        "apiVersion": "serving.knative.dev/v1", "kind": "Service", "metadata": {"name": name},
        "spec": {"template": {"metadata": {"annotations": scale},
                              "spec": {"containers": [{"image": IMAGE}]}}}})


def ready(k, name):
    code, body, _ = k.http("GET", f"{SERVICES}/{name}")
    if code != 200:
        return False
    for c in json.loads(body).get("status", {}).get("conditions", []):
        if c["type"] == "Ready":
            return c["status"] == "True"
    return False


def chatty_requests(k, host, n, pad=2000, timeout=10):
    """n requests whose request line (logged by the test app) is ~pad bytes; returns the status codes."""
    def one(i):
        try:
            return get(k, host, f"/?i={i}&pad={'x' * pad}", timeout=timeout)[0]
        except Exception as e:  # a hang shows up as a timeout
            return repr(e)
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        return list(ex.map(one, range(n)))


@pytest.fixture
def faulty(workdir, request):
    """knapd with real pods on a disk that fills (request.param "full") or turns read-only ("read-only")."""
    fault = request.param
    tag = (os.getpid() + 37) % 150 + 60
    ns = f"knap-fault-{tag}"
    data = os.path.join(workdir, "data")
    ro = None
    if fault == "full":
        mount_tmpfs(data, "64m")
    else:
        if importlib.util.find_spec("fusepy") is None or not os.path.exists("/dev/fuse"):
            umount(data)
            pytest.fail("the read-only disk needs FUSE and python3-fusepy (tools/packages/base.test)")
        ro = ReadOnlySwitch(os.path.join(workdir, "backing"), data)
    # The API socket off the faulty disk: a unix socket is no file the test means to break.
    k = Knapd(workdir, runtime="containerd", extra_config=(
        f"  containerd-namespace: {ns}\n"
        f"  bridge-name: knapf{tag}\n"
        f"  pod-subnet: 10.218.{tag}.0/24\n"
        f"  api-socket: {workdir}/knapd.sock\n"
        f"  metrics-listen: 127.0.0.1:0\n"))
    k.fault, k.read_only = fault, (ro.read_only if ro else None)
    try:
        import_testapp(workdir, ns)
        k.start(timeout=60)
    except BaseException:
        k.stop()
        ro.close() if ro else umount(data)
        raise
    yield k
    if ro:
        ro.read_only(False)
    free(os.path.join(data, "filler"))
    if k.alive():
        for svc in json.loads(k.http("GET", SERVICES)[1])["items"]:
            k.http("DELETE", f"{SERVICES}/{svc['metadata']['name']}")
        k.wait_for(lambda: not os.listdir(os.path.join(data, "pods")) if os.path.isdir(os.path.join(data, "pods"))
                   else True, timeout=30, what="pods destroyed")
    k.stop()
    subprocess.run(["ctr", "-n", ns, "images", "rm", IMAGE], capture_output=True)
    subprocess.run(["ip", "link", "del", f"knapf{tag}"], capture_output=True)
    ro.close() if ro else umount(data)


def create_acknowledged(k, names, refused=None):
    """Creates Services; returns the names the API acknowledged (201). Refusals go to `refused` (code, message):
    a failing disk must be an error response, never a hang."""
    acked = []
    for n in names:
        code, body, _ = k.http("POST", SERVICES, service_doc(n), timeout=30)
        if code == 201:
            acked.append(n)
        elif refused is not None:
            try:
                refused.append((code, json.loads(body).get("message", "")))
            except ValueError:
                refused.append((code, body[:200]))
    return acked


def knap_logs(k, name):
    out = subprocess.run([KNAP, "logs", name, "--data-dir", k.data_dir], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("faulty", ["full", "read-only"], indirect=True)
def test_pods_keep_serving_and_logging_on_a_full_or_read_only_disk(faulty):
    k = faulty
    data = k.data_dir
    assert k.http("POST", SERVICES, service_doc("chatty"))[0] == 201
    k.wait_for(lambda: ready(k, "chatty"), timeout=60, what="chatty Ready")
    host = "chatty.default.localhost"
    assert chatty_requests(k, host, 20) == [200] * 20

    # Services acknowledged around the fault: while the disk fills (some reconciles then fail), or the one
    # just before the disk turns read-only, and the four after it, which are refused.
    acked, refused = [], []
    if k.fault == "full":
        t = threading.Thread(target=lambda: acked.extend(create_acknowledged(k, [f"late-{i}" for i in range(5)],
                                                                             refused)))
        t.start()
        filler = fill(data)
        t.join()
    else:
        acked += create_acknowledged(k, ["late-0"])
        k.read_only(True)
        with pytest.raises(OSError) as e:  # the disk really is read-only
            open(os.path.join(data, "probe"), "w").close()
        assert e.value.errno == errno.EROFS
        acked += create_acknowledged(k, [f"late-{i}" for i in range(1, 5)], refused)
        assert len(refused) == 4, refused
        # Refused with an error that says why, not a hang and not a bare "disk I/O error".
        for code, message in refused:
            assert code >= 500 and "read-only" in message.lower(), (code, message)
    print(f"fault={k.fault}: {len(acked)} of 5 creates acknowledged around the fault, refused: {refused[:1]}")
    assert all(code >= 500 for code, _ in refused), refused

    # ~2 MB of request lines, far beyond a pipe's 64 KiB: the app must not block on its stdout.
    t0 = time.time()
    codes = chatty_requests(k, host, 1000)
    assert codes == [200] * 1000, [c for c in codes if c != 200][:5]
    assert time.time() - t0 < 60
    # Still answering a while later (a hang after the pipe fills would show here).
    assert chatty_requests(k, host, 20) == [200] * 20
    # What was logged before still reads.
    assert "GET /?i=2&pad=" in knap_logs(k, "chatty")
    if k.fault == "read-only":
        # A knapd started now refuses, naming the data dir and why (the running one keeps serving).
        out = subprocess.run([KNAPD, "--config", k.config_path, "--runtime", "none"], capture_output=True,
                             text=True, timeout=30)
        assert out.returncode != 0
        assert f"the data dir {data} is not writable (Read-only file system)" in out.stderr, out.stderr

    # Space comes back: every acknowledged Service is reconciled within 10 s.
    if k.fault == "full":
        free(filler)
    else:
        k.read_only(False)
    back = time.time()
    # More Services once the disk works again.
    acked += create_acknowledged(k, ["after-0"])
    for n in acked:
        k.wait_for(lambda: ready(k, n), timeout=max(1, 10 - (time.time() - back)) + 0.5,
                   what=f"{n} Ready within 10 s of the disk working again")
    took = time.time() - back
    print(f"fault={k.fault}: {len(acked)} acknowledged Services Ready {took:.1f}s after the disk worked again "
          f"(load {os.getloadavg()[0]:.1f})")

    # The log says what was dropped, and `knap logs` still works.
    assert chatty_requests(k, host, 3) == [200] * 3
    out = knap_logs(k, "chatty")
    assert "knap-logdrain: dropped" in out, out[-2000:]
    assert "GET /?i=2&pad=" in out
    if k.fault == "read-only":
        assert "Read-only file system" in out, out[-2000:]


@pytest.fixture
def own_containerd(workdir):
    """A containerd instance of this test's own (own socket, root and state); never the machine's shared one."""
    d = os.path.join(workdir, "ctrd")
    os.makedirs(d)
    sock = os.path.join(d, "containerd.sock")
    cfg = os.path.join(d, "config.toml")
    with open(cfg, "w") as f:
        f.write(f'version = 2\nroot = "{d}/root"\nstate = "{d}/state"\n'
                f'disabled_plugins = ["io.containerd.grpc.v1.cri"]\n'
                f'[grpc]\n  address = "{sock}"\n[ttrpc]\n  address = "{sock}.ttrpc"\n'
                f'[debug]\n  address = "{d}/debug.sock"\n')

    class Ctrd:
        def __init__(self):
            self.sock, self.proc = sock, None

        def start(self):
            self.proc = subprocess.Popen(["containerd", "--config", cfg], stdout=open(f"{d}/log", "a"),
                                         stderr=subprocess.STDOUT)
            deadline = time.time() + 20
            while time.time() < deadline:
                if subprocess.run(["ctr", "--address", sock, "version"], capture_output=True).returncode == 0:
                    return
                time.sleep(0.05)
            raise RuntimeError("own containerd did not start: " + open(f"{d}/log").read()[-2000:])

        def kill(self):
            self.proc.kill()
            self.proc.wait()

    c = Ctrd()
    c.start()
    yield c
    if c.proc.poll() is not None:
        c.start()
    # Our tasks only: they run under shims of this instance.
    out = subprocess.run(["ctr", "--address", sock, "namespaces", "ls", "-q"], capture_output=True, text=True)
    for ns in out.stdout.split():
        tasks = subprocess.run(["ctr", "--address", sock, "-n", ns, "tasks", "ls", "-q"], capture_output=True,
                               text=True).stdout.split()
        for t in tasks:
            subprocess.run(["ctr", "--address", sock, "-n", ns, "tasks", "kill", "-s", "SIGKILL", t],
                           capture_output=True)
            time.sleep(0.2)
            subprocess.run(["ctr", "--address", sock, "-n", ns, "tasks", "rm", "-f", t], capture_output=True)
    c.kill()
    subprocess.run(f"grep -o ' {d}[^ ]*' /proc/mounts | sort -r | xargs -r -n1 umount -l", shell=True)


def test_containerd_killed_and_restarted_under_load(workdir, own_containerd):
    tag = (os.getpid() + 71) % 150 + 60
    ns = f"knap-ctrd-{tag}"
    k = Knapd(workdir, runtime="containerd", extra_config=(
        f"  containerd-socket: {own_containerd.sock}\n"
        f"  containerd-namespace: {ns}\n"
        f"  bridge-name: knapc{tag}\n"
        f"  pod-subnet: 10.219.{tag}.0/24\n"))
    tar = os.path.join(workdir, "app.tar")
    subprocess.run([MKIMAGE, "--out", tar, "--name", IMAGE, "--file", f"{TESTAPP}:/app/knap-testapp",
                    "--entrypoint", "/app/knap-testapp", "--user", "app", "--workdir", "/app", "--expose", "8080"],
                   check=True, capture_output=True)
    subprocess.run([KNAP, "image", "import", tar, "--namespace", ns, "--containerd-socket", own_containerd.sock],
                   check=True, capture_output=True)
    k.start(timeout=60)
    try:
        assert k.http("POST", SERVICES, service_doc("steady"))[0] == 201
        k.wait_for(lambda: ready(k, "steady"), timeout=60, what="steady Ready")
        host = "steady.default.localhost"
        pid_before = json.loads(get(k, host, "/")[1])["pid"]

        # Load through the router while containerd is killed and started again.
        stop = threading.Event()
        results = []

        def load():
            while not stop.is_set():
                t = time.time()
                try:
                    code = get(k, host, "/", timeout=5)[0]
                except Exception as e:
                    code = repr(e)
                results.append((t, code))
        threads = [threading.Thread(target=load) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(1)
        killed = time.time()
        own_containerd.kill()
        time.sleep(2)
        own_containerd.start()
        restarted = time.time()
        # New work needs containerd: a new Service must come up.
        assert k.http("POST", SERVICES, service_doc("after"))[0] == 201
        k.wait_for(lambda: ready(k, "after"), timeout=30, what="a new Service after containerd restarted")
        new_ready = time.time() - restarted
        time.sleep(1)
        stop.set()
        for t in threads:
            t.join()
        bad = [(round(t - killed, 2), c) for t, c in results if c != 200]
        print(f"containerd down {restarted - killed:.1f}s: {len(results)} requests under load, {len(bad)} failed; "
              f"new Service Ready {new_ready:.1f}s after containerd came back")
        assert not bad, bad[:10]
        assert new_ready <= 5, new_ready
        # Nothing lost: the same pod (same process) still serves, both Services Ready, no pod recreated.
        assert json.loads(get(k, host, "/")[1])["pid"] == pid_before
        assert ready(k, "steady") and ready(k, "after")
        assert "exited with -1" not in open(k.log_path).read()
    finally:
        for svc in json.loads(k.http("GET", SERVICES)[1])["items"]:
            k.http("DELETE", f"{SERVICES}/{svc['metadata']['name']}")
        time.sleep(3)
        k.stop()
        subprocess.run(["ip", "link", "del", f"knapc{tag}"], capture_output=True)

