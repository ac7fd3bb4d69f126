"""Fault-injecting HTTP proxy in front of a test Registry (stdlib only).

FaultProxy listens on 127.0.0.1:<port> (plain HTTP by default, so the client
names it in `insecure-registries`; or TLS with the registry's test CA) and
forwards every request to the real registry, passing Authorization and
WWW-Authenticate through. Faults, switchable while it runs:

  corrupt_blobs(digests=None)   serve these blobs (all when None) with one byte
                                flipped: same size, wrong digest
  cut_blobs(after, times=1)     close the connection after `after` body bytes of
                                a blob response, for the next `times` responses
  go_down_after(after)          cut the first blob response after `after` bytes
                                and from then on refuse every connection (the
                                registry "stopped mid-pull")
  refuse(mode) / accept()       refuse connections: mode "reset" accepts and
                                resets each one (counted in refused_connections);
                                mode "closed" closes the listening socket
                                (connection refused, like a stopped registry)
  throttle(bytes_per_second)    slow blob bodies down (None = full speed)

Every forwarded request is logged in `requests` (ProxyRequest records);
blob_gets()/cut_count()/ranged_gets() summarise it. If the upstream registry is
down (Registry.stop()), requests are answered by resetting the connection.

Thread safety: fault switches and the request log are guarded by one lock, so
a test may flip faults while a pull is running.
"""
import http.client
import http.server
import re
import socket
import ssl
import struct
import threading
import time

_BLOB_RE = re.compile(r"^/v2/(.+)/blobs/(sha256:[0-9a-f]{64})$")
_HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
               "transfer-encoding", "upgrade", "host", "content-length"}


class ProxyRequest:
    """One request the proxy handled."""

    def __init__(self, method, path, range_header):
        self.method = method
        self.path = path
        self.range = range_header
        self.status = None
        self.length = None      # Content-Length the upstream announced
        self.sent = 0           # body bytes written to the client
        self.cut = False        # connection closed before the whole body was sent
        self.corrupted = False
        self.upstream_error = None
        self.time = time.time()  # when the request arrived
        self.done = None         # when the proxy finished answering it (None while in flight)

    @property
    def blob_digest(self):
        m = _BLOB_RE.match(self.path.split("?")[0])
        return m.group(2) if m else None

    def __repr__(self):
        return (f"<{self.method} {self.path} range={self.range} -> {self.status} sent={self.sent}/{self.length}"
                f"{' CUT' if self.cut else ''}{' CORRUPT' if self.corrupted else ''}"
                f"{' upstream:' + self.upstream_error if self.upstream_error else ''}>")


