#include "api/server/service_account_token.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/base64.h"

namespace knap::api {

using nlohmann::json;

namespace {

constexpr size_t kKeyBytes = 32;
constexpr int64_t kLeewaySeconds = 60;
constexpr int64_t kMaxTokenSeconds = int64_t{1} << 32;  // Kubernetes' upper bound
// The longest lifetime knapd issues (kube-apiserver's
// --service-account-max-token-expiration): a longer expirationSeconds (valid
// up to 2^32 s, as in Kubernetes) is clamped to this, not refused.
constexpr int64_t kMaxIssuedTokenSeconds = 48 * 3600;
constexpr size_t kMaxTokenBytes = 16 * 1024;

}  // namespace

StatusOr<ServiceAccountTokens> ServiceAccountTokens::loadOrCreate(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0 && errno == ENOENT) {
    unsigned char key[kKeyBytes];
    if (RAND_bytes(key, sizeof key) != 1) return internalError("no randomness for the service account key");
    // Written aside, then link()ed into place: two processes creating it at
    // once both end up reading the one that won.
    std::string tmp = path + ".tmp." + std::to_string(::getpid());
    int w = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (w < 0) return internalError("create " + tmp + ": " + std::strerror(errno));
    bool ok = ::write(w, key, sizeof key) == static_cast<ssize_t>(sizeof key) && ::fsync(w) == 0;
    ::close(w);
    if (!ok || (::link(tmp.c_str(), path.c_str()) != 0 && errno != EEXIST)) {
      int e = errno;
      ::unlink(tmp.c_str());
      return internalError("write " + path + ": " + std::strerror(e));
    }
    ::unlink(tmp.c_str());
    OPENSSL_cleanse(key, sizeof key);
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  }
  if (fd < 0) return internalError("open " + path + ": " + std::strerror(errno));
  char buf[kKeyBytes + 1];
  ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  if (n != static_cast<ssize_t>(kKeyBytes)) {
    return invalidArgument(path + ": a service account key is exactly " + std::to_string(kKeyBytes) +
                           " bytes; delete the file to make a new one (revokes every token issued)");
  }
  ServiceAccountTokens t(std::string(buf, kKeyBytes));
  OPENSSL_cleanse(buf, sizeof buf);
  return t;
}

ServiceAccountTokens ServiceAccountTokens::withKey(std::string key) {
  return ServiceAccountTokens(std::move(key));
}

std::string ServiceAccountTokens::sign(const std::string& data) const {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, &len);
  return std::string(reinterpret_cast<char*>(mac), len);
}

StatusOr<std::string> ServiceAccountTokens::issue(const std::string& ns, const std::string& service_account,
                                                  const std::string& audience, int64_t expiration_seconds,
                                                  int64_t now) const {
  if (ns.empty() || service_account.empty())
    return invalidArgument("service account token: namespace and name required");
  if (expiration_seconds < kMinTokenSeconds || expiration_seconds > kMaxTokenSeconds) {
    return invalidArgument("serviceAccountToken.expirationSeconds: must be in [600, 4294967296], got " +
                           std::to_string(expiration_seconds));
  }
  expiration_seconds = std::min(expiration_seconds, kMaxIssuedTokenSeconds);
  const int64_t window = expiration_seconds * 4 / 5;
  const int64_t iat = now - now % window;
  json header = {{"alg", "HS256"}, {"typ", "JWT"}};
  json claims = {{"iss", kTokenIssuer},
                 {"sub", "system:serviceaccount:" + ns + ":" + service_account},
                 {"aud", json::array({audience.empty() ? std::string(kApiAudience) : audience})},
                 {"iat", iat},
                 {"nbf", iat},
                 {"exp", iat + expiration_seconds},
                 {"kubernetes.io", {{"namespace", ns}, {"serviceaccount", {{"name", service_account}}}}}};
  std::string data = base64UrlEncode(header.dump()) + "." + base64UrlEncode(claims.dump());
  return data + "." + base64UrlEncode(sign(data));
}

StatusOr<ServiceAccountIdentity> ServiceAccountTokens::verify(const std::string& token,
                                                              const std::string& audience,
                                                              int64_t now) const {
  if (token.size() > kMaxTokenBytes) return unauthenticated("token too long");
  size_t a = token.find('.');
  size_t b = a == std::string::npos ? a : token.find('.', a + 1);
  if (b == std::string::npos || token.find('.', b + 1) != std::string::npos) {
    return unauthenticated("not a JWT (header.claims.signature)");
  }
  std::string sig;
  if (!base64UrlDecode(token.substr(b + 1), &sig)) return unauthenticated("bad signature encoding");
  std::string want = sign(token.substr(0, b));
  if (sig.size() != want.size() || CRYPTO_memcmp(sig.data(), want.data(), want.size()) != 0) {
    return unauthenticated("signature does not match knap's service account key");
  }
  std::string header_text, claims_text;
  if (!base64UrlDecode(token.substr(0, a), &header_text) ||
      !base64UrlDecode(token.substr(a + 1, b - a - 1), &claims_text)) {
    return unauthenticated("bad JWT encoding");
  }
  json header = json::parse(header_text, nullptr, false);
  json claims = json::parse(claims_text, nullptr, false);
  if (!header.is_object() || header.value("alg", "") != "HS256")
    return unauthenticated("unexpected JWT algorithm");
  if (!claims.is_object() || claims.value("iss", "") != kTokenIssuer)
    return unauthenticated("not issued by knap");
  auto num = [&](const char* k) -> std::optional<int64_t> {
    auto it = claims.find(k);
    if (it == claims.end() || !it->is_number_integer()) return std::nullopt;
    return it->get<int64_t>();
  };
  auto nbf = num("nbf"), exp = num("exp");
  if (!nbf || !exp) return unauthenticated("token has no nbf/exp");
  if (now + kLeewaySeconds < *nbf) return unauthenticated("token not valid yet");
  if (now - kLeewaySeconds >= *exp) return unauthenticated("token expired");
  bool aud_ok = false;
  if (auto it = claims.find("aud"); it != claims.end() && it->is_array()) {
    for (const auto& x : *it) aud_ok = aud_ok || (x.is_string() && x.get<std::string>() == audience);
  }
  if (!aud_ok) return unauthenticated("token is not for audience \"" + audience + "\"");
  ServiceAccountIdentity id;
  try {
    const json& k = claims.at("kubernetes.io");
    id.ns = k.at("namespace").get<std::string>();
    id.name = k.at("serviceaccount").at("name").get<std::string>();
  } catch (...) {
    return unauthenticated("token names no service account");
  }
  if (claims.value("sub", "") != id.user())
    return unauthenticated("token subject does not match its service account");
  return id;
}

}  // namespace knap::api
