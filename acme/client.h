// AcmeClient: an RFC 8555 client for one account, HTTP-01 only (issue 14).
// issue(host) runs one order end to end: directory, newNonce, newAccount
// (found again by key when it exists), newOrder, the authorization's
// http-01 challenge (published through a callback for the router to
// answer, then responded to), polling with back-off until the
// authorization and the order are valid or invalid, finalize with a CSR
// for a fresh P-256 certificate key, and the certificate chain download.
//
// Transport: an interface so that unit tests drive the client with a fake
// ACME server; CurlTransport is the real one (HTTPS with libcurl, system
// CAs plus an optional extra CA file, bounded response size and time).
// Every response is hostile until checked: JSON is parsed without
// exceptions escaping, every field is type-checked, URLs must be https://
// (or http:// when the directory itself is), a badNonce is retried a
// bounded number of times, and an ACME problem document becomes the
// Status message ("<type>: <detail>").
//
// Thread safety: one AcmeClient per thread (it keeps the nonce and the
// account URL); CurlTransport is safe from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "acme/jws.h"
#include "common/status.h"

namespace knap::acme {

struct HttpResponse {
  long status = 0;
  std::map<std::string, std::string> headers;  // names lower case
  std::string body;
};

class Transport {
 public:
  virtual ~Transport() = default;
  // method "GET", "HEAD" or "POST" (POST bodies are application/jose+json).
  virtual StatusOr<HttpResponse> request(const std::string& method, const std::string& url,
                                         const std::string& body) = 0;
};

struct CurlOptions {
  std::string ca_file;  // extra trust for the ACME server ("" = system CAs only)
  std::chrono::milliseconds timeout{30000};
  size_t max_body = 1 << 20;
};
std::unique_ptr<Transport> makeCurlTransport(const CurlOptions& options);

struct Issued {
  std::string chain_pem;  // leaf first
  std::string key_pem;    // the certificate's private key (PKCS#8)
};

struct ClientOptions {
  std::string directory_url;
  std::string email;  // "" = no contact
  // Polling: first delay, doubled up to max_poll_delay, for at most poll_deadline in all.
  std::chrono::milliseconds poll_delay{500};
  std::chrono::milliseconds max_poll_delay{5000};
  std::chrono::milliseconds poll_deadline{120000};
  int max_bad_nonce_retries = 3;
  // Sleeps between polls; returns false when the caller is stopping.
  std::function<bool(std::chrono::milliseconds)> sleep;
};

// token -> key authorization to serve, or "" to withdraw the token.
using ChallengePublisher =
    std::function<void(const std::string& token, const std::string& key_authorization)>;

class AcmeClient {
 public:
  AcmeClient(Transport& transport, AccountKey account, ClientOptions options);

  // One certificate for `host`. Errors name the step and the ACME problem.
  StatusOr<Issued> issue(const std::string& host, const ChallengePublisher& publish);
  const std::string& accountUrl() const { return account_url_; }

 private:
  Status loadDirectory();
  Status ensureAccount();
  Status newNonce();
  // A signed POST (payload nullopt = POST-as-GET) with badNonce retries.
  StatusOr<HttpResponse> post(const std::string& url, const std::optional<nlohmann::json>& payload,
                              bool use_jwk = false);
  StatusOr<nlohmann::json> postJson(const std::string& url, const std::optional<nlohmann::json>& payload,
                                    const std::string& what, std::string* location = nullptr);
  // Polls `url` until status is not one of `pending_states`.
  StatusOr<nlohmann::json> poll(const std::string& url, const std::string& what,
                                std::initializer_list<const char*> pending_states);
  Status checkUrl(const std::string& url, const std::string& what) const;
  bool sleep(std::chrono::milliseconds d) const;

  Transport& transport_;
  AccountKey account_;
  ClientOptions options_;
  std::map<std::string, std::string> directory_;  // newNonce, newAccount, newOrder
  std::string nonce_;
  std::string account_url_;
};

// "<type>: <detail>" of an ACME problem document (RFC 7807) in `body`, or
// "" when it is not one.
std::string problemText(const nlohmann::json& body);

}  // namespace knap::acme
