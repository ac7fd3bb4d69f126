#include "api/server/console_handler.h"

#include <string>
#include <string_view>

#include "console/assets.h"

namespace knap::api {

const char kConsoleContentSecurityPolicy[] =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

namespace {

void securityHeaders(HttpResponse& r) {
  r.headers["Content-Security-Policy"] = kConsoleContentSecurityPolicy;
  r.headers["X-Content-Type-Options"] = "nosniff";
  r.headers["X-Frame-Options"] = "DENY";
  r.headers["Referrer-Policy"] = "no-referrer";
  r.headers["Cross-Origin-Opener-Policy"] = "same-origin";
}

HttpResponse plain(int code, std::string text) {
  HttpResponse r;
  r.code = code;
  r.body = std::move(text);
  r.content_type = "text/plain; charset=utf-8";
  securityHeaders(r);
  return r;
}

// Whether an If-None-Match header value names `etag` (a list, or "*").
bool etagMatches(std::string_view header, std::string_view etag) {
  size_t pos = 0;
  while (pos < header.size()) {
    size_t comma = header.find(',', pos);
    std::string_view item =
        header.substr(pos, comma == std::string_view::npos ? std::string_view::npos : comma - pos);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (item.substr(0, 2) == "W/") item.remove_prefix(2);
    if (item == "*" || item == etag) return true;
    if (comma == std::string_view::npos) break;
    pos = comma + 1;
  }
  return false;
}

HttpResponse serve(const HttpRequest& req, const console::Asset& asset, bool immutable) {
  HttpResponse r;
  securityHeaders(r);
  r.headers["ETag"] = std::string(asset.etag);
  r.headers["Cache-Control"] = immutable ? "public, max-age=31536000, immutable" : "no-cache";
  r.content_type = std::string(asset.content_type);
  if (!req.if_none_match.empty() && etagMatches(req.if_none_match, asset.etag)) {
    r.code = 304;
    return r;
  }
  r.body = std::string(asset.body);
  return r;
}

}  // namespace

std::optional<HttpResponse> consoleResponse(const HttpRequest& req) {
  std::string_view path(req.target);
  path = path.substr(0, path.find('?'));
  if (path != "/ui" && path.substr(0, 4) != "/ui/") return std::nullopt;
  if (req.method != "GET" && req.method != "HEAD") {
    HttpResponse r = plain(405, "the console's files are read-only: use GET\n");
    r.headers["Allow"] = "GET, HEAD";
    return r;
  }
  if (path == "/ui") {
    HttpResponse r = plain(301, "moved to /ui/\n");
    r.headers["Location"] = "/ui/";
    return r;
  }
  std::string_view rest = path.substr(4);
  if (rest.empty() || rest == "index.html") return serve(req, *console::findAsset("index.html"), false);
  std::string_view bundle = console::bundleId();
  if (rest.size() > bundle.size() + 1 && rest.substr(0, bundle.size()) == bundle &&
      rest[bundle.size()] == '/') {
    std::string_view name = rest.substr(bundle.size() + 1);
    const console::Asset* asset = name == "index.html" ? nullptr : console::findAsset(name);
    if (asset) return serve(req, *asset, true);
  }
  // An old bundle (a page loaded before knapd was upgraded) or an unknown file.
  return plain(404, "no such console file: " + std::string(path) + " (reload /ui/)\n");
}

}  // namespace knap::api
