#include "acme/jws.h"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "common/base64.h"

namespace knap::acme {

namespace {

using nlohmann::json;

struct PkeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

std::string bioText(BIO* b) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(b, &data);
  return std::string(data, static_cast<size_t>(n));
}

// A big number as exactly `len` big-endian bytes (JWK coordinates and
// signature halves are fixed-size, RFC 7518 §6.2.1.2, §3.4).
std::string fixedBytes(const BIGNUM* bn, size_t len) {
  std::string out(len, '\0');
  BN_bn2binpad(bn, reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(len));
  return out;
}

bool isP256(EVP_PKEY* k) {
  if (EVP_PKEY_get_base_id(k) != EVP_PKEY_EC) return false;
  char group[64] = {0};
  size_t len = 0;
  if (EVP_PKEY_get_utf8_string_param(k, OSSL_PKEY_PARAM_GROUP_NAME, group, sizeof group, &len) != 1)
    return false;
  return std::string(group) == "prime256v1" || std::string(group) == "P-256";
}

}  // namespace

StatusOr<AccountKey> AccountKey::generate() {
  EVP_PKEY* k = EVP_EC_gen("P-256");
  if (k == nullptr) {
    ERR_clear_error();
    return internalError("ACME: cannot generate a P-256 key");
  }
  return AccountKey(std::shared_ptr<EVP_PKEY>(k, PkeyFree()));
}

StatusOr<AccountKey> AccountKey::fromPem(const std::string& pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())),
                                                &BIO_free);
  EVP_PKEY* k = PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr);
  ERR_clear_error();
  if (k == nullptr) return invalidArgument("ACME key: not an unencrypted PEM private key");
  std::shared_ptr<EVP_PKEY> owned(k, PkeyFree());
  if (!isP256(k)) return invalidArgument("ACME key: not an ECDSA P-256 key (ES256 is what knap signs with)");
  return AccountKey(std::move(owned));
}

std::string AccountKey::pem() const {
  std::unique_ptr<BIO, decltype(&BIO_free)> b(BIO_new(BIO_s_mem()), &BIO_free);
  PEM_write_bio_PrivateKey(b.get(), key_.get(), nullptr, nullptr, 0, nullptr, nullptr);
  return bioText(b.get());
}

json AccountKey::jwk() const {
  BIGNUM* x = nullptr;
  BIGNUM* y = nullptr;
  EVP_PKEY_get_bn_param(key_.get(), OSSL_PKEY_PARAM_EC_PUB_X, &x);
  EVP_PKEY_get_bn_param(key_.get(), OSSL_PKEY_PARAM_EC_PUB_Y, &y);
  json out = {{"crv", "P-256"},
              {"kty", "EC"},
              {"x", base64UrlEncode(fixedBytes(x, 32))},
              {"y", base64UrlEncode(fixedBytes(y, 32))}};
  BN_free(x);
  BN_free(y);
  return out;
}

std::string AccountKey::thumbprint() const {
  // nlohmann::json objects are std::map-ordered: dump() is the RFC 7638
  // form (members in lexicographic order, no whitespace).
  const std::string canonical = jwk().dump();
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(canonical.data(), canonical.size(), md, &len, EVP_sha256(), nullptr);
  return base64UrlEncode(std::string_view(reinterpret_cast<const char*>(md), len));
}

