// The router's HTTPS listener over real loopback sockets: the certificate
// chosen by SNI (exact, wildcard, none), swapped without a restart, the
// request proxied with X-Forwarded-Proto: https, an Upgrade tunnelled over
// TLS, TLS < 1.2 refused, and config-network http-protocol (Redirected,
// Disabled) on the plain listener.
#include <gtest/gtest.h>
#include <malloc.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/ioctl.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ssl.hpp>

#include "router/router.h"
#include "router/test_backend.h"
#include "router/tls_socket.h"

namespace knap::router {
namespace {

using namespace knap::router::testing;
using namespace std::chrono_literals;
namespace ssl = boost::asio::ssl;

constexpr const char* kHost = "hello.default.example.com";
constexpr const char* kRev = "default/hello-00001";

struct HttpsResult {
  StringResponse resp;
  std::string error;      // handshake or I/O error; empty on success
  std::string peer_cert;  // the server's leaf certificate, PEM
  std::string version;    // negotiated protocol, "TLSv1.3"
};

// Counts TLS application-data records the client receives (an SSL msg
// callback; `arg` is an int*).
void countAppRecords(int write_p, int, int content_type, const void* buf, size_t len, SSL*, void* arg) {
  if (write_p == 0 && content_type == SSL3_RT_HEADER && len > 0 &&
      static_cast<const unsigned char*>(buf)[0] == SSL3_RT_APPLICATION_DATA) {
    ++*static_cast<int*>(arg);
  }
}

// One HTTPS request on a fresh connection, verifying the server against
// `trust` (PEM) for host `sni` (empty: no SNI sent, no verification).
// `app_records`: set to the application-data records received after the
// handshake (meaningful under TLS 1.2, where nothing else comes in them).
HttpsResult httpsRequest(int port, const std::string& sni, const std::string& trust, StringRequest req,
                         int max_version = 0, int* app_records = nullptr) {
  HttpsResult out;
  asio::io_context ioc;
  ssl::context ctx(ssl::context::tls_client);
  if (max_version != 0) SSL_CTX_set_max_proto_version(ctx.native_handle(), max_version);
  if (max_version != 0 && max_version < TLS1_2_VERSION) {
    SSL_CTX_set_security_level(ctx.native_handle(), 0);  // let the client even try
    SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_VERSION);
  }
  beast::error_code ec;
  if (!sni.empty() && !trust.empty()) {
    ctx.add_certificate_authority(asio::buffer(trust), ec);
    ctx.set_verify_mode(ssl::verify_peer);
    ctx.set_verify_callback(ssl::host_name_verification(sni));
  }
  TlsStream s(ioc, ctx);
  ec = tlsConnect(s, port, sni);
  if (ec) {
    out.error = "handshake: " + ec.message();
    return out;
  }
  out.version = SSL_get_version(s.native_handle());
  if (X509* peer = SSL_get1_peer_certificate(s.native_handle())) {
    out.peer_cert = certificatePem(peer);
    X509_free(peer);
  }
  if (app_records != nullptr) {
    *app_records = 0;
    SSL_set_msg_callback(s.native_handle(), countAppRecords);
    SSL_set_msg_callback_arg(s.native_handle(), app_records);
  }
  req.version(11);
  req.prepare_payload();
  http::write(s, req, ec);
  beast::flat_buffer buf;
  if (!ec) http::read(s, buf, out.resp, ec);
  if (ec) out.error = "request: " + ec.message();
  return out;
}

StringRequest getRequest(const std::string& host, const std::string& target = "/") {
  StringRequest req(http::verb::get, target, 11);
  req.set(http::field::host, host);
  return req;
}

// Every request header, one "name: value" line each.
std::string echoHeaders(const StringRequest& req) {
  std::string out;
  for (const auto& f : req) out += std::string(f.name_string()) + ": " + std::string(f.value()) + "\n";
  return out;
}

class TlsRouterTest : public ::testing::Test {
 protected:
  void startRouter(HttpProtocol protocol = HttpProtocol::kEnabled, const std::string& default_host = "") {
    RouterOptions o;
    o.tls_default_host = default_host;
    o.address = "127.0.0.1";
    o.port = 0;
    o.tls_address = "127.0.0.1";
    o.tls_port = 0;
    o.admin_port = 0;
    o.threads = 2;
    o.header_read_timeout = 5s;
    o.http_protocol = protocol;
    router_ = std::make_unique<Router>(o, RealTimeSource::instance());
    Status s = router_->start();
    ASSERT_TRUE(s.isOk()) << s.toString();
    ASSERT_GT(router_->tlsPort(), 0);
    RouteSpec r;
    r.namespace_name = "default";
    r.name = "hello";
    r.hosts = {kHost, "hello.apps.example.org"};
    r.traffic = {{kRev, 100, ""}};
    auto t = RoutingTable::build({r}, "hash-1");
    ASSERT_TRUE(t.isOk()) << t.status().toString();
    router_->setRoutingTable(*t);
  }
  // The router in front of `pod` for kHost, with a self-signed certificate
  // for it (returned).
  TestCert startServing(const TestBackend& pod) {
    startRouter();
    router_->setEndpoints(kRev, {pod.endpoint()});
    TestCert cert = selfSignedCert({kHost});
    router_->setCertificates(tableOf({cert}));
    return cert;
  }
  void TearDown() override {
    if (router_) router_->stop();
  }
  std::unique_ptr<Router> router_;
};

// A response that fits one TLS record (16 KiB) goes out in one: head and
// body in one SSL_write, as nginx does, not a record (and a send) each.
TEST_F(TlsRouterTest, ASmallResponseGoesOutInOneTlsRecord) {
  TestBackend pod(TestBackend::httpHandler(
      [](const StringRequest&, StringResponse& resp) { resp.body() = std::string(3000, 'x'); }));
  TestCert cert = startServing(pod);
  int records = -1;
  HttpsResult r =
      httpsRequest(router_->tlsPort(), kHost, cert.cert, getRequest(kHost), TLS1_2_VERSION, &records);
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.resp.result_int(), 200);
  EXPECT_EQ(r.resp.body(), std::string(3000, 'x'));
  EXPECT_EQ(records, 1) << "the response head and its 3,000-byte body in " << records << " TLS records";
}

TEST_F(TlsRouterTest, ServesTheSniCertificateAndProxiesWithHttpsProto) {
  TestBackend pod(TestBackend::httpHandler(
      [](const StringRequest& req, StringResponse& resp) { resp.body() = echoHeaders(req); }));
  startRouter();
  router_->setEndpoints(kRev, {pod.endpoint()});
  TestCert exact = selfSignedCert({kHost});
  TestCert wild = selfSignedCert({"*.apps.example.org"});
  router_->setCertificates(tableOf({exact, wild}));

  HttpsResult r = httpsRequest(router_->tlsPort(), kHost, exact.cert, getRequest(kHost, "/x"));
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.resp.result_int(), 200);
  EXPECT_EQ(r.peer_cert, exact.cert);
  EXPECT_TRUE(r.version == "TLSv1.3" || r.version == "TLSv1.2") << r.version;
  EXPECT_NE(r.resp.body().find("X-Forwarded-Proto: https\n"), std::string::npos) << r.resp.body();

  HttpsResult w = httpsRequest(router_->tlsPort(), "hello.apps.example.org", wild.cert,
                               getRequest("hello.apps.example.org"));
  ASSERT_EQ(w.error, "");
  EXPECT_EQ(w.resp.result_int(), 200);
  EXPECT_EQ(w.peer_cert, wild.cert);

  // TLS 1.2 with the policy's cipher list works too.
  HttpsResult v12 = httpsRequest(router_->tlsPort(), kHost, exact.cert, getRequest(kHost), TLS1_2_VERSION);
  ASSERT_EQ(v12.error, "");
  EXPECT_EQ(v12.version, "TLSv1.2");
  EXPECT_EQ(v12.resp.result_int(), 200);
}

