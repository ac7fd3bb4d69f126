// HTTP/2 to clients on the HTTPS listener (ALPN "h2", RFC 9113), with
// nghttp2 doing the framing, HPACK, flow-control bookkeeping and the
// protocol checks of RFC 9113 §8 (pseudo-headers, connection-specific
// fields → stream error, Content-Length against DATA); on top, the checks
// HTTP/1.1 requests get (router/http1.h: field values, Host for
// :authority, a single host field) plus :scheme http/https and :path from
// '/' ('*' only with OPTIONS) → 400 on that stream.
//
// Each stream is one request through the same stages as an HTTP/1.1
// request (Router::Impl::handleRequest: route → activate → concurrency →
// timeouts → pod pool); only its client side differs (H2Client, a
// ClientSide of router/client_side.h). Pods are still spoken to in
// HTTP/1.1.
//
// Bounds: 100 concurrent streams (requests still running after their
// stream was reset count too: further streams are refused), request
// headers within max_header_bytes (431), 8 CONTINUATION frames, per
// stream 64 KiB of request body and 64 KiB of response body buffered (the
// pod is read only as fast as the client's window lets the response go),
// request bodies of all streams together 1 MiB before the connection
// window stops, RST_STREAM a token bucket (rapid reset, CVE-2023-44487:
// past it GOAWAY ENHANCE_YOUR_CALM), counting the client's and the ones
// the router sends other than NO_ERROR (resets a client provokes,
// CVE-2025-8671), at most 100 pending
// SETTINGS/PING acknowledgements (a flood ends the session). A connection
// with no request running and no response output waiting is closed with
// GOAWAY after keepalive_idle_timeout; one that sends no request within
// header_read_timeout is closed, and so is one leaving a header block
// unfinished (no END_HEADERS) that long (GOAWAY first); a write stalled for
// client_io_timeout closes it, and so does its send window kept at 0 with
// output waiting that long. Per stream: a response whose output waits
// client_io_timeout without a DATA frame going out (its window kept shut)
// is reset with CANCEL and its buffered output dropped; a stream answered
// in full whose client has not ended its side is reset with NO_ERROR
// (RFC 9113 §8.1). Router::drain sends GOAWAY and
// lets the open streams finish. No server push, no extended CONNECT (so no
// WebSocket over HTTP/2: such clients use HTTP/1.1).
//
// Threading: a session and its streams live on the connection's worker
// thread.
//
// Not part of the router's interface: include only from router/*.cc.
#pragma once

#include <memory>
#include <string>

#include "router/router_impl.h"

namespace knap::router {

// ALPN said "h2" on this (TLS) connection.
bool negotiatedH2(ClientStream& client);

// Serves the HTTP/2 connection `client` (TLS handshake done, ALPN h2) until
// it ends; the caller closes the socket afterwards.
awaitable<void> serveH2(Router::Impl& impl, Worker& w, ClientStream& client, std::shared_ptr<ClientConn> conn,
                        std::string client_ip, Kind kind);

}  // namespace knap::router
