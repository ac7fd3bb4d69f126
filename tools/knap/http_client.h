// A small blocking HTTP/1.1 client for the knap CLI: talks to knapd's API over
// its unix socket (unix:///path) or loopback TCP (http://host:port).
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

class HttpClient {
 public:
  // server: "unix:///var/lib/knap/knapd.sock" or "http://127.0.0.1:6443".
  explicit HttpClient(std::string server) : server_(std::move(server)) {}

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
};

}  // namespace knap::cli
