// TLS server contexts shared by knap's listeners (the API server's and the
// router's HTTPS listener): one policy and one way to load a certificate.
//
// Policy (applyServerPolicy): TLS 1.2 and 1.3 only; for TLS 1.2 only ECDHE
// key exchange with AEAD ciphers (AES-GCM, ChaCha20-Poly1305: Mozilla's
// "intermediate" list); no compression, no renegotiation. TLS 1.3 keeps
// OpenSSL's default suites (all AEAD).
//
// loadServerCertificate() builds a context for one certificate chain and
// key (PEM texts), checks that the key belongs to the leaf, and reads the
// DNS names the leaf is for (subjectAltName dNSName entries; the subject CN
// only when there is no SAN extension, as browsers no longer do, but some
// test certificates still rely on it). Errors name what is wrong with the
// PEM; the key's text never appears in them.
//
// Thread safety: the functions are reentrant; an SSL_CTX is shared
// read-only by any number of connections once built.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

struct ssl_ctx_st;  // OpenSSL's SSL_CTX

namespace knap::tls {

// Releases with SSL_CTX_free.
struct SslCtxFree {
  void operator()(ssl_ctx_st* ctx) const;
};
using SslCtxPtr = std::shared_ptr<ssl_ctx_st>;

// Applies the policy above to a server context.
Status applyServerPolicy(ssl_ctx_st* ctx);

struct ServerCertificate {
  SslCtxPtr ctx;                   // a server context with the chain and key, policy applied
  std::vector<std::string> names;  // lower-case DNS names ("*.example.com" for wildcards)
  int64_t not_after = 0;           // the leaf's expiry, seconds since the epoch
};

// `what` names the source in errors ("file /etc/knap/tls/a.crt", "Secret ns/name").
StatusOr<ServerCertificate> loadServerCertificate(const std::string& chain_pem, const std::string& key_pem,
                                                  const std::string& what);

// Gives OpenSSL knap's allocator hooks: the process's malloc/realloc/free,
// with free(NULL) answered before it reaches the allocator. OpenSSL 3's
// ERR_clear_error, which Asio's TLS engine calls before every SSL_read and
// SSL_write, frees 32 null pointers each time: cheap in glibc's free, but
// about 3,500 instructions per proxied HTTPS request through tcmalloc's
// (meson -Dtcmalloc=enabled; bench/router/bench_instructions.sh). Call
// first thing in main(), before anything uses OpenSSL: once OpenSSL has
// allocated, the hooks cannot be changed (returns false, and OpenSSL's own
// functions stay).
bool installOpenSslAllocator();

// Whether `name` (a certificate DNS name, possibly "*.parent") covers the
// host `host` (lower case, no port). A wildcard covers exactly one label.
bool nameCovers(const std::string& name, const std::string& host);

}  // namespace knap::tls
