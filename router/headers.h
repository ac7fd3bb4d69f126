// Header rewriting between client and pod (KNATIVE-CONTRACT.md §5.5): the
// router is ingress, activator and queue-proxy in one hop, so it does what
// those three would do to a request's headers, once.
//
// Thread safety: pure functions over the header objects they are given.
#pragma once

#include <string>
#include <string_view>

#include "router/fields.h"

namespace knap::router {

inline constexpr std::string_view kProbeHeader = "K-Network-Probe";
inline constexpr std::string_view kHashHeader = "K-Network-Hash";
inline constexpr std::string_view kRevisionHeader = "Knative-Serving-Revision";
inline constexpr std::string_view kNamespaceHeader = "Knative-Serving-Namespace";

// True when the request asks for a protocol switch (Connection: upgrade and
// an Upgrade header), e.g. WebSocket.
bool isUpgradeRequest(const Fields& req);

// Removes hop-by-hop headers (Connection, Keep-Alive, Proxy-*, TE, Trailer,
// Transfer-Encoding, Upgrade, and every header the Connection header names).
// With `keep_upgrade`, `Upgrade` survives and Connection becomes "Upgrade".
// With `drop_length`, Content-Length goes in the same pass (the proxy writes
// the framing it derived itself).
void removeHopByHop(Fields& fields, bool keep_upgrade, bool drop_length = false);

// The Forwarded value Knative's queue-proxy synthesises from X-Forwarded-*:
// "for=<xff[0]>[;host=<xfh>][;proto=<xfp>], for=<xff[1]>, ...". IPv6 nodes are
// written as "\"[addr]\"". Empty when `xff` is empty.
std::string synthesizeForwarded(std::string_view xff, std::string_view xfh, std::string_view xfp);

// Rewrites a client request's header in place for the pod: hop-by-hop
// removal (Upgrade kept for upgrades), X-Forwarded-For gets `client_ip`
// appended, X-Forwarded-Proto set to `proto`, X-Forwarded-Host set to the
// Host when absent, Forwarded synthesised when absent, internal routing
// headers (Knative-Serving-Revision/-Namespace, K-Network-Hash) and
// Content-Length (the proxy writes the framing it derived) removed. Host,
// traceparent and every other end-to-end header pass unchanged.
void rewriteRequestHeaders(Fields& req, std::string_view client_ip, std::string_view proto, bool is_upgrade);

// Rewrites a pod's response header for the client: hop-by-hop removal
// (Upgrade kept on a 101 answer to an upgrade) and Content-Length removed
// (the client side writes the framing it derived).
void rewriteResponseHeaders(Fields& resp, bool switching_protocols);

}  // namespace knap::router