TEST_F(TlsRouterTest, UnknownOrMissingSniAndOldProtocolsFailTheHandshake) {
  startRouter();
  TestCert exact = selfSignedCert({kHost});
  router_->setCertificates(tableOf({exact}));
  EXPECT_NE(httpsRequest(router_->tlsPort(), "other.example.com", "", getRequest("other.example.com")).error,
            "");
  EXPECT_NE(httpsRequest(router_->tlsPort(), "", "", getRequest(kHost)).error, "");
  EXPECT_NE(httpsRequest(router_->tlsPort(), kHost, "", getRequest(kHost), TLS1_1_VERSION).error, "");
  // The server counts a failed handshake after the client has seen it fail:
  // wait (bounded) for the count rather than race it on a loaded machine.
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  auto counted = [&] {
    return router_->renderMetrics().find("knap_router_tls_handshakes_total{result=\"failed\"} 3") !=
           std::string::npos;
  };
  while (!counted() && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_NE(router_->renderMetrics().find("knap_router_tls_handshakes_total{result=\"failed\"} 3"),
            std::string::npos)
      << router_->renderMetrics();
}

// Waits (bounded: the server counts after the client has seen the
// handshake end) for `series` to appear in the router's metrics.
bool metricSoon(Router& router, const std::string& series) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (router.renderMetrics().find(series) == std::string::npos && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return router.renderMetrics().find(series) != std::string::npos;
}

// knap.router-tls-default-host: a client that sends no SNI (or an IP address
// as SNI) gets that host's certificate and is routed by its Host header; an
// unknown SNI still fails; without a certificate for the default host, or
// without the option, no SNI fails with unrecognized_name, counted.
TEST_F(TlsRouterTest, NoSniGetsTheDefaultHostsCertificate) {
  TestBackend pod(
      TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) { resp.body() = "pod"; }));
  startRouter(HttpProtocol::kEnabled, kHost);
  router_->setEndpoints(kRev, {pod.endpoint()});
  TestCert exact = selfSignedCert({kHost});
  TestCert other = selfSignedCert({"other.example.com"});
  router_->setCertificates(tableOf({other, exact}));

  HttpsResult r = httpsRequest(router_->tlsPort(), "", "", getRequest(kHost));
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.peer_cert, exact.cert);
  EXPECT_EQ(r.resp.result_int(), 200);
  EXPECT_EQ(r.resp.body(), "pod");
  HttpsResult ip = httpsRequest(router_->tlsPort(), "127.0.0.1", "", getRequest(kHost));
  ASSERT_EQ(ip.error, "");
  EXPECT_EQ(ip.peer_cert, exact.cert);
  EXPECT_EQ(ip.resp.result_int(), 200);
  // An SNI with a certificate gets its own; an unknown SNI is still refused.
  EXPECT_EQ(
      httpsRequest(router_->tlsPort(), "other.example.com", "", getRequest("other.example.com")).peer_cert,
      other.cert);
  EXPECT_NE(httpsRequest(router_->tlsPort(), "unknown.example.com", "", getRequest(kHost)).error, "");
  EXPECT_TRUE(metricSoon(*router_, "knap_router_tls_no_sni_total{result=\"default_host\"} 2"))
      << router_->renderMetrics();

  // The default host's certificate gone: no SNI fails the handshake.
  router_->setCertificates(tableOf({other}));
  EXPECT_NE(httpsRequest(router_->tlsPort(), "", "", getRequest(kHost)).error, "");
  EXPECT_TRUE(metricSoon(*router_, "knap_router_tls_no_sni_total{result=\"refused\"} 1"))
      << router_->renderMetrics();
}

TEST_F(TlsRouterTest, NoSniWithoutADefaultHostFailsWithUnrecognizedName) {
  startRouter();
  TestCert exact = selfSignedCert({kHost});
  router_->setCertificates(tableOf({exact}));
  // The client sees the alert itself, not a reset or a silent close.
  HttpsResult r = httpsRequest(router_->tlsPort(), "", "", getRequest(kHost));
  EXPECT_NE(r.error.find("unrecognized name"), std::string::npos) << r.error;
  EXPECT_TRUE(metricSoon(*router_, "knap_router_tls_no_sni_total{result=\"refused\"} 1"))
      << router_->renderMetrics();
}

TEST_F(TlsRouterTest, NewCertificatesServeTheNextHandshakeWithoutRestart) {
  TestBackend pod(
      TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) { resp.body() = "ok"; }));
  startRouter();
  router_->setEndpoints(kRev, {pod.endpoint()});
  TestCert first = selfSignedCert({kHost});
  router_->setCertificates(tableOf({first}));
  HttpsResult a = httpsRequest(router_->tlsPort(), kHost, first.cert, getRequest(kHost));
  ASSERT_EQ(a.error, "");
  EXPECT_EQ(a.peer_cert, first.cert);

  TestCert second = selfSignedCert({kHost});
  router_->setCertificates(tableOf({second}));
  HttpsResult b = httpsRequest(router_->tlsPort(), kHost, second.cert, getRequest(kHost));
  ASSERT_EQ(b.error, "");
  EXPECT_EQ(b.peer_cert, second.cert);
  EXPECT_EQ(b.resp.result_int(), 200);
  // The old certificate no longer verifies the server.
  EXPECT_NE(httpsRequest(router_->tlsPort(), kHost, first.cert, getRequest(kHost)).error, "");

  router_->setCertificates(nullptr);  // none: the host is not served over TLS
  EXPECT_NE(httpsRequest(router_->tlsPort(), kHost, "", getRequest(kHost)).error, "");
}

