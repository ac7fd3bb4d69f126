// Browser defences of the API (issue 9): what a web page can make a browser
// send is refused before any handler sees it.
//  - Host allow-list (DNS rebinding): the Host header must name a loopback
//    name (localhost, *.localhost), an IP address literal, or one of the
//    configured names (knapd --api-allowed-host). Otherwise 403.
//  - Bodies only as JSON, YAML or patch media types: a form or text/plain
//    body (what a page can POST without a CORS preflight) is 415.
//  - Origin on writes: a write carrying an Origin header whose host:port is
//    not the request's Host is 403 (browsers always send Origin cross-origin;
//    kubectl and client libraries never do).
// Pure functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "api/server/k8s_status.h"

namespace knap::api {

struct RequestHeaders {
  std::string method;
  std::string host;          // Host header as sent ("" when absent)
  std::string origin;        // Origin header ("" when absent)
  std::string content_type;  // Content-Type header
  bool has_body = false;
};

// Whether `host` (a Host header value, port optional) is allowed.
bool hostAllowed(const std::string& host, const std::vector<std::string>& allowed_names);
// Whether `media_type` (lower-case, no parameters) may carry a request body.
bool bodyMediaTypeAllowed(const std::string& media_type);
// The error to answer instead of handling the request, if any.
std::optional<ApiError> guardRequest(const RequestHeaders& h, const std::vector<std::string>& allowed_names);

}  // namespace knap::api
