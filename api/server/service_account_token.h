// ServiceAccountTokens: the tokens knapd puts in projected
// serviceAccountToken volumes, and their verification.
//
// A token is a JWT (RFC 7519) signed with HMAC-SHA256 (HS256) under a 32-byte
// key kept 0600 in <data dir>/service-account.key (created on first use;
// delete it to revoke every token issued so far). Claims, as Kubernetes'
// bound service account tokens have them:
//   iss "knap", sub "system:serviceaccount:<ns>:<sa>", aud [audience],
//   iat, nbf, exp = iat + expirationSeconds,
//   kubernetes.io: {namespace, serviceaccount: {name}}.
// iat is the issue time rounded down to a multiple of 4/5 of the lifetime,
// so that a pod's volume, refreshed every few seconds, changes only when the
// kubelet would rotate the token (after 80% of its life) and every token
// still has at least a fifth of its lifetime left when it is written.
//
// verify() accepts a token of this key whose signature, nbf/exp window (60 s
// leeway) and audience check out, and names its service account. Knap has no
// ServiceAccount objects: every name in every namespace is valid, and
// "default" is what a Revision without serviceAccountName runs as.
//
// Thread-safe: immutable after construction.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/status.h"

namespace knap::api {

inline constexpr const char* kTokenIssuer = "knap";
// The audience of a token whose projection names none (Kubernetes: the API
// server's own audience).
inline constexpr const char* kApiAudience = "https://kubernetes.default.svc";
inline constexpr int64_t kMinTokenSeconds = 600;  // Kubernetes' minimum expirationSeconds
inline constexpr int64_t kDefaultTokenSeconds = 3600;

struct ServiceAccountIdentity {
  std::string ns;
  std::string name;
  std::string user() const { return "system:serviceaccount:" + ns + ":" + name; }
};

class ServiceAccountTokens {
 public:
  // Reads the key at `path`, or creates it (0600, random) when missing.
  // A key file of the wrong size is an error (never silently replaced).
  static StatusOr<ServiceAccountTokens> loadOrCreate(const std::string& path);
  // For tests.
  static ServiceAccountTokens withKey(std::string key);

  // A token for `ns`/`service_account` with `audience` ("" = kApiAudience),
  // valid for `expiration_seconds` (at least kMinTokenSeconds), at time `now`
  // (seconds since the epoch).
  StatusOr<std::string> issue(const std::string& ns, const std::string& service_account,
                              const std::string& audience, int64_t expiration_seconds, int64_t now) const;
  // The service account of a valid token for `audience` at `now`, or an error
  // saying why not (kUnauthenticated).
  StatusOr<ServiceAccountIdentity> verify(const std::string& token, const std::string& audience,
                                          int64_t now) const;

 private:
  explicit ServiceAccountTokens(std::string key) : key_(std::move(key)) {}
  std::string sign(const std::string& data) const;
  std::string key_;
};

}  // namespace knap::api
