// knapd's own PKI for the TCP API (issue 9): a CA, a serving certificate and
// an admin client certificate, all EC P-256, kept under <data-dir>/pki:
//
//   ca.crt ca.key          the CA (10 years); signs the two below and any
//                          client certificate an operator issues (docs/user-guide.md)
//   server.crt server.key  the serving certificate: SANs localhost, 127.0.0.1,
//                          ::1 and the configured extra host names (1 year)
//   admin.crt admin.key    client certificate CN=knap-admin, O=system:masters (1 year)
//
// ensurePki() creates what is missing at first start and reuses the files on
// later starts; the serving certificate is re-issued when its SANs differ
// from the wanted ones, and a leaf certificate when it expires within 30 days
// or was not signed by the CA on disk. Keys are written 0600, the directory
// 0700, every file atomically (write + rename). A CA file that exists but
// cannot be read is an error (re-creating it would silently invalidate every
// certificate issued from it). Not thread-safe (called once at start-up).
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

struct ssl_st;  // OpenSSL's SSL

namespace knap::api {

struct PkiFiles {
  std::string dir;
  std::string ca_cert, ca_key;          // paths
  std::string server_cert, server_key;  // paths
  std::string admin_cert, admin_key;    // paths
  // PEM texts, read back after ensurePki().
  std::string ca_cert_pem, server_cert_pem, server_key_pem, admin_cert_pem, admin_key_pem;
};

// `extra_hosts`: DNS names or IP literals added to the serving certificate's SANs.
StatusOr<PkiFiles> ensurePki(const std::string& dir, const std::vector<std::string>& extra_hosts);

// The subject CN and O values of the client certificate of a TLS connection,
// when the peer sent one and it verified against the CA; false otherwise.
bool verifiedPeerNames(ssl_st* ssl, std::string* common_name, std::vector<std::string>* organizations);

// The subject CN and O values of a PEM certificate (for tests and the CLI).
Status certificateNames(const std::string& pem, std::string* common_name,
                        std::vector<std::string>* organizations);

}  // namespace knap::api