def _reset(sock):
    """Close with RST (SO_LINGER 0) so the peer sees the transfer broken, not a clean end."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, proxy, addr):
        self.proxy = proxy
        super().__init__(addr, _Handler)

    def verify_request(self, request, client_address):
        p = self.proxy
        with p.lock:
            refusing = p.refusing
            if refusing:
                p.refused_connections += 1
        if refusing:
            _reset(request)
            return False
        return True

    def shutdown_request(self, request):
        with self.proxy.lock:
            self.proxy.open_sockets.discard(request)
        try:
            super().shutdown_request(request)
        except OSError:
            pass

    def finish_request(self, request, client_address):
        with self.proxy.lock:
            self.proxy.open_sockets.add(request)
        if self.proxy.server_ctx is not None:
            try:
                request = self.proxy.server_ctx.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError):
                return
        super().finish_request(request, client_address)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):  # quiet
        pass

    def do_GET(self):
        self._forward()

    def do_HEAD(self):
        self._forward()

    def do_POST(self):
        self._forward()

    def do_PUT(self):
        self._forward()

    def do_PATCH(self):
        self._forward()

    def do_DELETE(self):
        self._forward()

    def _forward(self):
        rec = ProxyRequest(self.command, self.path, self.headers.get("Range"))
        try:
            self._forward_logged(rec)
        finally:
            rec.done = time.time()

    def _forward_logged(self, rec):
        proxy = self.server.proxy
        with proxy.lock:
            proxy.requests.append(rec)
            if proxy.refusing:  # switched off while this keep-alive connection was open
                proxy.refused_connections += 1
                rec.upstream_error = "refused"
                self.close_connection = True
                _reset(self.connection)
                return
        body = None
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            body = self.rfile.read(n)
        headers = [(k, v) for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP]  # repeats kept
        up = proxy.upstream
        try:
            if up.tls:
                conn = http.client.HTTPSConnection("127.0.0.1", up.port, timeout=30,
                                                   context=up.ca.client_context())
            else:
                conn = http.client.HTTPConnection("127.0.0.1", up.port, timeout=30)
            conn.putrequest(self.command, self.path, skip_accept_encoding=True)
            for k, v in headers:
                conn.putheader(k, v)
            if body is not None:
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            rec.upstream_error = str(e) or type(e).__name__
            self.close_connection = True
            _reset(self.connection)
            return
        rec.status = resp.status
        length = resp.getheader("Content-Length")
        is_blob = self.command == "GET" and rec.blob_digest is not None and resp.status in (200, 206)
        try:
            if length is None and self.command != "HEAD":
                data = resp.read()
                length = str(len(data))
                chunks = iter([data])
            else:
                chunks = iter(lambda: resp.read(16384), b"")
            rec.length = int(length) if length is not None else None
            self.send_response_only(resp.status, resp.reason)
            for k, v in resp.getheaders():
                if k.lower() not in _HOP_BY_HOP:
                    self.send_header(k, v)
            if length is not None:
                self.send_header("Content-Length", length)
            self.end_headers()
            if self.command == "HEAD":
                return
            plan = proxy._plan(rec) if is_blob else {}
            cut_at = plan.get("cut_at")
            flip_at = (rec.length // 2) if plan.get("corrupt") and rec.length else None
            offset = 0
            for chunk in chunks:
                if flip_at is not None and offset <= flip_at < offset + len(chunk):
                    b = bytearray(chunk)
                    b[flip_at - offset] ^= 0xFF
                    chunk = bytes(b)
                    rec.corrupted = True
                if cut_at is not None and offset + len(chunk) >= cut_at:
                    chunk = chunk[:cut_at - offset]
                    self.wfile.write(chunk)
                    self.wfile.flush()
                    rec.sent += len(chunk)
                    rec.cut = True
                    self.close_connection = True
                    if plan.get("then_refuse"):
                        proxy.refuse(plan["then_refuse"])
                    _reset(self.connection)
                    return
                self.wfile.write(chunk)
                rec.sent += len(chunk)
                offset += len(chunk)
                rate = proxy.rate
                if rate and is_blob:
                    time.sleep(len(chunk) / rate)
            self.wfile.flush()
            if rec.length is not None and rec.sent < rec.length:  # upstream broke off (registry stopped)
                rec.cut = True
                rec.upstream_error = "short upstream body"
                self.close_connection = True
                _reset(self.connection)
        except (OSError, http.client.HTTPException) as e:
            rec.cut = rec.length is not None and rec.sent < rec.length
            rec.upstream_error = rec.upstream_error or (str(e) or type(e).__name__)
            self.close_connection = True
            _reset(self.connection)
        finally:
            conn.close()


class FaultProxy:
    """A fault-injecting proxy in front of `upstream` (a registry.Registry); see the module comment.

    FaultProxy(upstream, tls=False, port=None).start() -> self
      .host  "127.0.0.1:PORT" (use in image names: proxy.image("app:v1"))
      .url   "http://127.0.0.1:PORT" (https:// with tls=True)
    """

    def __init__(self, upstream, tls=False, port=None):
        self.upstream = upstream
        self.tls = tls
        self.server_ctx = upstream.ca.server_context() if tls else None
        self.port = port
        self.lock = threading.Lock()
        self.requests = []
        self.refused_connections = 0
        self.refusing = False
        self.open_sockets = set()
        self.rate = None
        self._corrupt = None      # None = off; set() = every blob; else set of digests
        self._cuts = []           # [(after_bytes, digest or None, then_refuse mode or None)]
        self._server = None
        self._thread = None

    # --- names ------------------------------------------------------------
    @property
    def host(self):
        return f"127.0.0.1:{self.port}"

    @property
    def url(self):
        return ("https://" if self.tls else "http://") + self.host

    def image(self, repo_ref):
        return f"{self.host}/{repo_ref}"

    # --- lifecycle --------------------------------------------------------
    def start(self):
        self._server = _Server(self, ("127.0.0.1", self.port or 0))
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self):
        """Stops listening and resets every open connection."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        with self.lock:
            socks = list(self.open_sockets)
            self.open_sockets.clear()
        for s in socks:
            _reset(s)

    # --- faults -----------------------------------------------------------
    def corrupt_blobs(self, digests=None):
        """Flip one byte in the middle of these blobs (all blobs when None); [] switches it off."""
        with self.lock:
            self._corrupt = set() if digests is None else (set(digests) if digests else None)

    def cut_blobs(self, after, times=1, digest=None):
        """Close the next `times` blob responses (of `digest`, or any) after `after` body bytes."""
        with self.lock:
            self._cuts += [(after, digest, None)] * times

    def go_down_after(self, after, digest=None, mode="reset"):
        """Cut the next blob response after `after` bytes, then refuse every connection (refuse(mode))."""
        with self.lock:
            self._cuts.append((after, digest, mode))

    def refuse(self, mode="reset"):
        """Refuse connections from now on: "reset" (accept + RST, counted) or "closed" (no listener)."""
        with self.lock:
            self.refusing = True
            socks = list(self.open_sockets)
        if mode == "closed":
            self.stop()
        else:
            for s in socks:
                _reset(s)

    def accept(self):
        """Serve again after refuse()."""
        with self.lock:
            self.refusing = False
        if self._server is None:
            self.start()

    def throttle(self, bytes_per_second):
        with self.lock:
            self.rate = bytes_per_second

    def _plan(self, rec):
        with self.lock:
            plan = {}
            if self._corrupt is not None and (not self._corrupt or rec.blob_digest in self._corrupt):
                plan["corrupt"] = True
            for i, (after, digest, then_refuse) in enumerate(self._cuts):
                if digest is None or digest == rec.blob_digest:
                    plan["cut_at"] = after
                    if then_refuse:
                        plan["then_refuse"] = then_refuse
                    del self._cuts[i]
                    break
            return plan

    # --- what happened ----------------------------------------------------
    def log(self):
        with self.lock:
            return list(self.requests)

    def blob_gets(self, digest=None):
        """GET requests for blobs (of `digest`, or any) that reached the proxy."""
        return [r for r in self.log() if r.method == "GET" and r.blob_digest and
                (digest is None or r.blob_digest == digest)]

    def cut_count(self):
        return sum(1 for r in self.log() if r.cut)

    def ranged_gets(self, digest=None):
        return [r for r in self.blob_gets(digest) if r.range]

    def describe(self):
        return "\n".join(map(repr, self.log())) + f"\nrefused connections: {self.refused_connections}"
