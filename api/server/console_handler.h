// Serves the embedded web console (issue 13, console/assets.h) on the API
// listener under /ui/:
//   /ui            301 to /ui/
//   /ui/           index.html, Cache-Control no-cache (revalidated by ETag)
//   /ui/<bundle>/F the file F of the current bundle, cached as immutable
// GET and HEAD only (405 otherwise); If-None-Match with the ETag gives 304.
// Every answer carries a strict Content-Security-Policy (scripts, styles and
// connections only from the page's own origin, no inline script, no framing),
// X-Content-Type-Options: nosniff and Referrer-Policy: no-referrer.
//
// The files are public (no credential needed; they hold no data): the page
// authenticates its API calls itself with a bearer token, sent from
// JavaScript in an Authorization header, never as a cookie, so a foreign page
// cannot make the browser send an ambient credential (CSRF).
// Pure function of the request; thread-safe.
#pragma once

#include <optional>

#include "api/server/rest_handler.h"

namespace knap::api {

// The console's answer when `req` targets /ui or below; nullopt otherwise.
std::optional<HttpResponse> consoleResponse(const HttpRequest& req);

// The Content-Security-Policy the console is served with.
extern const char kConsoleContentSecurityPolicy[];

}  // namespace knap::api
