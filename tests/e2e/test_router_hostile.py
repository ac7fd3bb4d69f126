"""The router against hostile (and ordinary) clients, with a real pod that keeps
connections alive and reports which request it saw (knap-testapp /whoami).

Every response is checked against the request that asked for it: the pod
echoes the X-Request-Id, the body length and an FNV-1a digest, so a response
handed to the wrong client, a smuggled request or a phantom "0" request shows
up as a mismatch. Raw sockets throughout: the framing is what is under test.

Needs root and a running containerd (the `serving` fixture of test_serving.py).
"""
import concurrent.futures
import json
import os
import random
import socket
import threading
import time

from test_serving import apply, get, service, serving  # noqa: F401 (fixture)

HOST = "hostile.default.localhost"
CI_REQUESTS = int(os.environ.get("KNAP_HOSTILE_REQUESTS", "10000"))
FD_ROUNDS = int(os.environ.get("KNAP_FD_ROUNDS", "10"))


def fnv(data):
    h = 14695981039346656037
    for c in data:
        h = ((h ^ c) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


class Conn:
    """A raw HTTP/1.1 client connection with a minimal response reader."""

    def __init__(self, port, timeout=30):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def send(self, data):
        self.s.sendall(data)

    def _fill(self):
        d = self.s.recv(65536)
        if not d:
            raise EOFError("connection closed")
        self.buf += d

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n):
        while len(self.buf) < n:
            self._fill()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def response(self, head_request=False):
        """(status, headers dict lower-case, body bytes). Raises EOFError when closed."""
        status = int(self._line().split(b" ")[1])
        headers = {}
        while True:
            line = self._line()
            if not line:
                break
            k, v = line.split(b":", 1)
            k = k.strip().lower().decode()
            assert k not in ("content-length", "transfer-encoding") or k not in headers, "duplicate framing header"
            headers[k] = v.strip().decode()
        assert not ("content-length" in headers and "transfer-encoding" in headers), headers
        body = b""
        if head_request or status in (204, 304) or 100 <= status < 200:
            pass
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size = int(self._line().split(b";")[0], 16)
                if size == 0:
                    while self._line():
                        pass
                    break
                body += self._exact(size)
                assert self._exact(2) == b"\r\n"
        elif "content-length" in headers:
            body = self._exact(int(headers["content-length"]))
        else:
            try:
                while True:
                    self._fill()
            except EOFError:
                body, self.buf = self.buf, b""
        return status, headers, body

    def closed(self, wait=5):
        """True when the router closes the connection without sending anything more."""
        self.s.settimeout(wait)
        try:
            while True:
                d = self.s.recv(65536)
                if not d:
                    return self.buf == b""
                self.buf += d
                return False
        except (ConnectionResetError, BrokenPipeError):
            return self.buf == b""
        except socket.timeout:
            return False

    def close(self):
        self.s.close()