TEST_F(TlsRouterTest, UpgradeIsTunnelledOverTls) {
  TestBackend pod(TestBackend::echoTunnel());
  startRouter();
  router_->setEndpoints(kRev, {pod.endpoint()});
  TestCert exact = selfSignedCert({kHost});
  router_->setCertificates(tableOf({exact}));

  asio::io_context ioc;
  ssl::context ctx(ssl::context::tls_client);
  TlsStream s(ioc, ctx);
  beast::error_code ec = tlsConnect(s, router_->tlsPort(), kHost);
  ASSERT_FALSE(ec) << ec.message();
  asio::write(s,
              asio::buffer("GET /ws HTTP/1.1\r\nHost: " + std::string(kHost) +
                           "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"),
              ec);
  beast::flat_buffer buf;
  http::response_parser<http::empty_body> p;
  http::read_header(s, buf, p, ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(p.get().result_int(), 101);
  for (const std::string msg : {"ping-1", "ping-2"}) {
    asio::write(s, asio::buffer(msg), ec);
    ASSERT_FALSE(ec) << ec.message();
    std::string got(static_cast<const char*>(buf.data().data()), buf.size());
    buf.consume(buf.size());
    char data[256];
    while (got.size() < msg.size() + 5) {
      const size_t n = s.read_some(asio::buffer(data), ec);
      ASSERT_FALSE(ec) << ec.message();
      got.append(data, n);
    }
    EXPECT_EQ(got, "echo:" + msg);
  }
}

TEST_F(TlsRouterTest, RedirectedAnswers308ToHttpsExceptProbesAndAcmeChallenges) {
  TestBackend pod(TestBackend::httpHandler([](const StringRequest& req, StringResponse& resp) {
    resp.body() = "pod saw " + std::string(req.target());
  }));
  startRouter(HttpProtocol::kRedirected);
  router_->setEndpoints(kRev, {pod.endpoint()});
  StringResponse r = get(router_->port(), std::string(kHost) + ":8080", "/a/b?c=d");
  EXPECT_EQ(r.result_int(), 308);
  EXPECT_EQ(r[http::field::location],
            "https://" + std::string(kHost) + ":" + std::to_string(router_->tlsPort()) + "/a/b?c=d");
  // An unknown host is still a 404 naming it.
  EXPECT_EQ(get(router_->port(), "nobody.example.com").result_int(), 404);
  // ACME HTTP-01 challenges go on over HTTP: a token the router holds is
  // answered by the router (any Host), any other goes to the pod.
  auto challenges = std::make_shared<Router::AcmeChallenges>();
  (*challenges)["tok-1"] = "tok-1.thumbprint";
  router_->setAcmeChallenges(challenges);
  StringResponse mine = get(router_->port(), "other.example.net", "/.well-known/acme-challenge/tok-1");
  EXPECT_EQ(mine.result_int(), 200);
  EXPECT_EQ(mine.body(), "tok-1.thumbprint");  // exactly, no newline
  StringResponse acme = get(router_->port(), kHost, "/.well-known/acme-challenge/tok");
  EXPECT_EQ(acme.result_int(), 200);
  EXPECT_EQ(acme.body(), "pod saw /.well-known/acme-challenge/tok");
  router_->setAcmeChallenges(nullptr);
  EXPECT_EQ(get(router_->port(), "other.example.net", "/.well-known/acme-challenge/tok-1").result_int(), 404);
  // Network probes too.
  StringResponse probe =
      get(router_->port(), kHost, "/", {{"K-Network-Probe", "probe"}, {"K-Network-Hash", "h"}});
  EXPECT_EQ(probe.result_int(), 200);
}

TEST_F(TlsRouterTest, DisabledServesHttpsOnly) {
  TestBackend pod(
      TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) { resp.body() = "ok"; }));
  startRouter(HttpProtocol::kDisabled);
  router_->setEndpoints(kRev, {pod.endpoint()});
  TestCert exact = selfSignedCert({kHost});
  router_->setCertificates(tableOf({exact}));
  StringResponse r = get(router_->port(), kHost, "/");
  EXPECT_EQ(r.result_int(), 404);
  EXPECT_NE(r.body().find("served over HTTPS only"), std::string::npos) << r.body();
  HttpsResult s = httpsRequest(router_->tlsPort(), kHost, exact.cert, getRequest(kHost));
  ASSERT_EQ(s.error, "");
  EXPECT_EQ(s.resp.result_int(), 200);
}

// TLS on the socket (router/tls_socket.h): the paths a quick loopback
// exchange does not take.

// A deterministic body of `n` bytes (position-dependent, so a lost, doubled
// or reordered record shows).
std::string patternBody(size_t n, char salt) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>('a' + (i * 7 + static_cast<size_t>(salt)) % 26);
  return s;
}

// A client whose receive buffer is small, for a reader the router must
// wait on (SSL_write wants the socket writable again, many times).
beast::error_code tlsConnectSlowReader(TlsStream& s, int port, const std::string& sni) {
  beast::error_code ec;
  s.next_layer().open(tcp::v4(), ec);
  if (ec) return ec;
  s.next_layer().set_option(asio::socket_base::receive_buffer_size(4096), ec);
  SSL_set_tlsext_host_name(s.native_handle(), sni.c_str());
  s.next_layer().connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)), ec);
  if (!ec) s.handshake(ssl::stream_base::client, ec);
  return ec;
}

TEST_F(TlsRouterTest, LargeBodiesBothWaysWithASlowReaderArriveIntact) {
  // The pod answers the upload's SHA-free fingerprint (size and a sample)
  // followed by a 4 MiB body.
  const std::string big = patternBody(4 << 20, 'r');
  TestBackend pod(TestBackend::httpHandler([&big](const StringRequest& req, StringResponse& resp) {
    resp.set("X-Upload",
             std::to_string(req.body().size()) + ":" + req.body().substr(req.body().size() / 2, 16));
    resp.body() = big;
  }));
  TestCert cert = startServing(pod);

  asio::io_context ioc;
  ssl::context ctx(ssl::context::tls_client);
  TlsStream s(ioc, ctx);
  beast::error_code ec = tlsConnectSlowReader(s, router_->tlsPort(), kHost);
  ASSERT_FALSE(ec) << ec.message();
  const std::string upload = patternBody(1 << 20, 'u');
  StringRequest req(http::verb::post, "/up", 11);
  req.set(http::field::host, kHost);
  req.body() = upload;
  req.prepare_payload();
  http::write(s, req, ec);
  ASSERT_FALSE(ec) << ec.message();
  std::this_thread::sleep_for(300ms);  // the router fills the socket and waits
  beast::flat_buffer buf;
  StringResponse resp;
  http::response_parser<http::string_body> parser;
  parser.body_limit(8 << 20);
  http::read(s, buf, parser, ec);
  ASSERT_FALSE(ec) << ec.message();
  resp = parser.release();
  EXPECT_EQ(resp.result_int(), 200);
  EXPECT_EQ(resp["X-Upload"], std::to_string(upload.size()) + ":" + upload.substr(upload.size() / 2, 16));
  EXPECT_EQ(resp.body().size(), big.size());
  EXPECT_TRUE(resp.body() == big) << "the 4 MiB body arrived altered";
}

TEST_F(TlsRouterTest, PipelinedRequestsInOneRecordAreAllAnswered) {
  // Three requests in one TLS record: the router reads them ahead in one
  // go and must answer each without waiting for the socket again.
  TestBackend pod(TestBackend::httpHandler([](const StringRequest& req, StringResponse& resp) {
    resp.body() = "seen " + std::string(req.target());
  }));
  TestCert cert = startServing(pod);
  asio::io_context ioc;
  ssl::context ctx(ssl::context::tls_client);
  TlsStream s(ioc, ctx);
  beast::error_code ec = tlsConnect(s, router_->tlsPort(), kHost);
  ASSERT_FALSE(ec) << ec.message();
  std::string three;
  for (const char* t : {"/one", "/two", "/three"})
    three += "GET " + std::string(t) + " HTTP/1.1\r\nHost: " + kHost + "\r\n\r\n";
  asio::write(s, asio::buffer(three), ec);  // one SSL_write: one record
  ASSERT_FALSE(ec) << ec.message();
  beast::flat_buffer buf;
  for (const char* t : {"/one", "/two", "/three"}) {
    StringResponse resp;
    http::read(s, buf, resp, ec);
    ASSERT_FALSE(ec) << t << ": " << ec.message();
    EXPECT_EQ(resp.body(), "seen " + std::string(t));
  }
}

