// ACME (RFC 8555) message signing, the building blocks of knap's built-in
// ACME client (issue 14): the account key (ECDSA P-256, JWS alg ES256), its
// JWK and RFC 7638 thumbprint, the HTTP-01 key authorization (RFC 8555
// §8.1), requests as JWS in flattened JSON serialization (RFC 7515 §7.2.2,
// RFC 8555 §6.2) and the certificate signing request of an order (§7.4).
//
// Errors are Status values naming what is wrong; key text never appears in
// them. Thread safety: an AccountKey is immutable; share it freely.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

struct evp_pkey_st;  // OpenSSL's EVP_PKEY

namespace knap::acme {

class AccountKey {
 public:
  static StatusOr<AccountKey> generate();  // a new P-256 key
  // An unencrypted PEM P-256 private key (what pem() writes).
  static StatusOr<AccountKey> fromPem(const std::string& pem);

  std::string pem() const;         // PKCS#8 PEM, for <data-dir>/acme/account.key
  nlohmann::json jwk() const;      // {"crv":"P-256","kty":"EC","x":...,"y":...}
  std::string thumbprint() const;  // base64url(SHA-256 of the JWK's members in lexicographic order, RFC 7638)
  // ES256 over `data`: the raw 64-byte r||s (RFC 7518 §3.4), not DER.
  StatusOr<std::string> sign(std::string_view data) const;
  evp_pkey_st* native() const { return key_.get(); }

 private:
  explicit AccountKey(std::shared_ptr<evp_pkey_st> key) : key_(std::move(key)) {}
  std::shared_ptr<evp_pkey_st> key_;
};

// token "." thumbprint: the body of /.well-known/acme-challenge/<token>.
std::string keyAuthorization(const std::string& token, const AccountKey& key);

// A request body: protected header {"alg":"ES256","nonce","url"} with "jwk"
// when `kid` is empty (newAccount, revokeCert by key) or "kid" (the account
// URL) otherwise; `payload` nullopt = POST-as-GET (an empty payload, §6.3).
StatusOr<nlohmann::json> signRequest(const AccountKey& key, const std::string& url, const std::string& nonce,
                                     const std::string& kid, const std::optional<nlohmann::json>& payload);

// A CSR (DER, base64url as newOrder's finalize wants it) for `hosts`, all
// in subjectAltName (the first also as CN), signed by `key` (the
// certificate's own key, not the account's).
StatusOr<std::string> makeCsr(const AccountKey& key, const std::vector<std::string>& hosts);

}  // namespace knap::acme
