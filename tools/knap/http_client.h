// A small blocking HTTP/1.1 client for the knap CLI: talks to knapd's API over
// its unix socket (unix:///path), plain loopback TCP (http://host:port, with
// knap.api-insecure-loopback) or TLS (https://host:port) with the server's CA
// and a client certificate and/or a bearer token, as a kubeconfig gives them.
// Not thread-safe; one request at a time per client.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "common/status.h"

namespace knap::cli {

struct HttpResponse {
  int status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
};

// How to reach and authenticate to knapd (PEM texts).
struct Credentials {
  std::string ca_pem;           // trusted for https (empty: the system's CAs)
  std::string client_cert_pem;  // client certificate (with client_key_pem)
  std::string client_key_pem;
  std::string token;  // sent as "Authorization: Bearer TOKEN"
};

// The server and credentials of a kubeconfig's current context
// (certificate-authority[-data], client-certificate[-data], client-key[-data],
// token[-file]; relative file paths are relative to the kubeconfig).
Status loadKubeconfig(const std::string& path, std::string* server, Credentials* credentials);

class HttpClient {
 public:
  // server: "unix:///var/lib/knap/knapd.sock", "https://127.0.0.1:6443" or "http://127.0.0.1:6443".
  explicit HttpClient(std::string server, Credentials credentials = {})
      : server_(std::move(server)), credentials_(std::move(credentials)) {}

  // Returns kUnavailable when knapd cannot be reached (with the address in the message).
  StatusOr<HttpResponse> request(const std::string& method, const std::string& target,
                                 const std::string& body = "", const std::string& content_type = "",
                                 const std::string& accept = "application/json");
  // Streams a chunked/close-delimited body, calling on_data for each piece until
  // it returns false or the server ends the stream.
  Status stream(const std::string& target, const std::function<bool(const std::string&)>& on_data);

  const std::string& server() const { return server_; }

 private:
  std::string server_;
  Credentials credentials_;
};

}  // namespace knap::cli