TEST_F(TlsRouterTest, AClientGoneBeforeItsResponseCostsNothingElse) {
  // The client sends its request and closes (a FIN: TLS 1.2 leaves nothing
  // unread) while the pod takes its time; the router then writes an 8 MiB
  // response: the first record draws an RST, the next sends fail with EPIPE.
  // This test binary does not ignore SIGPIPE: a send without MSG_NOSIGNAL
  // would end it here.
  const std::string big = patternBody(8 << 20, 'g');
  TestBackend pod(TestBackend::httpHandler([&big](const StringRequest&, StringResponse& resp) {
    std::this_thread::sleep_for(200ms);
    resp.body() = big;
  }));
  TestCert cert = startServing(pod);
  for (int round = 0; round < 3; ++round) {
    asio::io_context ioc;
    ssl::context ctx(ssl::context::tls_client);
    SSL_CTX_set_max_proto_version(ctx.native_handle(), TLS1_2_VERSION);
    TlsStream s(ioc, ctx);
    beast::error_code ec = tlsConnect(s, router_->tlsPort(), kHost);
    ASSERT_FALSE(ec) << ec.message();
    StringRequest req = getRequest(kHost);
    req.prepare_payload();
    http::write(s, req, ec);
    ASSERT_FALSE(ec) << ec.message();
    s.next_layer().close(ec);
    std::this_thread::sleep_for(400ms);  // the pod answers; the router writes to the closed connection
  }
  HttpsResult r = httpsRequest(router_->tlsPort(), kHost, cert.cert, getRequest(kHost));
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.resp.body().size(), big.size());
}

TEST_F(TlsRouterTest, PlaintextOrAStalledHandshakeIsClosedAndServingGoesOn) {
  TestBackend pod(
      TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) { resp.body() = "ok"; }));
  TestCert cert = startServing(pod);
  const tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(router_->tlsPort()));
  asio::io_context ioc;
  // Plain HTTP to the HTTPS port: the handshake fails; the router closes
  // (an alert at most, never an HTTP answer).
  {
    tcp::socket plain(ioc);
    plain.connect(ep);
    asio::write(plain, asio::buffer("GET / HTTP/1.1\r\nHost: " + std::string(kHost) + "\r\n\r\n"));
    std::string got;
    char data[512];
    beast::error_code ec;
    for (;;) {
      const size_t n = plain.read_some(asio::buffer(data), ec);
      if (ec) break;
      got.append(data, n);
    }
    EXPECT_EQ(ec, asio::error::eof) << ec.message();
    EXPECT_EQ(got.find("HTTP/"), std::string::npos) << got;
  }
  // Three bytes of a ClientHello and then nothing: closed at the header
  // timeout (5 s here), not held open.
  {
    tcp::socket stalled(ioc);
    stalled.connect(ep);
    asio::write(stalled, asio::buffer("\x16\x03\x01", 3));
    char data[64];
    beast::error_code ec;
    while (!ec) stalled.read_some(asio::buffer(data), ec);
    EXPECT_TRUE(ec == asio::error::eof || ec == asio::error::connection_reset) << ec.message();
  }
  HttpsResult r = httpsRequest(router_->tlsPort(), kHost, cert.cert, getRequest(kHost));
  ASSERT_EQ(r.error, "");
  EXPECT_EQ(r.resp.body(), "ok");
}

// Attack tests (branch attack).

// Upgrades `s` to a tunnel; the 101's leftover bytes go to `got`.
void upgradeOverTls(TlsStream& s, std::string& got) {
  beast::error_code ec;
  asio::write(s,
              asio::buffer("GET /ws HTTP/1.1\r\nHost: " + std::string(kHost) +
                           "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"),
              ec);
  ASSERT_FALSE(ec) << ec.message();
  beast::flat_buffer buf;
  http::response_parser<http::empty_body> p;
  http::read_header(s, buf, p, ec);
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_EQ(p.get().result_int(), 101);
  got.assign(static_cast<const char*>(buf.data().data()), buf.size());
}

// TLS 1.3 KeyUpdate (update_requested) from a WebSocket client while the
// router's write to it is blocked (the client is not reading a large pod
// stream): the router must answer with its own KeyUpdate once its pending
// record is out, and the tunnel must go on. A KeyUpdate is legal at any
// time (RFC 8446 4.6.3).
TEST_F(TlsRouterTest, KeyUpdateWhileATunnelWriteIsBlockedKeepsTheTunnel) {
  const std::string blob = patternBody(32 << 20, 'k');
  TestBackend pod(TestBackend::echoTunnel(blob));
  TestCert cert = startServing(pod);

  asio::io_context ioc;
  ssl::context ctx(ssl::context::tls_client);
  SSL_CTX_set_min_proto_version(ctx.native_handle(), TLS1_3_VERSION);
  TlsStream s(ioc, ctx);
  beast::error_code ec = tlsConnectSlowReader(s, router_->tlsPort(), kHost);
  ASSERT_FALSE(ec) << ec.message();
  std::string got;
  upgradeOverTls(s, got);
  std::this_thread::sleep_for(300ms);  // the router fills the socket and waits to write
  ASSERT_EQ(SSL_key_update(s.native_handle(), SSL_KEY_UPDATE_REQUESTED), 1);
  asio::write(s, asio::buffer(std::string("ping")), ec);  // the KeyUpdate goes out first
  ASSERT_FALSE(ec) << ec.message();
  std::this_thread::sleep_for(300ms);  // the router reads the KeyUpdate while its write waits
  const std::string want = blob + "echo:ping";
  char data[16384];
  while (got.size() < want.size()) {
    const size_t n = s.read_some(asio::buffer(data), ec);
    if (ec) break;
    got.append(data, n);
  }
  EXPECT_FALSE(ec) << "tunnel broken after " << got.size() << " of " << want.size()
                   << " bytes: " << ec.message();
  EXPECT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want) << "the tunnel's bytes arrived altered";
}

// A server SSL_CTX serving `c`.
SSL_CTX* serverContext(const TestCert& c) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  BIO* cb = BIO_new_mem_buf(c.cert.data(), static_cast<int>(c.cert.size()));
  X509* x = PEM_read_bio_X509(cb, nullptr, nullptr, nullptr);
  BIO* kb = BIO_new_mem_buf(c.key.data(), static_cast<int>(c.key.size()));
  EVP_PKEY* k = PEM_read_bio_PrivateKey(kb, nullptr, nullptr, nullptr);
  SSL_CTX_use_certificate(ctx, x);
  SSL_CTX_use_PrivateKey(ctx, k);
  X509_free(x);
  EVP_PKEY_free(k);
  BIO_free(cb);
  BIO_free(kb);
  return ctx;
}

