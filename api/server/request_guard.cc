#include "api/server/request_guard.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <string_view>

#include "common/string_util.h"

namespace knap::api {
namespace {

// "Example.COM:6443" -> "example.com"; "[::1]:6443" -> "::1". Empty when malformed.
std::string hostName(std::string_view host) {
  if (!host.empty() && host.front() == '[') {
    size_t close = host.find(']');
    if (close == std::string_view::npos) return "";
    std::string_view rest = host.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return "";
    return asciiLower(host.substr(1, close - 1));
  }
  size_t colon = host.find(':');
  if (colon != std::string_view::npos && host.find(':', colon + 1) != std::string_view::npos) {
    return asciiLower(host);  // a bare IPv6 literal
  }
  std::string name = asciiLower(host.substr(0, colon));
  if (!name.empty() && name.back() == '.') name.pop_back();  // "localhost." is localhost
  return name;
}

bool isIpLiteral(const std::string& name) {
  unsigned char buf[16];
  return inet_pton(AF_INET, name.c_str(), buf) == 1 || inet_pton(AF_INET6, name.c_str(), buf) == 1;
}

bool endsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string mediaTypeOf(const std::string& content_type) {
  std::string_view t(content_type);
  t = t.substr(0, t.find(';'));
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.remove_suffix(1);
  while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.remove_prefix(1);
  return asciiLower(t);
}

// "http://a.example:8080" -> "a.example:8080"; "" for "null" and malformed origins.
std::string originHostPort(const std::string& origin) {
  size_t scheme = origin.find("://");
  if (scheme == std::string::npos) return "";
  std::string rest = origin.substr(scheme + 3);
  if (rest.find('/') != std::string::npos) rest = rest.substr(0, rest.find('/'));
  return asciiLower(rest);
}

bool isWrite(const std::string& method) {
  return method != "GET" && method != "HEAD" && method != "OPTIONS";
}

}  // namespace

bool hostAllowed(const std::string& host, const std::vector<std::string>& allowed_names) {
  if (host.empty()) return true;  // HTTP/1.0 clients; browsers always send Host
  std::string name = hostName(host);
  if (name.empty()) return false;
  if (name == "localhost" || endsWith(name, ".localhost")) return true;
  if (isIpLiteral(name)) return true;  // an address cannot be rebound to another one
  return std::any_of(allowed_names.begin(), allowed_names.end(),
                     [&](const std::string& a) { return asciiLower(a) == name; });
}

bool bodyMediaTypeAllowed(const std::string& media_type) {
  return media_type == "application/json" || media_type == "application/yaml" ||
         media_type == "application/json-patch+json" || media_type == "application/merge-patch+json" ||
         media_type == "application/strategic-merge-patch+json" ||
         media_type == "application/apply-patch+yaml";
}

std::optional<ApiError> guardRequest(const RequestHeaders& h, const std::vector<std::string>& allowed_names) {
  if (!hostAllowed(h.host, allowed_names)) {
    return makeApiError(
        403, "Forbidden",
        "host \"" + h.host +
            "\" is not allowed: knapd answers loopback names, IP addresses and the names listed "
            "with knapd --api-allowed-host (a protection against DNS rebinding)");
  }
  if (isWrite(h.method) && !h.origin.empty()) {
    std::string from = originHostPort(h.origin);
    if (from.empty() || from != asciiLower(h.host)) {
      return makeApiError(
          403, "Forbidden",
          "cross-origin write refused: Origin \"" + h.origin + "\" does not match Host \"" + h.host + "\"");
    }
  }
  if (h.has_body && !bodyMediaTypeAllowed(mediaTypeOf(h.content_type))) {
    return makeApiError(
        415, "UnsupportedMediaType",
        "the body of the request was in an unknown format (Content-Type \"" + h.content_type +
            "\") - accepted media types include: application/json, application/yaml, "
            "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml");
  }
  return std::nullopt;
}

}  // namespace knap::api
