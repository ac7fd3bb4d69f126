"""containerd and knapd's pods in it, as the e2e tests and the benchmarks see them: whether
containerd answers, and whether a pod is frozen. bench/ imports this folder via sys.path."""

import os
import shutil
import subprocess


def containerd_running():
    """True when `ctr version` answers (containerd is up and this process may use its socket)."""
    if not shutil.which("ctr"):
        return False
    try:
        return subprocess.run(["ctr", "version"], capture_output=True, timeout=30).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def containerd_ok():
    """Whether the tests that run real pods can: root, and containerd answering."""
    return os.geteuid() == 0 and containerd_running()


def require_containerd():
    """Exits with one line saying what to do when containerd does not answer; the benchmarks
    that run pods call this before anything else (rather than fail later in a ctr call)."""
    if containerd_running():
        return
    hint = "" if os.geteuid() == 0 else " (and run this as root)"
    raise SystemExit("containerd is not running (`ctr version` failed): run tools/setup.sh --test, "
                     f"which starts it{hint}")


def frozen(pod_id):
    """True when the pod's cgroup freezer (v1 freezer.state, v2 cgroup.freeze) says frozen: knapd
    freezes a warm pod there itself, so containerd still shows its task RUNNING."""
    for path, want in ((f"/sys/fs/cgroup/freezer/knap/{pod_id}/freezer.state", ("FROZEN", "FREEZING")),
                       (f"/sys/fs/cgroup/knap/{pod_id}/cgroup.freeze", ("1",))):
        try:
            with open(path) as f:
                return f.read().strip() in want
        except OSError:
            continue
    return False