// Counts NewSessionTicket messages the client receives (`arg`: int*).
void countTickets(int write_p, int, int content_type, const void* buf, size_t len, SSL*, void* arg) {
  if (write_p == 0 && content_type == SSL3_RT_HANDSHAKE && len > 0 &&
      static_cast<const unsigned char*>(buf)[0] == SSL3_MT_NEWSESSION_TICKET) {
    ++*static_cast<int*>(arg);
  }
}

// One TLS 1.3 session ticket per full handshake (each costs the server a
// key derivation and an encryption), a client resumes with it (the SNI
// callback switches contexts after OpenSSL checked the session: every
// server context has the same session ID context), and only under the
// name it was made for.
TEST_F(TlsRouterTest, OneSessionTicketPerHandshakeAndItResumes) {
  TestBackend pod(
      TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) { resp.body() = "ok"; }));
  startRouter();
  router_->setEndpoints(kRev, {pod.endpoint()});
  TestCert cert = selfSignedCert({kHost});
  TestCert other = selfSignedCert({"hello.apps.example.org"}, "other");
  router_->setCertificates(tableOf({cert, other}));
  ssl::context ctx(ssl::context::tls_client);
  SSL_SESSION* saved = nullptr;
  for (int round = 0; round < 3; ++round) {
    // (Round 2 offers kHost's session to the other host: not resumed.)
    const std::string sni = round == 2 ? "hello.apps.example.org" : kHost;
    asio::io_context ioc;
    TlsStream s(ioc, ctx);
    int tickets = 0;
    SSL_set_msg_callback(s.native_handle(), countTickets);
    SSL_set_msg_callback_arg(s.native_handle(), &tickets);
    if (saved != nullptr) SSL_set_session(s.native_handle(), saved);
    beast::error_code ec = tlsConnect(s, router_->tlsPort(), sni);
    if (round == 2) {
      // One host's session offered under another name: refused.
      EXPECT_TRUE(ec) << "a session of " << kHost << " resumed for " << sni;
      break;
    }
    ASSERT_FALSE(ec) << ec.message();
    ASSERT_STREQ(SSL_get_version(s.native_handle()), "TLSv1.3");
    StringRequest req = getRequest(sni);
    req.prepare_payload();
    http::write(s, req, ec);
    beast::flat_buffer buf;
    StringResponse resp;
    http::read(s, buf, resp, ec);  // (the tickets arrive before the response)
    ASSERT_FALSE(ec) << ec.message();
    EXPECT_EQ(resp.body(), "ok");
    if (round == 0) {
      EXPECT_EQ(tickets, 1) << "session tickets after a full handshake";
      EXPECT_FALSE(SSL_session_reused(s.native_handle()));
      saved = SSL_get1_session(s.native_handle());
      ASSERT_NE(saved, nullptr);
      ASSERT_TRUE(SSL_SESSION_is_resumable(saved)) << "(no ticket kept by the client)";
      SSL_shutdown(s.native_handle());  // (an unclean end makes OpenSSL's client drop the session)
    } else {
      EXPECT_TRUE(SSL_session_reused(s.native_handle())) << "the ticket did not resume the session";
    }
  }
  // And the other host is served in full handshakes as usual.
  HttpsResult r = httpsRequest(router_->tlsPort(), "hello.apps.example.org", other.cert,
                               getRequest("hello.apps.example.org"));
  EXPECT_EQ(r.error, "");
  EXPECT_EQ(r.peer_cert, other.cert);
  SSL_SESSION_free(saved);
}

