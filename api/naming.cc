#include "api/naming.h"

#include <openssl/evp.h>

#include <cstdio>

namespace knap::api {
namespace {

constexpr size_t kMd5HexLength = 32;
constexpr size_t kChildNameHead = kMaxNameLength - kMd5HexLength;  // 31
constexpr size_t kRandomSuffixLength = 5;
constexpr std::string_view kRandomAlphabet = "bcdfghjklmnpqrstvwxz2456789";

bool isLowerAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}
bool isAlnum(char c) {
  return isLowerAlnum(c) || (c >= 'A' && c <= 'Z');
}

}  // namespace

std::string md5Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), digest, &len, EVP_md5(), nullptr);
  static const char* kHex = "0123456789abcdef";
  std::string out;
  out.reserve(len * 2);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(kHex[digest[i] >> 4]);
    out.push_back(kHex[digest[i] & 0xf]);
  }
  return out;
}

std::string childName(const std::string& parent, const std::string& suffix) {
  if (parent.size() + suffix.size() <= kMaxNameLength) return parent + suffix;
  if (suffix.size() >= kChildNameHead) {
    // The suffix leaves no room for parent+hash: hash everything (knative/pkg).
    std::string ret = parent.substr(0, kChildNameHead) + md5Hex(parent + suffix);
    if (ret.size() < kMaxNameLength) ret += suffix.substr(0, kMaxNameLength - ret.size());
    while (!ret.empty() && !isAlnum(ret.back())) ret.pop_back();
    return ret;
  }
  return parent.substr(0, kChildNameHead - suffix.size()) + md5Hex(parent) + suffix;
}

std::string revisionName(const std::string& config_name, int64_t generation) {
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, "-%05lld", static_cast<long long>(generation));
  return childName(config_name, suffix);
}

bool isDns1123Label(std::string_view s) {
  if (s.empty() || s.size() > kMaxNameLength) return false;
  for (char c : s) {
    if (!isLowerAlnum(c) && c != '-') return false;
  }
  return isLowerAlnum(s.front()) && isLowerAlnum(s.back());
}

bool isDns1035Label(std::string_view s) {
  return isDns1123Label(s) && s.front() >= 'a' && s.front() <= 'z';
}

bool isDns1123Subdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  size_t start = 0;
  while (true) {
    size_t dot = s.find('.', start);
    std::string_view label =
        s.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start);
    // Subdomain labels are not limited to 63 individually by Kubernetes' regexp; keep the char rules.
    if (label.empty() || !isLowerAlnum(label.front()) || !isLowerAlnum(label.back())) return false;
    for (char c : label) {
      if (!isLowerAlnum(c) && c != '-') return false;
    }
    if (dot == std::string_view::npos) return true;
    start = dot + 1;
  }
}

bool isQualifiedName(std::string_view s) {
  std::string_view name = s;
  size_t slash = s.find('/');
  if (slash != std::string_view::npos) {
    if (s.find('/', slash + 1) != std::string_view::npos) return false;
    if (!isDns1123Subdomain(s.substr(0, slash))) return false;
    name = s.substr(slash + 1);
  }
  if (name.empty() || name.size() > kMaxNameLength) return false;
  if (!isAlnum(name.front()) || !isAlnum(name.back())) return false;
  for (char c : name) {
    if (!isAlnum(c) && c != '-' && c != '_' && c != '.') return false;
  }
  return true;
}

bool isDns1035Prefix(std::string_view s) {
  if (s.empty()) return false;
  std::string candidate(s);
  // Kubernetes validates the prefix as if a suffix char were appended (maskTrailingDash).
  if (candidate.size() > 1 && candidate.back() == '-') candidate.back() = 'a';
  return isDns1035Label(candidate);
}

std::string generateNameSuffix(std::string prefix, std::mt19937& rng) {
  if (prefix.size() > kMaxNameLength - kRandomSuffixLength)
    prefix.resize(kMaxNameLength - kRandomSuffixLength);
  std::uniform_int_distribution<size_t> pick(0, kRandomAlphabet.size() - 1);
  for (size_t i = 0; i < kRandomSuffixLength; ++i) prefix.push_back(kRandomAlphabet[pick(rng)]);
  return prefix;
}

}  // namespace knap::api

namespace knap::api {

bool isValidImageReference(std::string_view ref, std::string* why) {
  auto fail = [&](std::string msg) {
    if (why) *why = std::move(msg);
    return false;
  };
  if (ref.empty()) return fail("empty image reference");
  std::string_view rest = ref;
  if (size_t at = rest.find('@'); at != std::string_view::npos) {
    std::string_view digest = rest.substr(at + 1);
    rest = rest.substr(0, at);
    size_t colon = digest.find(':');
    if (colon == std::string_view::npos || colon == 0)
      return fail("invalid digest \"" + std::string(digest) + "\"");
    std::string_view algo = digest.substr(0, colon), hex = digest.substr(colon + 1);
    if (algo == "sha256" && hex.size() != 64) return fail("sha256 digest must have 64 hex characters");
    if (hex.size() < 32) return fail("digest too short");
    for (char c : hex) {
      if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return fail("digest must be lower-case hex");
    }
  }
  size_t last_slash = rest.rfind('/');
  size_t colon = rest.rfind(':');
  if (colon != std::string_view::npos && (last_slash == std::string_view::npos || colon > last_slash)) {
    std::string_view tag = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
    if (tag.empty() || tag.size() > 128) return fail("tag must be 1-128 characters");
    auto word = [](char c) { return isAlnum(c) || c == '_'; };
    if (!word(tag[0])) return fail("tag must start with a letter, digit or '_'");
    for (char c : tag) {
      if (!word(c) && c != '.' && c != '-')
        return fail("invalid character '" + std::string(1, c) + "' in tag");
    }
  }
  if (rest.empty()) return fail("missing repository");
  // Split off the registry: the first component when it has '.' or ':' or is "localhost".
  size_t first_slash = rest.find('/');
  if (first_slash != std::string_view::npos) {
    std::string_view first = rest.substr(0, first_slash);
    if (first.find('.') != std::string_view::npos || first.find(':') != std::string_view::npos ||
        first == "localhost") {
      for (char c : first) {
        if (!isAlnum(c) && c != '.' && c != '-' && c != ':')
          return fail("invalid registry \"" + std::string(first) + "\"");
      }
      rest = rest.substr(first_slash + 1);
    }
  }
  if (rest.empty() || rest.size() > 255) return fail("repository must be 1-255 characters");
  size_t start = 0;
  while (start <= rest.size()) {
    size_t slash = rest.find('/', start);
    std::string_view comp =
        rest.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (comp.empty()) return fail("empty path component in repository");
    if (!isLowerAlnum(comp.front()) || !isLowerAlnum(comp.back())) {
      return fail("repository component \"" + std::string(comp) +
                  "\" must start and end with a lower-case letter or digit");
    }
    for (char c : comp) {
      if (!isLowerAlnum(c) && c != '.' && c != '_' && c != '-') {
        return fail(
            "repository can only contain the characters `abcdefghijklmnopqrstuvwxyz0123456789_-./`: " +
            std::string(rest));
      }
    }
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  return true;
}

}  // namespace knap::api
