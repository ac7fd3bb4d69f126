#include "tools/knap/http_client.h"

#include <openssl/ssl.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fstream>
#include <sstream>

#include "api/codec.h"
#include "common/base64.h"
#include "common/string_util.h"

namespace knap::cli {
namespace beast = boost::beast;
namespace http = beast::http;
namespace asio = boost::asio;
namespace ssl = boost::asio::ssl;
using nlohmann::json;

namespace {

struct Endpoint {
  bool is_unix = false;
  bool tls = false;
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
  if (rest.rfind("http://", 0) == 0) {
    rest = rest.substr(7);
  } else if (rest.rfind("https://", 0) == 0) {
    rest = rest.substr(8);
    ep.tls = true;
  }
  auto slash = rest.find('/');
  if (slash != std::string::npos) rest = rest.substr(0, slash);
  auto hp = splitHostPort(rest);
  if (!hp) return invalidArgument("server address needs host:port (IPv6 in brackets): " + server);
  ep.host = hp->host;
  ep.port = std::to_string(hp->port);
  return ep;
}

StatusOr<std::string> readFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return unavailable("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Connects to `server` and runs fn(stream, host_header) on a plain, unix or TLS stream.
template <typename Fn>
Status withConnection(const std::string& server, const Credentials& creds, Fn&& fn) {
  KNAP_ASSIGN_OR_RETURN(Endpoint ep, parseServer(server));
  asio::io_context ioc;
  beast::error_code ec;
  if (ep.is_unix) {
    asio::local::stream_protocol::socket sock(ioc);
    sock.connect(asio::local::stream_protocol::endpoint(ep.path), ec);
    if (ec)
      return unavailable("cannot reach knapd at " + server + ": " + ec.message() +
                         " (is knapd running? are you root?)");
    return fn(sock, std::string("localhost"));
  }
  asio::ip::tcp::resolver resolver(ioc);
  auto results = resolver.resolve(ep.host, ep.port, ec);
  if (ec) return unavailable("cannot resolve " + server + ": " + ec.message());
  std::string host_header =
      ep.host.find(':') != std::string::npos ? "[" + ep.host + "]:" + ep.port : ep.host + ":" + ep.port;
  if (!ep.tls) {
    asio::ip::tcp::socket sock(ioc);
    asio::connect(sock, results, ec);
    if (ec)
      return unavailable("cannot reach knapd at " + server + ": " + ec.message() + " (is knapd running?)");
    return fn(sock, host_header);
  }
  ssl::context ctx(ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_2_VERSION);
  if (!creds.ca_pem.empty()) {
    ctx.add_certificate_authority(asio::buffer(creds.ca_pem), ec);
    if (ec) return invalidArgument("the server CA is not a PEM certificate: " + ec.message());
  } else {
    ctx.set_default_verify_paths(ec);
  }
  if (!creds.client_cert_pem.empty()) {
    ctx.use_certificate_chain(asio::buffer(creds.client_cert_pem), ec);
    if (!ec) ctx.use_private_key(asio::buffer(creds.client_key_pem), ssl::context::pem, ec);
    if (ec) return invalidArgument("the client certificate or key cannot be used: " + ec.message());
  }
  ctx.set_verify_mode(ssl::verify_peer);
  ctx.set_verify_callback(ssl::host_name_verification(ep.host));
  ssl::stream<asio::ip::tcp::socket> stream(ioc, ctx);
  SSL_set_tlsext_host_name(stream.native_handle(), ep.host.c_str());
  asio::connect(stream.next_layer(), results, ec);
  if (ec)
    return unavailable("cannot reach knapd at " + server + ": " + ec.message() + " (is knapd running?)");
  stream.handshake(ssl::stream_base::client, ec);
  if (ec) return unavailable("TLS handshake with " + server + " failed: " + ec.message());
  return fn(stream, host_header);
}

template <typename Stream>
Status sendRequest(Stream& stream, const std::string& host, const Credentials& creds,
                   const std::string& method, const std::string& target, const std::string& body,
                   const std::string& content_type, const std::string& accept) {
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, host);
  req.set(http::field::user_agent, "knap-cli/0.1");
  req.set(http::field::accept, accept);
  if (!creds.token.empty()) req.set(http::field::authorization, "Bearer " + creds.token);
  if (!content_type.empty()) req.set(http::field::content_type, content_type);
  req.body() = body;
  req.prepare_payload();
  beast::error_code ec;
  http::write(stream, req, ec);
  if (ec) return unavailable("sending request: " + ec.message());
  return Status::ok();
}

bool isEof(const beast::error_code& ec) {
  return ec == http::error::end_of_stream || ec == asio::error::eof || ec == ssl::error::stream_truncated;
}

}  // namespace

Status loadKubeconfig(const std::string& path, std::string* server, Credentials* creds) {
  KNAP_ASSIGN_OR_RETURN(std::string text, readFile(path));
  auto doc = api::parseDocument(text, true);
  if (!doc.isOk()) return invalidArgument("kubeconfig " + path + ": " + doc.status().message());
  const json& k = *doc;
  if (!k.is_object()) return invalidArgument("kubeconfig " + path + " is not a mapping");
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  auto str = [](const json& o, const char* key) -> std::string {
    auto it = o.find(key);
    return it != o.end() && it->is_string() ? it->get<std::string>() : "";
  };
  auto named = [&](const char* list, const std::string& name, const char* inner) -> json {
    auto it = k.find(list);
    if (it == k.end() || !it->is_array()) return json::object();
    for (const json& e : *it) {
      if (e.is_object() && str(e, "name") == name && e.contains(inner) && e[inner].is_object())
        return e[inner];
    }
    return json::object();
  };
  std::string current = str(k, "current-context");
  json context = named("contexts", current, "context");
  json cluster = named("clusters", str(context, "cluster"), "cluster");
  json user = named("users", str(context, "user"), "user");
  *server = str(cluster, "server");
  if (server->empty())
    return invalidArgument("kubeconfig " + path + ": the current context has no cluster server");
  // "X-data" (base64) or "X" (a file path).
  auto material = [&](const json& o, const std::string& key, std::string* out) -> Status {
    std::string data = str(o, (key + "-data").c_str());
    if (!data.empty()) {
      if (!base64Decode(data, out))
        return invalidArgument("kubeconfig " + path + ": " + key + "-data is not base64");
      return Status::ok();
    }
    std::string file = str(o, key.c_str());
    if (file.empty()) return Status::ok();
    if (file[0] != '/') file = dir + "/" + file;
    KNAP_ASSIGN_OR_RETURN(*out, readFile(file));
    return Status::ok();
  };
  KNAP_RETURN_IF_ERROR(material(cluster, "certificate-authority", &creds->ca_pem));
  KNAP_RETURN_IF_ERROR(material(user, "client-certificate", &creds->client_cert_pem));
  KNAP_RETURN_IF_ERROR(material(user, "client-key", &creds->client_key_pem));
  creds->token = str(user, "token");
  if (creds->token.empty() && !str(user, "tokenFile").empty()) {
    std::string file = str(user, "tokenFile");
    if (file[0] != '/') file = dir + "/" + file;
    KNAP_ASSIGN_OR_RETURN(std::string token, readFile(file));
    while (!token.empty() && (token.back() == '\n' || token.back() == '\r' || token.back() == ' '))
      token.pop_back();
    creds->token = token;
  }
  return Status::ok();
}

StatusOr<HttpResponse> HttpClient::request(const std::string& method, const std::string& target,
                                           const std::string& body, const std::string& content_type,
                                           const std::string& accept) {
  HttpResponse out;
  Status st = withConnection(server_, credentials_, [&](auto& stream, const std::string& host) -> Status {
    KNAP_RETURN_IF_ERROR(sendRequest(stream, host, credentials_, method, target, body, content_type, accept));
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
  });
  if (!st.isOk()) return st;
  return out;
}

Status HttpClient::stream(const std::string& target, const std::function<bool(const std::string&)>& on_data) {
  return withConnection(server_, credentials_, [&](auto& sock, const std::string& host) -> Status {
    KNAP_RETURN_IF_ERROR(sendRequest(sock, host, credentials_, "GET", target, "", "", "application/json"));
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
      return Status(Code::kFailedPrecondition,
                    "server answered " + std::to_string(parser.get().result_int()) + ": " + body);
    }
    char buf[8192];
    while (!parser.is_done()) {
      parser.get().body().data = buf;
      parser.get().body().size = sizeof buf;
      http::read(sock, buffer, parser, ec);
      if (ec == http::error::need_buffer) ec = {};
      size_t n = sizeof buf - parser.get().body().size;
      if (n > 0 && !on_data(std::string(buf, n))) return Status::ok();
      if (isEof(ec)) return Status::ok();
      if (ec) return unavailable("stream: " + ec.message());
    }
    return Status::ok();
  });
}

}  // namespace knap::cli
