#include "common/tls.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <ctime>

#include "common/string_util.h"

namespace knap::tls {

namespace {

// OpenSSL's own CRYPTO_malloc / CRYPTO_realloc / CRYPTO_free semantics
// (0 bytes: null; realloc of null: malloc; realloc to 0: free), without
// a call into the allocator for a null free.
void* opensslMalloc(size_t n, const char*, int) {
  return n == 0 ? nullptr : std::malloc(n);
}
void opensslFree(void* p, const char*, int) {
  if (p != nullptr) std::free(p);
}
void* opensslRealloc(void* p, size_t n, const char* file, int line) {
  if (p == nullptr) return opensslMalloc(n, file, line);
  if (n == 0) {
    opensslFree(p, file, line);
    return nullptr;
  }
  return std::realloc(p, n);
}

}  // namespace

bool installOpenSslAllocator() {
  return CRYPTO_set_mem_functions(opensslMalloc, opensslRealloc, opensslFree) == 1;
}

namespace {

// Mozilla's "intermediate" TLS 1.2 list: ECDHE, AEAD only.
constexpr const char* kTls12Ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

std::string opensslError() {
  std::string out;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof buf);
    if (!out.empty()) out += "; ";
    out += buf;
  }
  return out.empty() ? "unknown OpenSSL error" : out;
}

// A DNS name as a certificate may carry it: labels of [a-z0-9-_], a leading
// "*." allowed, no empty label. Anything else (IP SANs are not dNSName)
// is ignored rather than served.
bool plausibleDnsName(const std::string& n) {
  if (n.empty() || n.size() > 253) return false;
  size_t start = n.rfind("*.", 0) == 0 ? 2 : 0;
  if (start == n.size()) return false;
  size_t label = 0;
  for (size_t i = start; i < n.size(); ++i) {
    const char c = n[i];
    if (c == '.') {
      if (label == 0) return false;
      label = 0;
      continue;
    }
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')) return false;
    if (++label > 63) return false;
  }
  return label > 0;
}

std::vector<std::string> dnsNames(X509* leaf) {
  std::vector<std::string> out;
  auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(leaf, NID_subject_alt_name, nullptr, nullptr));
  if (sans != nullptr) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* g = sk_GENERAL_NAME_value(sans, i);
      if (g->type != GEN_DNS) continue;
      const ASN1_IA5STRING* s = g->d.dNSName;
      std::string n = asciiLower(std::string(reinterpret_cast<const char*>(ASN1_STRING_get0_data(s)),
                                             static_cast<size_t>(ASN1_STRING_length(s))));
      if (plausibleDnsName(n)) out.push_back(n);
    }
    GENERAL_NAMES_free(sans);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }
  char cn[256];
  const int len = X509_NAME_get_text_by_NID(X509_get_subject_name(leaf), NID_commonName, cn, sizeof cn);
  if (len > 0) {
    std::string n = asciiLower(std::string(cn, static_cast<size_t>(len)));
    if (plausibleDnsName(n)) out.push_back(n);
  }
  return out;
}

}  // namespace

void SslCtxFree::operator()(ssl_ctx_st* ctx) const {
  SSL_CTX_free(ctx);
}

Status applyServerPolicy(SSL_CTX* ctx) {
  if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
    return internalError("TLS: cannot set the minimum protocol version: " + opensslError());
  }
  SSL_CTX_set_options(
      ctx, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION | SSL_OP_SINGLE_DH_USE | SSL_OP_SINGLE_ECDH_USE);
  if (SSL_CTX_set_cipher_list(ctx, kTls12Ciphers) != 1) {
    return internalError("TLS: cannot set the cipher list: " + opensslError());
  }
  // One session ID context for every server context: the router's listener
  // context checks a resumed session before its SNI callback switches to a
  // certificate's context, under which the session was made. (Resuming
  // under another host is refused by OpenSSL's SNI check.)
  static const unsigned char kSessionContext[] = "knap";
  if (SSL_CTX_set_session_id_context(ctx, kSessionContext, sizeof kSessionContext - 1) != 1) {
    return internalError("TLS: cannot set the session ID context: " + opensslError());
  }
  return Status::ok();
}

StatusOr<ServerCertificate> loadServerCertificate(const std::string& chain_pem, const std::string& key_pem,
                                                  const std::string& what) {
  ERR_clear_error();
  if (chain_pem.empty()) return invalidArgument(what + ": the certificate is empty");
  if (key_pem.empty()) return invalidArgument(what + ": the private key is empty");
  SslCtxPtr ctx(SSL_CTX_new(TLS_server_method()), SslCtxFree());
  if (!ctx) return internalError(what + ": SSL_CTX_new: " + opensslError());
  KNAP_RETURN_IF_ERROR(applyServerPolicy(ctx.get()));

  std::unique_ptr<BIO, decltype(&BIO_free)> bio(
      BIO_new_mem_buf(chain_pem.data(), static_cast<int>(chain_pem.size())), &BIO_free);
  X509* leaf = PEM_read_bio_X509_AUX(bio.get(), nullptr, nullptr, nullptr);
  if (leaf == nullptr) return invalidArgument(what + ": no PEM certificate: " + opensslError());
  std::unique_ptr<X509, decltype(&X509_free)> leaf_owner(leaf, &X509_free);
  if (SSL_CTX_use_certificate(ctx.get(), leaf) != 1) {
    return invalidArgument(what + ": the certificate cannot be used: " + opensslError());
  }
  // The rest of the chain: intermediates, in order.
  for (;;) {
    X509* ca = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
    if (ca == nullptr) break;
    if (SSL_CTX_add0_chain_cert(ctx.get(), ca) != 1) {
      X509_free(ca);
      return invalidArgument(what + ": a chain certificate cannot be used: " + opensslError());
    }
  }
  ERR_clear_error();  // the loop ends on "no start line"

  std::unique_ptr<BIO, decltype(&BIO_free)> kbio(
      BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size())), &BIO_free);
  EVP_PKEY* key = PEM_read_bio_PrivateKey(kbio.get(), nullptr, nullptr, nullptr);
  if (key == nullptr) {
    ERR_clear_error();
    return invalidArgument(what + ": the private key is not an unencrypted PEM key");
  }
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key_owner(key, &EVP_PKEY_free);
  if (SSL_CTX_use_PrivateKey(ctx.get(), key) != 1 || SSL_CTX_check_private_key(ctx.get()) != 1) {
    ERR_clear_error();
    return invalidArgument(what + ": the private key does not match the certificate");
  }
  ServerCertificate out;
  out.names = dnsNames(leaf);
  if (out.names.empty()) {
    return invalidArgument(what + ": the certificate names no DNS host (no subjectAltName dNSName)");
  }
  const ASN1_TIME* na = X509_get0_notAfter(leaf);
  struct tm tm {};
  if (na != nullptr && ASN1_TIME_to_tm(na, &tm) == 1) out.not_after = static_cast<int64_t>(timegm(&tm));
  out.ctx = std::move(ctx);
  return out;
}

bool nameCovers(const std::string& name, const std::string& host) {
  if (name.rfind("*.", 0) != 0) return name == host;
  const size_t dot = host.find('.');
  if (dot == std::string::npos || dot == 0) return false;
  return host.compare(dot + 1, std::string::npos, name, 2, std::string::npos) == 0;
}

}  // namespace knap::tls
