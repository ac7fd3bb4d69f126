// CertTable: the certificates of the router's HTTPS listener, chosen by the
// TLS SNI host name. An immutable snapshot (like RoutingTable): the router
// swaps in a new one and the next handshake uses it; connections already
// established keep the context they were given.
//
// Lookup is two hash-map probes, O(1) in the number of certificates: the
// exact host, then the wildcard `*.parent` for the host minus its first
// label (a wildcard covers exactly one label, RFC 6125). Host names are
// compared lower-case, without a trailing dot.
//
// Entries are added in priority order; the first entry for a name wins and
// the later ones are reported by build() in `shadowed` (the daemon logs
// them), so two sources naming one host is visible, not silent.
//
// Thread safety: immutable after build(); lookup() from any thread.
#pragma once

#include <openssl/ssl.h>

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/tls.h"

namespace knap::router {

struct CertEntry {
  std::string name;    // "host.example.com" or "*.example.com"
  tls::SslCtxPtr ctx;  // the certificate's server context
  std::string origin;  // for logs and errors: "file /etc/knap/tls/a.crt", "Secret ns/name"
};

class CertTable {
 public:
  static std::shared_ptr<const CertTable> empty();
  // `shadowed` (optional) gets one line per entry dropped because an
  // earlier entry has the same name.
  static std::shared_ptr<const CertTable> build(std::vector<CertEntry> entries,
                                                std::vector<std::string>* shadowed = nullptr);

  // The entry serving `host` (SNI value), or nullptr.
  const CertEntry* lookup(std::string_view host) const;
  size_t size() const { return exact_.size() + wildcard_.size(); }
  // Every entry's server context (a context serving several names once per name).
  std::vector<SSL_CTX*> contexts() const;
  // Whether some certificate covers `host` (a Host header: a port is ignored).
  bool covers(std::string_view host) const;

 private:
  std::unordered_map<std::string, CertEntry> exact_;     // host -> entry
  std::unordered_map<std::string, CertEntry> wildcard_;  // parent ("example.com" for *.example.com) -> entry
};

}  // namespace knap::router