def req(rid, method="GET", body=None, chunked=False, extra="", path="/whoami"):
    """Request bytes for /whoami carrying id `rid`."""
    head = f"{method} {path} HTTP/1.1\r\nHost: {HOST}\r\nX-Request-Id: {rid}\r\n{extra}"
    if body is None:
        return (head + "\r\n").encode()
    if chunked:
        out = (head + "Transfer-Encoding: chunked\r\n\r\n").encode()
        pos = 0
        while pos < len(body):
            n = random.randint(1, 300)
            out += f"{len(body[pos:pos + n]):x}\r\n".encode() + body[pos:pos + n] + b"\r\n"
            pos += n
        return out + b"0\r\n\r\n"
    return (head + f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def check(resp, rid, body=b"", method="GET"):
    """None when `resp` is the pod's answer to request `rid`, else why not."""
    status, _, data = resp
    if status != 200:
        return f"{rid}: status {status} {data[:200]!r}"
    j = json.loads(data)
    want = {"id": rid, "method": method, "body_len": len(body), "body_fnv": fnv(body)}
    got = {k: j.get(k) for k in want}
    return None if got == want else f"{rid}: expected {want}, got {got}"


def deploy(k):
    apply(k, service("hostile", annotations={"autoscaling.knative.dev/min-scale": "1",
                                             "autoscaling.knative.dev/max-scale": "1"}))
    k.wait_for(lambda: get(k, HOST, "/whoami")[0] == 200, timeout=60, what="router serves the host")


def innocent_round(port, n, tag):
    """`n` keep-alive requests, GET and POST mixed; returns the mismatches."""
    bad = []
    c = Conn(port)
    try:
        for i in range(n):
            rid = f"{tag}-{i}"
            body = os.urandom(random.randint(0, 2000)) if i % 3 == 0 else None
            c.send(req(rid, "POST" if body is not None else "GET", body))
            err = check(c.response(), rid, body or b"", "POST" if body is not None else "GET")
            if err:
                bad.append(err)
    finally:
        c.close()
    return bad


HOSTILE = {
    "cl+te": "POST /whoami HTTP/1.1\r\nHost: {h}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n"
             "0\r\n\r\n{smuggled}",
    "te+cl": "POST /whoami HTTP/1.1\r\nHost: {h}\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n"
             "0\r\n\r\n{smuggled}",
    "te+te": "POST /whoami HTTP/1.1\r\nHost: {h}\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n"
             "0\r\n\r\n{smuggled}",
    "te-chunked-twice": "POST /whoami HTTP/1.1\r\nHost: {h}\r\nTransfer-Encoding: chunked, chunked\r\n\r\n"
                        "0\r\n\r\n{smuggled}",
    "te-not-last": "POST /whoami HTTP/1.1\r\nHost: {h}\r\nTransfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n{smuggled}",
    "te-space-name": "POST /whoami HTTP/1.1\r\nHost: {h}\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n{smuggled}",
    "cl-duplicate": "POST /whoami HTTP/1.1\r\nHost: {h}\r\nContent-Length: 0\r\nContent-Length: 45\r\n\r\n{smuggled}",
    "cl-list": "POST /whoami HTTP/1.1\r\nHost: {h}\r\nContent-Length: 0, 45\r\n\r\n{smuggled}",
    "cl-invalid": "POST /whoami HTTP/1.1\r\nHost: {h}\r\nContent-Length: +5\r\n\r\n{smuggled}",
    "two-hosts": "GET /whoami HTTP/1.1\r\nHost: {h}\r\nHost: other.default.localhost\r\n\r\n{smuggled}",
    "obs-fold": "GET /whoami HTTP/1.1\r\nHost: {h}\r\nX-Folded: a\r\n Content-Length: 45\r\n\r\n{smuggled}",
    "bare-lf": "GET /whoami HTTP/1.1\nHost: {h}\nContent-Length: 45\n\n{smuggled}",
    "bad-chunk-size": "POST /whoami HTTP/1.1\r\nHost: {h}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{smuggled}",
    "oversized-chunk": "POST /whoami HTTP/1.1\r\nHost: {h}\r\nTransfer-Encoding: chunked\r\n\r\n"
                       "10000000000000001\r\nx\r\n0\r\n\r\n{smuggled}",
    "chunk-size-lf": "POST /whoami HTTP/1.1\r\nHost: {h}\r\nTransfer-Encoding: chunked\r\n\r\n1\nx\r\n0\r\n\r\n{smuggled}",
    "chunk-no-crlf": "POST /whoami HTTP/1.1\r\nHost: {h}\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nxx0\r\n\r\n{smuggled}",
    "http10-te": "POST /whoami HTTP/1.0\r\nHost: {h}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{smuggled}",
}


def smuggled(rid):
    return f"GET /whoami HTTP/1.1\r\nHost: {HOST}\r\nX-Request-Id: {rid}\r\n\r\n"


def test_hostile_framing_is_refused_and_smuggles_nothing(serving):
    k = serving
    deploy(k)
    for name, shape in HOSTILE.items():
        c = Conn(k.router_port)
        c.send(shape.format(h=HOST, smuggled=smuggled("SMUGGLED-" + name)).encode())
        status, _, body = c.response()
        assert status in (400, 501), f"{name}: {status} {body!r}"
        assert c.closed(), f"{name}: the router answered more after refusing the request"
        c.close()
        # The pod never saw the smuggled request: innocent clients get their own answers.
        assert innocent_round(k.router_port, 5, "after-" + name) == []


def test_connection_cannot_remove_framing_headers(serving):
    k = serving
    deploy(k)
    c = Conn(k.router_port)
    body = b"0123456789" + smuggled("SMUGGLED-conn").encode()
    c.send(req("conn-cl", "POST", body, extra="Connection: Content-Length, X-Hop\r\nX-Hop: 1\r\n"))
    assert check(c.response(), "conn-cl", body, "POST") is None
    c.send(req("conn-te", "POST", body, chunked=True, extra="Connection: Transfer-Encoding\r\n"))
    assert check(c.response(), "conn-te", body, "POST") is None
    c.send(req("after", extra="Connection: keep-alive\r\n"))
    assert check(c.response(), "after") is None
    # Headers named in Connection are not forwarded.
    c.send(f"GET /headers HTTP/1.1\r\nHost: {HOST}\r\nConnection: X-Secret\r\nX-Secret: s\r\n\r\n".encode())
    status, _, data = c.response()
    assert status == 200 and "X-Secret" not in json.loads(data)["headers"], data
    c.close()


def test_chunk_extensions_trailers_and_pipelining(serving):
    k = serving
    deploy(k)
    c = Conn(k.router_port)
    body = b"hello world"
    c.send(f"POST /whoami HTTP/1.1\r\nHost: {HOST}\r\nX-Request-Id: ext\r\nTransfer-Encoding: chunked\r\n\r\n"
           "5;name=value;q=\"a;b\"\r\nhello\r\n6 ; x\r\n world\r\n0\r\nX-Trailer: t\r\nContent-Length: 999\r\n\r\n"
           .encode())
    assert check(c.response(), "ext", body, "POST") is None
    # 100 requests in one write, bodies mixed in; answers come back in order.
    batch, expect = b"", []
    for i in range(100):
        rid = f"pipe-{i}"
        b = os.urandom(i * 7) if i % 2 else None
        batch += req(rid, "POST" if b is not None else "GET", b, chunked=i % 4 == 1)
        expect.append((rid, b or b"", "POST" if b is not None else "GET"))
    c.send(batch)
    for rid, b, m in expect:
        assert check(c.response(), rid, b, m) is None
    c.close()


def test_lenient_upstream_framing(serving):
    k = serving
    deploy(k)
    c = Conn(k.router_port)
    for mode in ("lf", "connection-cl", "lf"):
        c.send(f"GET /rawhead?mode={mode} HTTP/1.1\r\nHost: {HOST}\r\n\r\n".encode())
        status, headers, data = c.response()
        assert status == 200 and data == f"raw {mode}\n".encode(), (mode, status, data)
        assert headers.get("content-length") == str(len(data)), headers
    c.send(req("after-raw"))
    assert check(c.response(), "after-raw") is None
    c.close()


def test_no_mismatch_under_mixed_load(serving):
    """Chunked uploads, hostile requests and innocent keep-alive clients at once."""
    k = serving
    deploy(k)
    total = max(CI_REQUESTS, 100)
    per_conn = 100
    mismatches, errors, count = [], [], [0]
    lock = threading.Lock()

    def innocent(t):
        try:
            bad = innocent_round(k.router_port, per_conn, f"inn{t}")
        except Exception as e:  # noqa: BLE001
            with lock:
                errors.append(f"inn{t}: {e!r}")
            return
        with lock:
            mismatches.extend(bad)
            count[0] += per_conn

    def uploader(t):
        c = Conn(k.router_port)
        try:
            for i in range(per_conn):
                rid = f"up{t}-{i}"
                b = os.urandom(random.randint(1, 20000))
                c.send(req(rid, "POST", b, chunked=True))
                err = check(c.response(), rid, b, "POST")
                with lock:
                    count[0] += 1
                    if err:
                        mismatches.append(err)
        except Exception as e:  # noqa: BLE001
            with lock:
                errors.append(f"up{t}: {e!r}")
        finally:
            c.close()

    def hostile(t):
        names = list(HOSTILE)
        for i in range(20):
            name = names[(t + i) % len(names)]
            c = Conn(k.router_port)
            try:
                c.send(HOSTILE[name].format(h=HOST, smuggled=smuggled(f"SMUGGLED-{t}-{i}")).encode())
                status = c.response()[0]
                with lock:
                    count[0] += 1
                    if status not in (400, 501):
                        mismatches.append(f"hostile {name}: {status}")
            except Exception as e:  # noqa: BLE001
                with lock:
                    errors.append(f"hostile {name}: {e!r}")
            finally:
                c.close()

    started = time.time()
    jobs = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=24) as pool:
        t, planned = 0, 0
        while planned < total:
            kind = t % 5
            jobs.append(pool.submit(uploader if kind == 0 else hostile if kind == 1 else innocent, t))
            planned += 20 if kind == 1 else per_conn
            t += 1
        for j in jobs:
            j.result()
    elapsed = time.time() - started
    print(f"mixed load: {count[0]} requests in {elapsed:.1f}s, {len(mismatches)} mismatched, {len(errors)} errors")
    assert mismatches == [], mismatches[:10]
    assert errors == [], errors[:10]
    assert count[0] >= total, count[0]


