#include "oci/reference.h"

#include <cctype>

#include "oci/digest.h"

namespace knap::oci {

namespace {

bool isLowerAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

// One path component: [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*
bool validComponent(const std::string& c) {
  if (c.empty() || !isLowerAlnum(c.front()) || !isLowerAlnum(c.back())) return false;
  for (size_t i = 0; i < c.size(); ++i) {
    char ch = c[i];
    if (isLowerAlnum(ch)) continue;
    if (ch == '.' || ch == '_' || ch == '-') {
      if (ch == '.' && (c[i + 1] == '.' || c[i + 1] == '_' || c[i + 1] == '-')) return false;
      if (ch == '_' && i + 2 < c.size() && c[i + 1] == '_' && c[i + 2] == '_') return false;
      continue;
    }
    return false;
  }
  return true;
}

bool validTag(const std::string& t) {
  if (t.empty() || t.size() > 128) return false;
  if (!(std::isalnum(static_cast<unsigned char>(t[0])) || t[0] == '_')) return false;
  for (char c : t) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-')) return false;
  }
  return true;
}

bool validHost(const std::string& h) {
  if (h.empty()) return false;
  std::string host = h;
  size_t colon = h.rfind(':');
  if (h.front() == '[') {  // [ipv6]:port
    size_t close = h.find(']');
    if (close == std::string::npos) return false;
    std::string rest = h.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':' || rest.size() < 2) return false;
      for (size_t i = 1; i < rest.size(); ++i)
        if (!std::isdigit(static_cast<unsigned char>(rest[i]))) return false;
    }
    return true;
  }
  if (colon != std::string::npos) {
    std::string port = h.substr(colon + 1);
    if (port.empty() || port.size() > 5) return false;
    for (char c : port)
      if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    host = h.substr(0, colon);
  }
  if (host.empty()) return false;
  for (char c : host) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-')) return false;
  }
  return host.front() != '.' && host.front() != '-' && host.back() != '.' && host.back() != '-';
}

}  // namespace

std::string Reference::apiHost() const {
  return registry == kDockerHub ? kDockerHubApiHost : registry;
}

std::string Reference::name() const {
  return registry + "/" + repository;
}

std::string Reference::canonical() const {
  if (!digest.empty()) return name() + "@" + digest;
  return name() + ":" + tag;
}

std::string Reference::canonicalDigestRef(const std::string& d) const {
  return name() + "@" + d;
}

StatusOr<Reference> parseReference(const std::string& image) {
  auto bad = [&](const std::string& why) {
    return invalidArgument("invalid image reference \"" + image + "\": " + why);
  };
  if (image.empty()) return bad("empty");
  if (image.size() > 512) return bad("longer than 512 characters");
  for (char c : image) {
    if (std::isspace(static_cast<unsigned char>(c)) || !std::isprint(static_cast<unsigned char>(c))) {
      return bad("contains whitespace or control characters");
    }
  }
  Reference r;
  r.original = image;
  std::string rest = image;
  size_t at = rest.find('@');
  if (at != std::string::npos) {
    r.digest = rest.substr(at + 1);
    rest = rest.substr(0, at);
    if (r.digest.rfind("sha256:", 0) != 0)
      return bad("only sha256 digests are supported (got \"" + r.digest + "\")");
    if (!oci::isSha256Digest(r.digest))
      return bad("digest must be sha256: followed by 64 lowercase hex digits");
  }
  size_t slash = rest.find('/');
  std::string first = slash == std::string::npos ? "" : rest.substr(0, slash);
  if (slash != std::string::npos &&
      (first.find('.') != std::string::npos || first.find(':') != std::string::npos || first == "localhost" ||
       first.front() == '[')) {
    r.registry = first;
    rest = rest.substr(slash + 1);
    if (!validHost(r.registry)) return bad("invalid registry host \"" + r.registry + "\"");
  } else {
    r.registry = kDockerHub;
  }
  if (r.registry == "index.docker.io" || r.registry == "registry-1.docker.io") r.registry = kDockerHub;
  size_t colon = rest.rfind(':');
  if (colon != std::string::npos) {
    r.tag = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
    if (!validTag(r.tag))
      return bad("invalid tag \"" + r.tag + "\" (letters, digits, '_', '.', '-'; at most 128)");
  }
  if (rest.empty()) return bad("no repository name");
  size_t start = 0;
  while (true) {
    size_t end = rest.find('/', start);
    std::string comp = rest.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!validComponent(comp)) {
      for (char c : comp) {
        if (std::isupper(static_cast<unsigned char>(c))) return bad("repository name must be lowercase");
      }
      return bad("invalid repository path component \"" + comp + "\"");
    }
    if (end == std::string::npos) break;
    start = end + 1;
  }
  if (r.registry == kDockerHub && rest.find('/') == std::string::npos) rest = "library/" + rest;
  r.repository = rest;
  if (r.tag.empty() && r.digest.empty()) r.tag = "latest";
  return r;
}

std::string writtenRepository(const std::string& image) {
  std::string s = image;
  size_t at = s.find('@');
  if (at != std::string::npos) s = s.substr(0, at);
  size_t slash = s.rfind('/');
  size_t colon = s.rfind(':');
  if (colon != std::string::npos && (slash == std::string::npos || colon > slash)) s = s.substr(0, colon);
  return s;
}

std::string registryOf(const std::string& image) {
  // Docker's rule: the first component is a registry host when it has a '.'
  // or a ':' or is "localhost"; otherwise the image is on Docker Hub.
  std::string s = image.substr(0, image.find('@'));
  size_t slash = s.find('/');
  if (slash == std::string::npos) return "docker.io";
  std::string first = s.substr(0, slash);
  if (first.find('.') != std::string::npos || first.find(':') != std::string::npos || first == "localhost") {
    return first;
  }
  return "docker.io";
}

bool hasDigest(const std::string& image) {
  return image.find('@') != std::string::npos;
}

}  // namespace knap::oci