// After a TlsSocket's socket is closed (the tunnel watchdog, the drain sweep, a pump's
// error path all close a ClientStream's socket while its TlsSocket lives
// on), a read or write must fail as on a closed asio socket
// (bad_descriptor) -- not recv/send on whatever the process opened since
// under the same number.
TEST(TlsSocketTest, AWriteAfterCloseNeverReachesAnotherConnectionWithTheSameFd) {
  asio::io_context ioc;
  TestCert cert = selfSignedCert({kHost});
  SSL_CTX* sctx = serverContext(cert);
  tcp::acceptor acc(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  tcp::acceptor acc2(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  const int port = acc.local_endpoint().port();
  asio::io_context cioc;
  ssl::context cctx(ssl::context::tls_client);
  TlsStream client(cioc, cctx);
  beast::error_code cec;
  std::thread ct([&] { cec = tlsConnect(client, port, kHost); });
  tcp::socket accepted = acc.accept();
  TlsSocket ts(std::move(accepted), sctx);
  beast::error_code hec = asio::error::would_block;
  asio::co_spawn(
      ioc, [&]() -> asio::awaitable<void> { co_await ts.handshake(hec); }, asio::detached);
  ioc.run();
  ct.join();
  ASSERT_FALSE(hec) << hec.message();
  ASSERT_FALSE(cec) << cec.message();

  const int old_fd = ts.next_layer().socket().native_handle();
  ts.next_layer().close();  // e.g. tunnelWatchdog: t->client.socket().close()
  // Another connection of the process opens now (an accept on another
  // worker, a pod connection): the lowest free number is the one just freed.
  tcp::socket victim(ioc);
  victim.open(tcp::v4());
  const int victim_fd = victim.native_handle();
  victim.connect(acc2.local_endpoint());
  tcp::socket victim_peer = acc2.accept();
  ASSERT_EQ(victim_fd, old_fd) << "(the fd was not reused; the repro needs it to be)";

  beast::error_code wec;
  size_t wn = 0;
  bool done = false;
  ts.async_write_some(asio::buffer(std::string("secret tunnel bytes")), [&](beast::error_code e, size_t n) {
    wec = e;
    wn = n;
    done = true;
  });
  ioc.restart();
  ioc.run();
  ASSERT_TRUE(done);
  EXPECT_TRUE(wec) << "a write on a closed TlsSocket succeeded (" << wn << " bytes)";
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(victim_peer.available(), 0u) << "the closed TlsSocket's record went to an unrelated connection";

  // And a read takes the unrelated connection's bytes.
  asio::write(victim_peer, asio::buffer(std::string("the victim's request")));
  std::this_thread::sleep_for(50ms);
  char data[256];
  beast::error_code rec;
  done = false;
  ts.async_read_some(asio::buffer(data), [&](beast::error_code e, size_t) {
    rec = e;
    done = true;
  });
  ioc.restart();
  ioc.run();
  ASSERT_TRUE(done);
  EXPECT_EQ(victim.available(), std::string("the victim's request").size())
      << "the closed TlsSocket consumed the victim connection's bytes (read ended: " << rec.message() << ")";
  SSL_CTX_free(sctx);
}

// An idle keep-alive TLS connection waits for its next request without a
// receive buffer (16 KiB each otherwise), and the request then arrives whole.
TEST(TlsSocketTest, AnIdleConnectionHoldsNoReceiveBuffer) {
  asio::io_context ioc;
  TestCert cert = selfSignedCert({kHost});
  SSL_CTX* sctx = serverContext(cert);
  tcp::acceptor acc(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  asio::io_context cioc;
  ssl::context cctx(ssl::context::tls_client);
  TlsStream client(cioc, cctx);
  beast::error_code cec;
  std::thread ct([&] { cec = tlsConnect(client, acc.local_endpoint().port(), kHost); });
  TlsSocket ts(acc.accept(), sctx);
  beast::error_code hec = asio::error::would_block;
  asio::co_spawn(
      ioc, [&]() -> asio::awaitable<void> { co_await ts.handshake(hec); }, asio::detached);
  ioc.run();
  ct.join();
  ASSERT_FALSE(hec) << hec.message();
  ASSERT_FALSE(cec) << cec.message();
  ts.next_layer().expires_after(10s);

  auto readOne = [&](std::string* got, bool* done) {
    auto data = std::make_shared<std::array<char, 256>>();
    ts.async_read_some(asio::buffer(*data), [got, done, data](beast::error_code e, size_t n) {
      if (!e) *got = std::string(data->data(), n);
      *done = true;
    });
  };
  for (const std::string req : {"GET /one HTTP/1.1\r\n\r\n", "GET /two HTTP/1.1\r\n\r\n"}) {
    std::string got;
    bool done = false;
    readOne(&got, &done);
    ioc.restart();
    for (int i = 0; i < 20 && !done; ++i) ioc.run_for(5ms);
    ASSERT_FALSE(done) << "a read completed with nothing sent";
    EXPECT_EQ(ts.receiveBufferBytes(), 0u) << "the idle connection holds a receive buffer";
    asio::write(client, asio::buffer(req));
    for (int i = 0; i < 400 && !done; ++i) ioc.run_for(5ms);
    ASSERT_TRUE(done);
    EXPECT_EQ(got, req);
    EXPECT_EQ(ts.receiveBufferBytes(), 0u) << "the buffer outlived the bytes it held";
  }
  SSL_CTX_free(sctx);
}

// Attack tests (branch attack-tls-idle): the idle TLS read without a buffer.

// A handshaken TlsSocket and a raw OpenSSL client on a blocking socket (a
// socket BIO: what the client's SSL calls write is on the wire at once).
struct IdlePair {
  asio::io_context ioc;
  TestCert cert = selfSignedCert({kHost});
  SSL_CTX* sctx = serverContext(cert);
  SSL_CTX* cctx = SSL_CTX_new(TLS_client_method());
  tcp::acceptor acc{ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
  tcp::socket csock{ioc};
  SSL* cssl = nullptr;
  std::unique_ptr<TlsSocket> ts;

  explicit IdlePair(int version = TLS1_3_VERSION) {
    SSL_CTX_set_min_proto_version(cctx, version);
    SSL_CTX_set_max_proto_version(cctx, version);
    csock.connect(acc.local_endpoint());
    ts = std::make_unique<TlsSocket>(acc.accept(), sctx);
    cssl = SSL_new(cctx);
    SSL_set_fd(cssl, csock.native_handle());
    SSL_set_tlsext_host_name(cssl, kHost);
    int cret = 0;
    std::thread ct([&] { cret = SSL_connect(cssl); });
    beast::error_code hec = asio::error::would_block;
    asio::co_spawn(
        ioc, [&]() -> asio::awaitable<void> { co_await ts->handshake(hec); }, asio::detached);
    ioc.run();
    ct.join();
    EXPECT_FALSE(hec) << hec.message();
    EXPECT_EQ(cret, 1);
    ts->next_layer().expires_after(10s);
  }
  ~IdlePair() {
    ts.reset();
    SSL_free(cssl);
    SSL_CTX_free(cctx);
    SSL_CTX_free(sctx);
  }
  // Runs the server's context until `done` or `limit`.
  void runUntil(const bool& done, std::chrono::milliseconds limit) {
    ioc.restart();
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!done && std::chrono::steady_clock::now() < end) ioc.run_for(5ms);
  }
  void clientWrite(const std::string& s) {
    size_t n = 0;
    ASSERT_EQ(SSL_write_ex(cssl, s.data(), s.size(), &n), 1);
    ASSERT_EQ(n, s.size());
  }
  size_t serverQueued() {
    int q = 0;
    ::ioctl(ts->next_layer().socket().native_handle(), FIONREAD, &q);
    return static_cast<size_t>(q);
  }
};

struct ReadResult {
  bool done = false;
  beast::error_code ec;
  std::string got;
};

void startRead(TlsSocket& ts, std::shared_ptr<ReadResult> r, size_t size = 16384) {
  auto data = std::make_shared<std::vector<char>>(size);
  ts.async_read_some(asio::buffer(*data), [r, data](beast::error_code e, size_t n) {
    r->ec = e;
    r->got.assign(data->data(), n);
    r->done = true;
  });
}

// The client's record fills the server's 16 KiB receive space exactly: the
// receive was not short, so the reactor's flag stays set (no markDrained),
// the next wait completes at once, its receive finds nothing (EAGAIN) and the
// operation waits again -- with the 16 KiB buffer fillSpace() made for that
// receive still held, for as long as the connection then stays idle.
TEST(TlsSocketTest, AnIdleConnectionAfterAReceiveThatFilledTheBufferHoldsNoReceiveBuffer) {
  IdlePair p;
  // TLS 1.3 AES-GCM: 5 header + 1 content type + 16 tag around the plaintext.
  const std::string body(TlsSocket::kReadBytes - 22, 'x');
  p.clientWrite(body);
  std::this_thread::sleep_for(50ms);
  ASSERT_EQ(p.serverQueued(), TlsSocket::kReadBytes) << "not one record of exactly 16 KiB";
  std::string got;
  while (got.size() < body.size()) {
    auto r = std::make_shared<ReadResult>();
    startRead(*p.ts, r);
    p.runUntil(r->done, 2s);
    ASSERT_TRUE(r->done);
    ASSERT_FALSE(r->ec) << r->ec.message();
    got += r->got;
  }
  ASSERT_EQ(got, body);
  auto r = std::make_shared<ReadResult>();
  startRead(*p.ts, r);
  p.runUntil(r->done, 100ms);
  ASSERT_FALSE(r->done) << "a read completed with nothing sent";
  EXPECT_EQ(p.ts->receiveBufferBytes(), 0u) << "the idle connection holds a receive buffer";
  p.clientWrite("ping");
  p.runUntil(r->done, 2s);
  ASSERT_TRUE(r->done);
  EXPECT_EQ(r->got, "ping");
}

// A client sends the first bytes of a record and stalls: OpenSSL takes them
// (no receive buffer held while it waits for the rest) and the deadline
// still ends the read.
TEST(TlsSocketTest, APartialRecordThenSilenceEndsAtTheDeadlineHoldingNoReceiveBuffer) {
  IdlePair p;
  p.ts->next_layer().expires_after(300ms);
  auto r = std::make_shared<ReadResult>();
  startRead(*p.ts, r);
  p.runUntil(r->done, 50ms);
  ASSERT_FALSE(r->done);
  asio::write(p.csock, asio::buffer(std::string("\x17\x03\x03", 3)));
  p.runUntil(r->done, 100ms);
  ASSERT_FALSE(r->done);
  EXPECT_EQ(p.ts->receiveBufferBytes(), 0u);
  const auto t0 = std::chrono::steady_clock::now();
  p.runUntil(r->done, 3s);
  ASSERT_TRUE(r->done) << "the deadline did not end a read stalled in a record";
  EXPECT_EQ(r->ec, beast::error::timeout) << r->ec.message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
}

// The socket closed while the read waits for readability (the drain sweep
// and a tunnel's watchdog close client sockets under a live TlsSocket): the
// read ends at once, and the next read fails rather than waiting.
TEST(TlsSocketTest, ACloseDuringTheIdleWaitEndsTheRead) {
  IdlePair p;
  auto r = std::make_shared<ReadResult>();
  startRead(*p.ts, r);
  p.runUntil(r->done, 50ms);
  ASSERT_FALSE(r->done);
  p.ts->next_layer().close();
  p.runUntil(r->done, 1s);
  ASSERT_TRUE(r->done) << "a read waiting on a closed socket never ended";
  EXPECT_TRUE(r->ec) << "a read on a closed socket succeeded";
  EXPECT_EQ(p.ts->receiveBufferBytes(), 0u);
  auto r2 = std::make_shared<ReadResult>();
  startRead(*p.ts, r2);
  p.runUntil(r2->done, 1s);
  ASSERT_TRUE(r2->done) << "a read after close waits";
  EXPECT_TRUE(r2->ec);
}

// A TLS 1.3 KeyUpdate (update_requested) alone, while the connection idles:
// the read takes it, goes on waiting without a buffer, then reads the next
// bytes under the new key; the server's next write carries its own KeyUpdate
// first, which the client accepts.
TEST(TlsSocketTest, AKeyUpdateWhileIdleIsTakenAndTheConnectionGoesOn) {
  IdlePair p;
  auto r = std::make_shared<ReadResult>();
  startRead(*p.ts, r);
  p.runUntil(r->done, 50ms);
  ASSERT_FALSE(r->done);
  ASSERT_EQ(SSL_key_update(p.cssl, SSL_KEY_UPDATE_REQUESTED), 1);
  ASSERT_EQ(SSL_do_handshake(p.cssl), 1);  // sends the KeyUpdate alone
  p.runUntil(r->done, 200ms);
  ASSERT_FALSE(r->done) << "a KeyUpdate completed the read: " << r->ec.message();
  EXPECT_EQ(p.serverQueued(), 0u) << "the KeyUpdate was not taken";
  EXPECT_EQ(p.ts->receiveBufferBytes(), 0u);
  p.clientWrite("ping");
  p.runUntil(r->done, 2s);
  ASSERT_TRUE(r->done);
  ASSERT_FALSE(r->ec) << r->ec.message();
  EXPECT_EQ(r->got, "ping");
  bool wrote = false;
  beast::error_code wec;
  p.ts->async_write_some(asio::buffer(std::string("pong")), [&](beast::error_code e, size_t) {
    wec = e;
    wrote = true;
  });
  p.runUntil(wrote, 2s);
  ASSERT_TRUE(wrote);
  ASSERT_FALSE(wec) << wec.message();
  char buf[16];
  size_t n = 0;
  ASSERT_EQ(SSL_read_ex(p.cssl, buf, sizeof buf, &n), 1);
  EXPECT_EQ(std::string(buf, n), "pong");
}

// A write and a read both pending while idle: the server's write fills the
// socket (the client does not read) and waits for writability; the read
// waits for readability without a buffer. The client then sends a
// KeyUpdate and bytes, and drains: both operations finish.
TEST(TlsSocketTest, AReadWaitingWithoutABufferAndABlockedWriteBothFinish) {
  IdlePair p;
  auto r = std::make_shared<ReadResult>();
  startRead(*p.ts, r);
  const std::string blob(8 << 20, 'b');
  size_t written = 0;
  bool wdone = false;
  beast::error_code wec;
  std::function<void()> more = [&] {
    p.ts->async_write_some(asio::buffer(blob.data() + written, blob.size() - written),
                           [&](beast::error_code e, size_t n) {
                             written += n;
                             if (e || written == blob.size()) {
                               wec = e;
                               wdone = true;
                               return;
                             }
                             more();
                           });
  };
  more();
  p.runUntil(wdone, 300ms);
  ASSERT_FALSE(wdone) << "the socket took 8 MiB";
  ASSERT_FALSE(r->done);
  ASSERT_EQ(SSL_key_update(p.cssl, SSL_KEY_UPDATE_REQUESTED), 1);
  p.clientWrite("ping");
  std::string got;
  std::thread reader([&] {
    char buf[65536];
    size_t n = 0;
    while (got.size() < blob.size() && SSL_read_ex(p.cssl, buf, sizeof buf, &n) == 1) got.append(buf, n);
  });
  p.runUntil(wdone, 10s);
  p.runUntil(r->done, 2s);
  reader.join();
  ASSERT_TRUE(wdone) << "the write never finished (" << written << " of " << blob.size() << ")";
  EXPECT_FALSE(wec) << wec.message();
  ASSERT_TRUE(r->done) << "the read never finished";
  EXPECT_FALSE(r->ec) << r->ec.message();
  EXPECT_EQ(r->got, "ping");
  EXPECT_EQ(got.size(), blob.size());
}

// A client that connects and sends nothing (no ClientHello): the handshake
// waits for it, under the header timeout. Like an idle kept-alive
// connection it needs no receive buffer while nothing has come; the
// handshake path still makes the 16 KiB one before its wait (fillSpace,
// then async_read_some), so each silent connection holds 16 KiB until the
// timeout.
TEST(TlsSocketTest, ASilentClientBeforeItsHelloHoldsNoReceiveBuffer) {
  asio::io_context ioc;
  TestCert cert = selfSignedCert({kHost});
  SSL_CTX* sctx = serverContext(cert);
  tcp::acceptor acc(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  tcp::socket c(ioc);
  c.connect(acc.local_endpoint());
  {
    TlsSocket ts(acc.accept(), sctx);
    ts.next_layer().expires_after(10s);
    bool done = false;
    beast::error_code hec;
    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
          co_await ts.handshake(hec);
          done = true;
        },
        asio::detached);
    for (int i = 0; i < 20 && !done; ++i) ioc.run_for(5ms);
    ASSERT_FALSE(done);
    EXPECT_EQ(ts.receiveBufferBytes(), 0u) << "a connection with nothing received holds a receive buffer";
    c.close();
    for (int i = 0; i < 200 && !done; ++i) ioc.run_for(5ms);
    EXPECT_TRUE(done);
  }
  ioc.run_for(20ms);
  SSL_CTX_free(sctx);
}

// What an idle TLS connection's server side holds on the heap: the read
// waiting for the next request costs no buffer (bound: 2 KiB a
// connection); the rest (printed) is OpenSSL's per-connection state (SSL,
// session, cipher contexts: OpenSSL holds no record buffers then --
// SSL_free_buffers frees nothing more), measured as the heap freed when the
// server sockets go.
TEST(TlsSocketTest, HeapHeldByAnIdleServerConnection) {
  constexpr int kConns = 40;
  std::vector<std::unique_ptr<IdlePair>> pairs;
  std::vector<std::shared_ptr<ReadResult>> reads;
  for (int i = 0; i < kConns; ++i) pairs.push_back(std::make_unique<IdlePair>());
  malloc_trim(0);
  const size_t handshaken = mallinfo2().uordblks;
  for (auto& p : pairs) {
    auto r = std::make_shared<ReadResult>();
    startRead(*p->ts, r, 256);  // (the caller's buffer: small, as the router's 4 KiB)
    p->runUntil(r->done, 20ms);
    ASSERT_FALSE(r->done);
    reads.push_back(r);
  }
  const size_t idle = mallinfo2().uordblks;
  for (size_t i = 0; i < pairs.size(); ++i) {  // (the read ends before its TlsSocket goes)
    pairs[i]->ts->next_layer().close();
    pairs[i]->runUntil(reads[i]->done, 1s);
    ASSERT_TRUE(reads[i]->done);
    pairs[i]->ts.reset();
  }
  const size_t gone = mallinfo2().uordblks;
  const long waiting = (static_cast<long>(idle) - static_cast<long>(handshaken)) / kConns;
  std::printf("server side of an idle TLS 1.3 connection: %zu heap bytes, of which the pending read %ld\n",
              (idle - gone) / kConns, waiting);
  EXPECT_LT(waiting, 2048);
}

size_t openFds() {
  size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// Each socket fd of this process as "local_port->remote_port state".
std::string fdReport() {
  std::map<std::string, std::string> by_inode;
  for (const char* f : {"/proc/self/net/tcp", "/proc/self/net/tcp6"}) {
    std::ifstream in(f);
    std::string line;
    std::getline(in, line);
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string sl, local, remote, st, q, t, retr, uid, timeout, inode;
      ls >> sl >> local >> remote >> st >> q >> t >> retr >> uid >> timeout >> inode;
      auto port = [](const std::string& a) {
        return std::to_string(std::stoi(a.substr(a.find(':') + 1), nullptr, 16));
      };
      by_inode[inode] = port(local) + "->" + port(remote) + " st=" + st;
    }
  }
  std::string out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(e.path(), ec).string();
    if (target.rfind("socket:[", 0) != 0) continue;
    const std::string inode = target.substr(8, target.size() - 9);
    out += e.path().filename().string() + ": " + (by_inode.count(inode) ? by_inode[inode] : "?") + "\n";
  }
  return out;
}

// A client that never reads a 32 MiB response is dropped at
// client_io_timeout; its connection and pod connection are released (no fd
// left behind), and TLS connections aborted at every stage leave no fd.
TEST_F(TlsRouterTest, ANonReadingClientIsDroppedAndAbortedConnectionsLeakNoFd) {
  const std::string big = patternBody(32 << 20, 'n');
  TestBackend pod(
      TestBackend::httpHandler([&big](const StringRequest&, StringResponse& resp) { resp.body() = big; }));
  RouterOptions o;
  o.address = "127.0.0.1";
  o.port = 0;
  o.tls_address = "127.0.0.1";
  o.tls_port = 0;
  o.admin_port = 0;
  o.threads = 2;
  o.header_read_timeout = 2s;
  o.client_io_timeout = 2s;
  router_ = std::make_unique<Router>(o, RealTimeSource::instance());
  ASSERT_TRUE(router_->start().isOk());
  RouteSpec r;
  r.namespace_name = "default";
  r.name = "hello";
  r.hosts = {kHost};
  r.traffic = {{kRev, 100, ""}};
  router_->setRoutingTable(*RoutingTable::build({r}, "hash-1"));
  router_->setEndpoints(kRev, {pod.endpoint()});
  TestCert cert = selfSignedCert({kHost});
  router_->setCertificates(tableOf({cert}));
  // Warm up (the pool's first pod connection, OpenSSL's lazy tables).
  ASSERT_EQ(httpsRequest(router_->tlsPort(), kHost, cert.cert, getRequest(kHost, "/warm")).error, "");
  std::this_thread::sleep_for(200ms);
  const size_t base = openFds();
  const int pod_conns_at_base = pod.connections();
  // (TestBackend keeps each accepted pod socket open until it is destroyed.)
  auto podFds = [&] { return static_cast<size_t>(pod.connections() - pod_conns_at_base); };
  {
    asio::io_context ioc;
    ssl::context ctx(ssl::context::tls_client);
    TlsStream s(ioc, ctx);
    ASSERT_FALSE(tlsConnectSlowReader(s, router_->tlsPort(), kHost));
    StringRequest req = getRequest(kHost);
    req.prepare_payload();
    beast::error_code ec;
    http::write(s, req, ec);
    ASSERT_FALSE(ec);
    const auto t0 = std::chrono::steady_clock::now();
    while (router_->openConnections() > 0 && std::chrono::steady_clock::now() - t0 < 10s)
      std::this_thread::sleep_for(50ms);
    EXPECT_EQ(router_->openConnections(), 0u) << "a client that never reads is still held after 10 s";
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 6s);
  }
  const tcp::endpoint ep(asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(router_->tlsPort()));
  for (int round = 0; round < 20; ++round) {
    asio::io_context ioc;
    ssl::context ctx(ssl::context::tls_client);
    for (int stage = 0; stage < 5; ++stage) {
      TlsStream s(ioc, ctx);
      beast::error_code ec;
      s.next_layer().connect(ep, ec);
      ASSERT_FALSE(ec);
      if (stage == 0) {
        asio::write(s.next_layer(), asio::buffer("\x16\x03\x01\x02\x00\x01", 6), ec);  // half a ClientHello
      } else {
        SSL_set_tlsext_host_name(s.native_handle(), kHost);
        s.handshake(ssl::stream_base::client, ec);
        ASSERT_FALSE(ec) << ec.message();
        if (stage >= 2)
          asio::write(s,
                      asio::buffer(std::string("POST / HTTP/1.1\r\nHost: ") + kHost +
                                   "\r\nContent-Length: 100000\r\n\r\npartial"),
                      ec);
        if (stage == 3)
          asio::write(s.next_layer(), asio::buffer("\x17\x03\x03\x40\x00zz", 7), ec);  // half a record
        if (stage == 4) SSL_shutdown(s.native_handle());  // close_notify mid-body
      }
      // An RST (linger 0) for half of them, a FIN for the others.
      if (round % 2 == 0) s.next_layer().set_option(asio::socket_base::linger(true, 0), ec);
      s.next_layer().close(ec);
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  while ((router_->openConnections() > 0 || openFds() > base + podFds()) &&
         std::chrono::steady_clock::now() - t0 < 8s)
    std::this_thread::sleep_for(100ms);
  EXPECT_EQ(router_->openConnections(), 0u);
  EXPECT_LE(openFds(), base + podFds())
      << "fds grew over aborted TLS connections; pod port " << pod.port() << ", router https "
      << router_->tlsPort() << ", http " << router_->port() << "\n"
      << fdReport();
  HttpsResult after = httpsRequest(router_->tlsPort(), kHost, cert.cert, getRequest(kHost));
  EXPECT_EQ(after.error, "");
  EXPECT_EQ(after.resp.body().size(), big.size());
}

}  // namespace
}  // namespace knap::router
