#include "router/test_backend.h"

namespace knap::router::testing {

TestBackend::TestBackend(ConnHandler handler)
    : acceptor_(ioc_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)),
      handler_(std::move(handler)) {
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
  socket_.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)),
                  ec_);
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
