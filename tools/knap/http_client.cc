#include "tools/knap/http_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace knap::cli {
namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;

namespace {

struct Endpoint {
  bool is_unix = false;
  std::string path;  // unix socket
  std::string host, port;
};

StatusOr<Endpoint> parseServer(const std::string& server) {
  Endpoint ep;
  if (server.rfind("unix://", 0) == 0) {
    ep.is_unix = true;
    ep.path = server.substr(7);
    return ep;
  }
  std::string rest = server;
  if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
  else if (rest.rfind("https://", 0) == 0) return invalidArgument("https servers are not supported yet: " + server);
  auto slash = rest.find('/');
  if (slash != std::string::npos) rest = rest.substr(0, slash);
  auto colon = rest.rfind(':');
  if (colon == std::string::npos) return invalidArgument("server address needs a port: " + server);
  ep.host = rest.substr(0, colon);
  ep.port = rest.substr(colon + 1);
  return ep;
}

template <typename Stream, typename Fn>
Status withRequest(Stream& stream, const std::string& host, const std::string& method, const std::string& target,
                   const std::string& body, const std::string& content_type, const std::string& accept, Fn&& fn) {
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, host);
  req.set(http::field::user_agent, "knap-cli/0.1");
  req.set(http::field::accept, accept);
  if (!content_type.empty()) req.set(http::field::content_type, content_type);
  req.body() = body;
  req.prepare_payload();
  beast::error_code ec;
  http::write(stream, req, ec);
  if (ec) return unavailable("sending request: " + ec.message());
  return fn();
}

}  // namespace

StatusOr<HttpResponse> HttpClient::request(const std::string& method, const std::string& target,
                                           const std::string& body, const std::string& content_type,
                                           const std::string& accept) {
  KNAP_ASSIGN_OR_RETURN(Endpoint ep, parseServer(server_));
  asio::io_context ioc;
  HttpResponse out;
  auto readResponse = [&](auto& stream) -> Status {
    beast::flat_buffer buffer;
    http::response_parser<http::string_body> parser;
    parser.body_limit(512 * 1024 * 1024);
    beast::error_code ec;
    http::read(stream, buffer, parser, ec);
    if (ec) return unavailable("reading response from " + server_ + ": " + ec.message());
    auto& res = parser.get();
    out.status = static_cast<int>(res.result_int());
    out.body = res.body();
    for (const auto& f : res) {
      std::string name(f.name_string());
      for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      out.headers[name] = std::string(f.value());
    }
    return Status::ok();
  };
  beast::error_code ec;
  if (ep.is_unix) {
    asio::local::stream_protocol::socket sock(ioc);
    sock.connect(asio::local::stream_protocol::endpoint(ep.path), ec);
    if (ec) return unavailable("cannot reach knapd at " + server_ + ": " + ec.message() + " (is knapd running? are you root?)");
    KNAP_RETURN_IF_ERROR(withRequest(sock, "localhost", method, target, body, content_type, accept,
                                     [&] { return readResponse(sock); }));
  } else {
    asio::ip::tcp::resolver resolver(ioc);
    auto results = resolver.resolve(ep.host, ep.port, ec);
    if (ec) return unavailable("cannot resolve " + server_ + ": " + ec.message());
    asio::ip::tcp::socket sock(ioc);
    asio::connect(sock, results, ec);
    if (ec) return unavailable("cannot reach knapd at " + server_ + ": " + ec.message() + " (is knapd running?)");
    KNAP_RETURN_IF_ERROR(withRequest(sock, ep.host, method, target, body, content_type, accept,
                                     [&] { return readResponse(sock); }));
  }
  return out;
}

Status HttpClient::stream(const std::string& target, const std::function<bool(const std::string&)>& on_data) {
  KNAP_ASSIGN_OR_RETURN(Endpoint ep, parseServer(server_));
  asio::io_context ioc;
  auto readStream = [&](auto& sock) -> Status {
    beast::flat_buffer buffer;
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(boost::none);
    beast::error_code ec;
    http::read_header(sock, buffer, parser, ec);
    if (ec) return unavailable("reading response: " + ec.message());
    if (parser.get().result_int() >= 300) {
      std::string body;
      char buf[8192];
      while (!parser.is_done()) {
        parser.get().body().data = buf;
        parser.get().body().size = sizeof buf;
        http::read(sock, buffer, parser, ec);
        if (ec && ec != http::error::need_buffer) break;
        body.append(buf, sizeof buf - parser.get().body().size);
      }
      return Status(Code::kFailedPrecondition, "server answered " + std::to_string(parser.get().result_int()) + ": " + body);
    }
    char buf[8192];
    while (!parser.is_done()) {
      parser.get().body().data = buf;
      parser.get().body().size = sizeof buf;
      http::read(sock, buffer, parser, ec);
      if (ec == http::error::need_buffer) ec = {};
      size_t n = sizeof buf - parser.get().body().size;
      if (n > 0 && !on_data(std::string(buf, n))) return Status::ok();
      if (ec == http::error::end_of_stream || ec == asio::error::eof) return Status::ok();
      if (ec) return unavailable("stream: " + ec.message());
    }
    return Status::ok();
  };
  beast::error_code ec;
  if (ep.is_unix) {
    asio::local::stream_protocol::socket sock(ioc);
    sock.connect(asio::local::stream_protocol::endpoint(ep.path), ec);
    if (ec) return unavailable("cannot reach knapd at " + server_ + ": " + ec.message());
    return withRequest(sock, "localhost", "GET", target, "", "", "application/json", [&] { return readStream(sock); });
  }
  asio::ip::tcp::resolver resolver(ioc);
  auto results = resolver.resolve(ep.host, ep.port, ec);
  if (ec) return unavailable("cannot resolve " + server_ + ": " + ec.message());
  asio::ip::tcp::socket sock(ioc);
  asio::connect(sock, results, ec);
  if (ec) return unavailable("cannot reach knapd at " + server_ + ": " + ec.message());
  return withRequest(sock, ep.host, "GET", target, "", "", "application/json", [&] { return readStream(sock); });
}

}  // namespace knap::cli