def knapd_fds(k):
    return len(os.listdir(f"/proc/{k.proc.pid}/fd"))


def route_gone(k, host):
    try:
        return get(k, host, "/", timeout=2)[0] == 404
    except OSError:  # held while the route still names the deleted revision
        return False


def wait_zero(k, rev):
    api = f"/apis/serving.knative.dev/v1/namespaces/default/revisions/{rev}"
    k.wait_for(lambda: k.get_json(api).get("status", {}).get("actualReplicas", 1) == 0, timeout=90,
               what=f"{rev} scaled to zero")


def test_fds_back_to_baseline_after_burst_and_rounds(serving):
    k = serving
    apply(k, service("fds", annotations={"autoscaling.knative.dev/min-scale": "0"}))
    host = "fds.default.localhost"
    assert get(k, host, "/whoami")[0] == 200
    wait_zero(k, "fds-00001")
    time.sleep(1)
    baseline = knapd_fds(k)

    # A 500-way burst (every client its own connection), then scale to zero.
    def one(i):
        c = Conn(k.router_port, timeout=60)
        try:
            c.send(f"GET /sleep?ms=20 HTTP/1.1\r\nHost: {host}\r\nX-Request-Id: b{i}\r\n\r\n".encode())
            return c.response()[0]
        finally:
            c.close()
    with concurrent.futures.ThreadPoolExecutor(max_workers=500) as pool:
        codes = list(pool.map(one, range(500)))
    assert codes.count(200) == 500, {c: codes.count(c) for c in set(codes)}
    peak = knapd_fds(k)
    wait_zero(k, "fds-00001")
    k.wait_for(lambda: knapd_fds(k) <= baseline + 2, timeout=30,
               what=f"knapd fds back to baseline {baseline} (peak {peak}, now {knapd_fds(k)})")
    after_burst = knapd_fds(k)

    # Create/request/delete rounds of a Service.
    for i in range(FD_ROUNDS):
        name = f"round{i}"
        apply(k, service(name, annotations={"autoscaling.knative.dev/min-scale": "1"}))
        c = Conn(k.router_port)
        for j in range(3):
            c.send(f"GET /whoami HTTP/1.1\r\nHost: {name}.default.localhost\r\nX-Request-Id: r{j}\r\n\r\n".encode())
            assert c.response()[0] == 200
        c.close()
        assert k.http("DELETE", f"/apis/serving.knative.dev/v1/namespaces/default/services/{name}")[0] == 200
        k.wait_for(lambda: route_gone(k, f"{name}.default.localhost"), timeout=30, what="route removed")
    k.wait_for(lambda: knapd_fds(k) <= baseline + 2, timeout=60,
               what=f"knapd fds back to baseline {baseline} after {FD_ROUNDS} rounds (now {knapd_fds(k)})")
    print(f"fds: baseline {baseline}, burst peak {peak}, after burst {after_burst}, "
          f"after {FD_ROUNDS} rounds {knapd_fds(k)}")
