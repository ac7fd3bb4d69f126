#include "router/test_backend.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <stdexcept>

namespace knap::router::testing {

namespace {

std::string bioText(BIO* b) {
  char* data = nullptr;
  const long n = BIO_get_mem_data(b, &data);
  return std::string(data, static_cast<size_t>(n));
}

}  // namespace

TestCert selfSignedCert(const std::vector<std::string>& sans, const std::string& cn) {
  static std::atomic<long> serial{1};
  EVP_PKEY* key = EVP_EC_gen("P-256");
  X509* x = X509_new();
  X509_set_version(x, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial.fetch_add(1));
  X509_gmtime_adj(X509_getm_notBefore(x), -60);
  X509_gmtime_adj(X509_getm_notAfter(x), 3600);
  X509_set_pubkey(x, key);
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1,
                             -1, 0);
  X509_set_issuer_name(x, name);
  if (!sans.empty()) {
    std::string v;
    for (const std::string& s : sans) v += (v.empty() ? "DNS:" : ",DNS:") + s;
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, x, x, nullptr, nullptr, 0);
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, NID_subject_alt_name, v.c_str());
    X509_add_ext(x, ext, -1);
    X509_EXTENSION_free(ext);
  }
  X509_sign(x, key, EVP_sha256());
  TestCert out;
  out.cert = certificatePem(x);
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr);
  out.key = bioText(b);
  BIO_free(b);
  X509_free(x);
  EVP_PKEY_free(key);
  return out;
}

std::string certificatePem(X509* x) {
  BIO* b = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(b, x);
  std::string out = bioText(b);
  BIO_free(b);
  return out;
}

std::shared_ptr<const CertTable> tableOf(const std::vector<TestCert>& certs) {
  std::vector<CertEntry> entries;
  for (size_t i = 0; i < certs.size(); ++i) {
    auto c = tls::loadServerCertificate(certs[i].cert, certs[i].key, "cert " + std::to_string(i));
    if (!c.isOk()) throw std::runtime_error(c.status().message());
    for (const std::string& n : c->names) entries.push_back({n, c->ctx, "cert " + std::to_string(i)});
  }
  return CertTable::build(std::move(entries));
}

beast::error_code tlsConnect(TlsStream& s, int port, const std::string& sni) {
  if (!sni.empty()) SSL_set_tlsext_host_name(s.native_handle(), sni.c_str());
  beast::error_code ec;
  s.next_layer().connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)), ec);
  if (!ec) s.handshake(asio::ssl::stream_base::client, ec);
  return ec;
}

TestBackend::TestBackend(ConnHandler handler)
    : acceptor_(ioc_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)), handler_(std::move(handler)) {
  port_ = acceptor_.local_endpoint().port();
  accept_thread_ = std::thread([this] { acceptLoop(); });
}

TestBackend::~TestBackend() {
  stopping_ = true;
  beast::error_code ec;
  // Wake the blocking accept with a throwaway connection.
  {
    tcp::socket wake(ioc_);
    wake.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port_), ec);
  }
  accept_thread_.join();
  acceptor_.close(ec);
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& s : sockets_) s->shutdown(tcp::socket::shutdown_both, ec);
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
}

void TestBackend::acceptLoop() {
  for (;;) {
    auto sock = std::make_shared<tcp::socket>(ioc_);
    beast::error_code ec;
    acceptor_.accept(*sock, ec);
    if (stopping_) return;
    if (ec) continue;
    ++connections_;
    std::lock_guard<std::mutex> lock(mu_);
    sockets_.push_back(sock);
    threads_.emplace_back([this, sock] {
      handler_(*sock);
      beast::error_code ignored;
      sock->shutdown(tcp::socket::shutdown_send, ignored);
    });
  }
}

TestBackend::ConnHandler TestBackend::echoTunnel(std::string first) {
  return [first = std::move(first)](tcp::socket& sock) {
    beast::flat_buffer buf;
    StringRequest req;
    beast::error_code ec;
    http::read(sock, buf, req, ec);
    if (ec) return;
    asio::write(sock,
                asio::buffer(std::string(
                    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")),
                ec);
    if (!first.empty()) asio::write(sock, asio::buffer(first), ec);
    if (ec) return;
    char data[1024];
    for (;;) {
      const size_t n = sock.read_some(asio::buffer(data), ec);
      if (ec) return;
      asio::write(sock, asio::buffer("echo:" + std::string(data, n)), ec);
    }
  };
}

TestBackend::ConnHandler TestBackend::httpHandler(Respond respond) {
  return [respond](tcp::socket& sock) {
    beast::flat_buffer buf;
    for (;;) {
      StringRequest req;
      beast::error_code ec;
      http::read(sock, buf, req, ec);
      if (ec) return;
      StringResponse resp{http::status::ok, 11};
      resp.set(http::field::content_type, "text/plain");
      respond(req, resp);
      resp.keep_alive(req.keep_alive());
      resp.prepare_payload();
      http::write(sock, resp, ec);
      if (ec || !req.keep_alive()) return;
    }
  };
}

TestClient::TestClient(int port) : socket_(ioc_) {
  socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)), ec_);
}

StringResponse TestClient::send(StringRequest req) {
  StringResponse resp;
  resp.result(0);
  if (ec_) return resp;
  req.prepare_payload();
  http::write(socket_, req, ec_);
  if (ec_) return resp;
  http::response_parser<http::string_body> p;
  p.body_limit(1ull << 32);
  if (req.method() == http::verb::head) p.skip(true);
  http::read(socket_, buffer_, p, ec_);
  if (ec_) return resp;
  return p.release();
}

void TestClient::writeRaw(const std::string& bytes) {
  asio::write(socket_, asio::buffer(bytes), ec_);
}

std::string TestClient::readAll() {
  std::string out(static_cast<const char*>(buffer_.data().data()), buffer_.size());
  buffer_.consume(buffer_.size());
  char data[4096];
  for (;;) {
    beast::error_code ec;
    const size_t n = socket_.read_some(asio::buffer(data), ec);
    if (ec) break;
    out.append(data, n);
  }
  return out;
}

StringResponse get(int port, const std::string& host, const std::string& target,
                   const std::vector<std::pair<std::string, std::string>>& headers) {
  TestClient c(port);
  StringRequest req{http::verb::get, target, 11};
  req.set(http::field::host, host);
  for (const auto& [k, v] : headers) req.set(k, v);
  return c.send(std::move(req));
}

}  // namespace knap::router::testing
