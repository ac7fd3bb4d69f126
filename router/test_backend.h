// Test helpers for the router's tests: a blocking loopback "pod" server (a
// thread per connection), a blocking HTTP client, and the TLS pieces the
// HTTPS tests share (self-signed certificates, their CertTable, a client
// TLS connection). Test-only; not part of knap_router.
//
// Thread safety: TestBackend's handler runs on one thread per connection;
// the destructor shuts every connection down and joins the threads.
#pragma once

#include <openssl/x509.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "router/router.h"

namespace knap::router::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = asio::ip::tcp;

using StringRequest = http::request<http::string_body>;
using StringResponse = http::response<http::string_body>;

class TestBackend {
 public:
  // Called on its own thread for each accepted connection.
  using ConnHandler = std::function<void(tcp::socket& socket)>;
  // Called per request by the keep-alive HTTP loop of httpHandler().
  using Respond = std::function<void(const StringRequest& req, StringResponse& resp)>;

  explicit TestBackend(ConnHandler handler);
  ~TestBackend();
  uint16_t port() const { return port_; }
  Endpoint endpoint() const { return Endpoint{"127.0.0.1", port_}; }
  int connections() const { return connections_.load(); }

  // A keep-alive HTTP/1.1 server loop around `respond`.
  static ConnHandler httpHandler(Respond respond);
  // A pod that answers an Upgrade with 101 and then echoes bytes ("echo:" + data).
  // (`first`: sent right after the 101, before any echo.)
  static ConnHandler echoTunnel(std::string first = "");

 private:
  void acceptLoop();
  asio::io_context ioc_;
  tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<int> connections_{0};
  ConnHandler handler_;
  std::thread accept_thread_;
  std::mutex mu_;
  std::vector<std::shared_ptr<tcp::socket>> sockets_;
  std::vector<std::thread> threads_;
};

// A blocking client connection to 127.0.0.1:port.
class TestClient {
 public:
  explicit TestClient(int port);
  // Sends `req` and reads one response; on error the response has result 0
  // and error() says why.
  StringResponse send(StringRequest req);
  // Raw bytes in/out for malformed-request tests.
  void writeRaw(const std::string& bytes);
  std::string readAll();  // until EOF or error
  tcp::socket& socket() { return socket_; }
  beast::flat_buffer& buffer() { return buffer_; }
  const beast::error_code& error() const { return ec_; }

 private:
  asio::io_context ioc_;
  tcp::socket socket_;
  beast::flat_buffer buffer_;
  beast::error_code ec_;
};

// A self-signed EC P-256 certificate (PEM) valid for an hour, with `sans`
// as its dNSName entries (none: no SAN extension) and subject CN `cn`.
struct TestCert {
  std::string cert, key;
};
TestCert selfSignedCert(const std::vector<std::string>& sans, const std::string& cn = "test");
// The CertTable serving `certs` (each loaded as "cert <index>"). Throws
// std::runtime_error naming a certificate that does not load (gtest reports
// it as the test's failure; this file is built into the benches too, without
// gtest).
std::shared_ptr<const CertTable> tableOf(const std::vector<TestCert>& certs);
// `x` as PEM.
std::string certificatePem(X509* x);

// A client TLS stream; its context is the caller's (versions, verification,
// ALPN on the stream's SSL before tlsConnect).
using TlsStream = asio::ssl::stream<tcp::socket>;
// Connects `s` to 127.0.0.1:port and runs the client handshake, sending
// `sni` as SNI unless it is empty.
beast::error_code tlsConnect(TlsStream& s, int port, const std::string& sni);

// One-shot GET on a fresh connection.
StringResponse get(int port, const std::string& host, const std::string& target = "/",
                   const std::vector<std::pair<std::string, std::string>>& headers = {});

}  // namespace knap::router::testing
