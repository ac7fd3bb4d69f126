"""Headless Chromium driven over the DevTools protocol on a pipe
(--remote-debugging-pipe: fd 3 in, fd 4 out, NUL-terminated JSON), so no
WebSocket library or npm package is needed. Chromium is kept off the
internet: every host name but loopback fails to resolve, and every request
that is not to loopback goes to a proxy address where nothing listens, with
Chromium's background services (updates, sync, safe browsing, metrics)
disabled. Used by tests/e2e/test_console.py."""
import base64
import json
import os
import queue
import shutil
import subprocess
import threading
import time

BINARY = next((p for p in ("/usr/lib/chromium/chromium", shutil.which("chromium") or "") if p and os.path.exists(p)),
              None)

OFFLINE_FLAGS = [
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE *.localhost, EXCLUDE 127.0.0.1, EXCLUDE [::1]",
    "--proxy-server=http://127.0.0.1:9",  # discard port; loopback is never proxied
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-default-apps", "--disable-domain-reliability", "--disable-client-side-phishing-detection",
    "--disable-breakpad", "--no-pings", "--no-first-run", "--no-default-browser-check", "--metrics-recording-only",
    "--disable-features=BackForwardCache,Translate,OptimizationHints,MediaRouter,AutofillServerCommunication,CertificateTransparencyComponentUpdater",
]


class CdpError(Exception):
    pass


class Chromium:
    def __init__(self, workdir, width=1280, height=900, log=None):
        if not BINARY:
            raise RuntimeError("chromium is not installed (Debian package chromium, tools/packages/base.test)")
        self.profile = os.path.join(workdir, "chromium-profile")
        os.makedirs(self.profile, exist_ok=True)
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()

        def fds():
            os.dup2(to_chrome_r, 3)
            os.dup2(from_chrome_w, 4)

        args = [BINARY, "--headless=new", "--remote-debugging-pipe", f"--user-data-dir={self.profile}",
                "--disable-gpu", "--disable-dev-shm-usage", "--ignore-certificate-errors",
                f"--window-size={width},{height}", *OFFLINE_FLAGS]
        if os.geteuid() == 0:
            args.append("--no-sandbox")
        args.append("about:blank")
        self.log_path = log or os.path.join(workdir, "chromium.log")
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log,
                                     preexec_fn=fds, pass_fds=(3, 4))
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._next = 0
        self._lock = threading.Lock()
        self._replies = {}
        self._cond = threading.Condition()
        self.events = queue.Queue()
        self.console = []  # console messages and exceptions of the page
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        self.page("Page.enable")
        self.page("Runtime.enable")
        self.viewport(width, height)

    def _read(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_chrome, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._cond:
                    self._replies["closed"] = True
                    self._cond.notify_all()
                return
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    with self._cond:
                        self._replies[msg["id"]] = msg
                        self._cond.notify_all()
                else:
                    m = msg.get("method", "")
                    if m == "Runtime.consoleAPICalled":
                        p = msg["params"]
                        self.console.append(p["type"] + ": " + " ".join(
                            str(a.get("value", a.get("description", ""))) for a in p.get("args", [])))
                    elif m == "Runtime.exceptionThrown":
                        d = msg["params"]["exceptionDetails"]
                        self.console.append("exception: " + d.get("exception", {}).get("description", d.get("text", "")))
                    self.events.put(msg)

    def call(self, method, session=None, timeout=30, **params):
        with self._lock:
            self._next += 1
            mid = self._next
        msg = {"id": mid, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        data = json.dumps(msg).encode() + b"\0"
        while data:
            n = os.write(self._to_chrome, data)
            data = data[n:]
        deadline = time.time() + timeout
        with self._cond:
            while mid not in self._replies:
                if self._replies.get("closed"):
                    raise CdpError(f"chromium exited during {method}")
                left = deadline - time.time()
                if left <= 0:
                    raise CdpError(f"no reply to {method} in {timeout}s")
                self._cond.wait(left)
            reply = self._replies.pop(mid)
        if "error" in reply:
            raise CdpError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def page(self, method, timeout=30, **params):
        return self.call(method, session=self.session, timeout=timeout, **params)

    def viewport(self, width, height, mobile=False):
        self.page("Emulation.setDeviceMetricsOverride", width=width, height=height, deviceScaleFactor=1,
                  mobile=mobile)

    def navigate(self, url):
        self.page("Page.navigate", url=url)

    def eval(self, expression, timeout=30):
        """Evaluates in the page (promises awaited) and returns the value; a thrown error raises CdpError."""
        r = self.page("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True,
                      timeout=timeout)
        if "exceptionDetails" in r:
            d = r["exceptionDetails"]
            raise CdpError(f"{expression[:80]}...: {d.get('exception', {}).get('description', d.get('text'))}")
        return r["result"].get("value")

    def wait(self, expression, timeout=30, what=None):
        """Polls a JS expression until it is truthy; returns its value (true for a DOM node)."""
        deadline = time.time() + timeout
        last = None
        probe = f"(() => {{ const v = ({expression}); return v instanceof Node ? true : v; }})()"
        while time.time() < deadline:
            try:
                last = self.eval(probe)
            except CdpError as e:
                last = e
            if last and not isinstance(last, CdpError):
                return last
            time.sleep(0.1)
        try:
            state = self.eval("location.href + ' ' + JSON.stringify(document.body ? document.body.dataset : null) + ' '"
                              " + (document.body ? document.body.innerText.slice(0, 1500) : '') + ' resources: '"
                              " + performance.getEntriesByType('resource').map(e => e.name.replace(location.origin, '')"
                              " + '@' + Math.round(e.startTime) + '-' + Math.round(e.responseEnd)).join(' ')", timeout=5)
        except CdpError as e:
            state = repr(e)
        raise AssertionError(f"timed out waiting for {what or expression} (last: {last!r}); page: {state}\n"
                             "page console:\n" + "\n".join(self.console[-30:]))

    def screenshot(self, path):
        data = self.page("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))
        return path

    def close(self):
        try:
            self.call("Browser.close", timeout=5)
        except CdpError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._to_chrome, self._from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass
        self._log.close()