StatusOr<std::string> AccountKey::sign(std::string_view data) const {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  size_t len = 0;
  if (EVP_DigestSignInit(ctx.get(), nullptr, EVP_sha256(), nullptr, key_.get()) != 1 ||
      EVP_DigestSign(ctx.get(), nullptr, &len, reinterpret_cast<const unsigned char*>(data.data()),
                     data.size()) != 1) {
    ERR_clear_error();
    return internalError("ACME: ES256 signing failed");
  }
  std::string der(len, '\0');
  if (EVP_DigestSign(ctx.get(), reinterpret_cast<unsigned char*>(der.data()), &len,
                     reinterpret_cast<const unsigned char*>(data.data()), data.size()) != 1) {
    ERR_clear_error();
    return internalError("ACME: ES256 signing failed");
  }
  const unsigned char* p = reinterpret_cast<const unsigned char*>(der.data());
  ECDSA_SIG* sig = d2i_ECDSA_SIG(nullptr, &p, static_cast<long>(len));
  if (sig == nullptr) return internalError("ACME: OpenSSL returned an unreadable ECDSA signature");
  const BIGNUM* r = nullptr;
  const BIGNUM* s = nullptr;
  ECDSA_SIG_get0(sig, &r, &s);
  std::string out = fixedBytes(r, 32) + fixedBytes(s, 32);
  ECDSA_SIG_free(sig);
  return out;
}

std::string keyAuthorization(const std::string& token, const AccountKey& key) {
  return token + "." + key.thumbprint();
}

StatusOr<json> signRequest(const AccountKey& key, const std::string& url, const std::string& nonce,
                           const std::string& kid, const std::optional<json>& payload) {
  if (url.empty()) return invalidArgument("ACME request: empty url");
  if (nonce.empty()) return invalidArgument("ACME request: no replay nonce");
  json header = {{"alg", "ES256"}, {"nonce", nonce}, {"url", url}};
  if (kid.empty()) {
    header["jwk"] = key.jwk();
  } else {
    header["kid"] = kid;
  }
  const std::string protected64 = base64UrlEncode(header.dump());
  const std::string payload64 = payload ? base64UrlEncode(payload->dump()) : "";
  KNAP_ASSIGN_OR_RETURN(std::string sig, key.sign(protected64 + "." + payload64));
  return json{{"protected", protected64}, {"payload", payload64}, {"signature", base64UrlEncode(sig)}};
}

StatusOr<std::string> makeCsr(const AccountKey& key, const std::vector<std::string>& hosts) {
  if (hosts.empty()) return invalidArgument("CSR: no host names");
  std::string san;
  for (const std::string& h : hosts) {
    if (h.empty() || h.size() > 253 || h.find_first_of(",:= \t\r\n") != std::string::npos) {
      return invalidArgument("CSR: \"" + h + "\" is not a DNS name");
    }
    san += (san.empty() ? "DNS:" : ",DNS:") + h;
  }
  std::unique_ptr<X509_REQ, decltype(&X509_REQ_free)> req(X509_REQ_new(), &X509_REQ_free);
  X509_REQ_set_version(req.get(), 0);
  X509_NAME* name = X509_REQ_get_subject_name(req.get());
  if (hosts[0].size() <= 64) {
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>(hosts[0].c_str()), -1, -1, 0);
  }
  X509_REQ_set_pubkey(req.get(), key.native());
  STACK_OF(X509_EXTENSION)* exts = sk_X509_EXTENSION_new_null();
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, nullptr, NID_subject_alt_name, san.c_str());
  if (ext == nullptr) {
    sk_X509_EXTENSION_free(exts);
    ERR_clear_error();
    return invalidArgument("CSR: cannot encode subjectAltName " + san);
  }
  sk_X509_EXTENSION_push(exts, ext);
  X509_REQ_add_extensions(req.get(), exts);
  sk_X509_EXTENSION_pop_free(exts, X509_EXTENSION_free);
  if (X509_REQ_sign(req.get(), key.native(), EVP_sha256()) <= 0) {
    ERR_clear_error();
    return internalError("CSR: signing failed");
  }
  unsigned char* der = nullptr;
  const int len = i2d_X509_REQ(req.get(), &der);
  if (len <= 0) return internalError("CSR: cannot encode");
  std::string out(reinterpret_cast<const char*>(der), static_cast<size_t>(len));
  OPENSSL_free(der);
  return base64UrlEncode(out);
}

}  // namespace knap::acme
