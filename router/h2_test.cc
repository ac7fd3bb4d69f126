// HTTP/2 on the router's HTTPS listener, over real loopback sockets, with
// nghttp2's client session as the client: ALPN h2, many concurrent streams
// on one connection each answered with its own pod response, a request
// body larger than the stream window, a stream to a revision at zero held
// until a pod is ready, a rapid-reset flood answered with GOAWAY while
// other connections are served, malformed requests (Host against
// :authority, oversized headers) answered per stream, drain sending GOAWAY,
// the slowloris shapes bounded (a header block never finished, a stream
// never ended by its client, a stream window kept at 0, a connection window
// kept at 0).
#include <gtest/gtest.h>
#include <nghttp2/nghttp2.h>
#include <openssl/ssl.h>
#include <poll.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <thread>

#include <boost/asio/ssl.hpp>

#include "router/router.h"
#include "router/test_backend.h"

namespace knap::router {
namespace {

using namespace knap::router::testing;
using namespace std::chrono_literals;
namespace ssl = boost::asio::ssl;

constexpr const char* kHost = "hello.default.example.com";
constexpr const char* kRev = "default/hello-00001";

// A blocking HTTP/2 client connection (nghttp2 client session over OpenSSL).
class H2TestClient {
 public:
  struct Resp {
    int status = 0;
    std::string body;
    bool closed = false;
    uint32_t error = 0;  // RST_STREAM code
  };

  // `alpn`: the protocols offered, in ALPN wire format (default: h2, http/1.1).
  // `auto_window_update` false: the client never sends WINDOW_UPDATE, so
  // its connection window stays at 0 once 65,535 body bytes came in.
  H2TestClient(int port, const std::string& sni,
               std::string_view alpn = std::string_view("\x02h2\x08http/1.1", 12),
               bool auto_window_update = true)
      : ctx_(ssl::context::tls_client), s_(ioc_, ctx_) {
    SSL_set_alpn_protos(s_.native_handle(), reinterpret_cast<const unsigned char*>(alpn.data()),
                        static_cast<unsigned>(alpn.size()));
    const beast::error_code ec = tlsConnect(s_, port, sni);
    if (ec) {
      error_ = ec.message();
      return;
    }
    const unsigned char* p = nullptr;
    unsigned int len = 0;
    SSL_get0_alpn_selected(s_.native_handle(), &p, &len);
    alpn_.assign(reinterpret_cast<const char*>(p), len);
    nghttp2_session_callbacks* cbs = nullptr;
    nghttp2_session_callbacks_new(&cbs);
    nghttp2_session_callbacks_set_on_header_callback(
        cbs,
        [](nghttp2_session*, const nghttp2_frame* f, const uint8_t* n, size_t nl, const uint8_t* v, size_t vl,
           uint8_t, void* ud) -> int {
          auto* self = static_cast<H2TestClient*>(ud);
          if (std::string_view(reinterpret_cast<const char*>(n), nl) == ":status") {
            const int code = std::stoi(std::string(reinterpret_cast<const char*>(v), vl));
            if (code >= 200) self->resps_[f->hd.stream_id].status = code;
          }
          return 0;
        });
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
        cbs, [](nghttp2_session*, uint8_t, int32_t id, const uint8_t* d, size_t len, void* ud) -> int {
          static_cast<H2TestClient*>(ud)->resps_[id].body.append(reinterpret_cast<const char*>(d), len);
          return 0;
        });
    nghttp2_session_callbacks_set_on_stream_close_callback(
        cbs, [](nghttp2_session*, int32_t id, uint32_t code, void* ud) -> int {
          auto& r = static_cast<H2TestClient*>(ud)->resps_[id];
          r.closed = true;
          r.error = code;
          return 0;
        });
    nghttp2_session_callbacks_set_on_frame_recv_callback(
        cbs, [](nghttp2_session*, const nghttp2_frame* f, void* ud) -> int {
          auto* self = static_cast<H2TestClient*>(ud);
          if (f->hd.type == NGHTTP2_GOAWAY) {
            self->goaway_ = true;
            self->goaway_error_ = f->goaway.error_code;
          }
          return 0;
        });
    nghttp2_option* opt = nullptr;
    nghttp2_option_new(&opt);
    if (!auto_window_update) nghttp2_option_set_no_auto_window_update(opt, 1);
    nghttp2_session_client_new2(&ng_, cbs, this, opt);
    nghttp2_option_del(opt);
    nghttp2_session_callbacks_del(cbs);
    nghttp2_submit_settings(ng_, NGHTTP2_FLAG_NONE, nullptr, 0);
  }
  ~H2TestClient() {
    if (ng_) nghttp2_session_del(ng_);
  }
  const std::string& error() const { return error_; }
  const std::string& alpn() const { return alpn_; }
  bool goaway() const { return goaway_; }
  uint32_t goawayError() const { return goaway_error_; }
  bool eof() const { return eof_; }
  const Resp& resp(int32_t id) { return resps_[id]; }

  int32_t request(const std::string& method, const std::string& path, const std::string& body = "",
                  std::vector<std::pair<std::string, std::string>> extra = {},
                  const std::string& host = kHost) {
    std::vector<std::pair<std::string, std::string>> h = {
        {":method", method}, {":scheme", "https"}, {":authority", host}, {":path", path}};
    if (!body.empty()) h.emplace_back("content-length", std::to_string(body.size()));
    for (auto& e : extra) h.push_back(e);
    std::vector<nghttp2_nv> nv;
    for (auto& [n, v] : h) {
      nv.push_back({reinterpret_cast<uint8_t*>(n.data()), reinterpret_cast<uint8_t*>(v.data()), n.size(),
                    v.size(), NGHTTP2_NV_FLAG_NONE});
    }
    auto src = std::make_shared<std::pair<std::string, size_t>>(body, 0);
    nghttp2_data_provider prd;
    prd.source.ptr = src.get();
    prd.read_callback = [](nghttp2_session*, int32_t, uint8_t* buf, size_t len, uint32_t* flags,
                           nghttp2_data_source* source, void*) -> ssize_t {
      auto* b = static_cast<std::pair<std::string, size_t>*>(source->ptr);
      const size_t n = std::min(len, b->first.size() - b->second);
      std::memcpy(buf, b->first.data() + b->second, n);
      b->second += n;
      if (b->second == b->first.size()) *flags |= NGHTTP2_DATA_FLAG_EOF;
      return static_cast<ssize_t>(n);
    };
    const int32_t id =
        nghttp2_submit_request(ng_, nullptr, nv.data(), nv.size(), body.empty() ? nullptr : &prd, nullptr);
    bodies_.push_back(src);
    resps_[id];
    return id;
  }
  // A request with exactly these fields (pseudo-headers included), no body.
  int32_t requestFields(std::vector<std::pair<std::string, std::string>> h) {
    std::vector<nghttp2_nv> nv;
    for (auto& [n, v] : h) {
      nv.push_back({reinterpret_cast<uint8_t*>(n.data()), reinterpret_cast<uint8_t*>(v.data()), n.size(),
                    v.size(), NGHTTP2_NV_FLAG_NONE});
    }
    const int32_t id = nghttp2_submit_request(ng_, nullptr, nv.data(), nv.size(), nullptr, nullptr);
    resps_[id];
    return id;
  }
  // A request whose body never comes: HEADERS without END_STREAM, then
  // the data source defers for ever.
  int32_t requestOpenBody(const std::string& path, const std::string& host) {
    std::vector<std::pair<std::string, std::string>> h = {
        {":method", "POST"}, {":scheme", "https"}, {":authority", host}, {":path", path}};
    std::vector<nghttp2_nv> nv;
    for (auto& [n, v] : h) {
      nv.push_back({reinterpret_cast<uint8_t*>(n.data()), reinterpret_cast<uint8_t*>(v.data()), n.size(),
                    v.size(), NGHTTP2_NV_FLAG_NONE});
    }
    nghttp2_data_provider prd;
    prd.source.ptr = nullptr;
    prd.read_callback = [](nghttp2_session*, int32_t, uint8_t*, size_t, uint32_t*, nghttp2_data_source*,
                           void*) -> ssize_t { return NGHTTP2_ERR_DEFERRED; };
    const int32_t id = nghttp2_submit_request(ng_, nullptr, nv.data(), nv.size(), &prd, nullptr);
    resps_[id];
    return id;
  }
  // A HEADERS frame written by hand (so END_HEADERS can be left out), on
  // the next stream id; its fields are literals that leave the HPACK
  // tables alone. Returns the stream id.
  int32_t rawHeaders(std::vector<std::pair<std::string, std::string>> h, uint8_t flags) {
    const int32_t id = nghttp2_session_get_next_stream_id(ng_);
    nghttp2_session_set_next_stream_id(ng_, id + 2);
    std::vector<nghttp2_nv> nv;
    for (auto& [n, v] : h) {
      nv.push_back({reinterpret_cast<uint8_t*>(n.data()), reinterpret_cast<uint8_t*>(v.data()), n.size(),
                    v.size(), NGHTTP2_NV_FLAG_NO_INDEX});
    }
    nghttp2_hd_deflater* d = nullptr;
    nghttp2_hd_deflate_new(&d, 4096);
    std::string block(nghttp2_hd_deflate_bound(d, nv.data(), nv.size()), '\0');
    const ssize_t n = nghttp2_hd_deflate_hd(d, reinterpret_cast<uint8_t*>(block.data()), block.size(),
                                            nv.data(), nv.size());
    nghttp2_hd_deflate_del(d);
    block.resize(n > 0 ? static_cast<size_t>(n) : 0);
    std::string frame;
    const size_t len = block.size();
    frame += static_cast<char>((len >> 16) & 0xff);
    frame += static_cast<char>((len >> 8) & 0xff);
    frame += static_cast<char>(len & 0xff);
    frame += '\x01';  // HEADERS
    frame += static_cast<char>(flags);
    frame += static_cast<char>((id >> 24) & 0x7f);
    frame += static_cast<char>((id >> 16) & 0xff);
    frame += static_cast<char>((id >> 8) & 0xff);
    frame += static_cast<char>(id & 0xff);
    frame += block;
    flush();
    beast::error_code ec;
    asio::write(s_, asio::buffer(frame), ec);
    return id;
  }
  // SETTINGS_INITIAL_WINDOW_SIZE: how much response body a stream may be sent.
  void setInitialWindow(uint32_t size) {
    const nghttp2_settings_entry e{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, size};
    nghttp2_submit_settings(ng_, NGHTTP2_FLAG_NONE, &e, 1);
  }
  void ping() { nghttp2_submit_ping(ng_, NGHTTP2_FLAG_NONE, nullptr); }
  // An HTTP/1.1 GET on this connection (when ALPN chose http/1.1).
  StringResponse http11Get(const std::string& target) {
    http::request<http::string_body> req(http::verb::get, target, 11);
    req.set(http::field::host, kHost);
    StringResponse resp;
    beast::flat_buffer buf;
    beast::error_code ec;
    http::write(s_, req, ec);
    if (!ec) http::read(s_, buf, resp, ec);
    if (ec) resp.result(599);
    return resp;
  }
  // Bytes straight onto the TCP connection, under TLS (a broken record).
  void sendRaw(const std::string& bytes) {
    beast::error_code ec;
    asio::write(s_.next_layer(), asio::buffer(bytes), ec);
  }
  void reset(int32_t id) { nghttp2_submit_rst_stream(ng_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL); }

  // Writes whatever nghttp2 has queued.
  bool flush() {
    for (;;) {
      const uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(ng_, &data);
      if (n < 0) return false;
      if (n == 0) return true;
      beast::error_code ec;
      asio::write(s_, asio::buffer(data, static_cast<size_t>(n)), ec);
      if (ec) return false;
    }
  }

  // Runs the connection until `done()` or the deadline; false on timeout.
  bool runUntil(const std::function<bool()>& done, std::chrono::seconds limit = 30s) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (!flush() || eof_) return done();
      if (std::chrono::steady_clock::now() > end) return false;
      if (!buffered()) {
        pollfd p{s_.next_layer().native_handle(), POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0) continue;
      }
      char buf[16384];
      beast::error_code ec;
      const size_t n = s_.read_some(asio::buffer(buf), ec);
      if (ec) {
        eof_ = true;
        return done();
      }
      if (nghttp2_session_mem_recv(ng_, reinterpret_cast<const uint8_t*>(buf), n) < 0) {
        eof_ = true;
        return done();
      }
    }
    return true;
  }
  // Bytes already received but not yet returned by read_some: decrypted
  // (SSL_pending), in OpenSSL's record buffer, or still in the BIO pair
  // between ssl::stream's engine and OpenSSL (read_some returns one record
  // at a time, so a socket read carrying several leaves the rest there:
  // polling the socket then would wait for bytes that have arrived).
  bool buffered() {
    SSL* ssl = s_.native_handle();
    return SSL_pending(ssl) > 0 || SSL_has_pending(ssl) == 1 || BIO_ctrl_pending(SSL_get_rbio(ssl)) > 0;
  }
  bool waitClosed(int32_t id, std::chrono::seconds limit = 30s) {
    return runUntil([&] { return resps_[id].closed; }, limit);
  }
  bool allClosed(const std::vector<int32_t>& ids) {
    for (int32_t id : ids) {
      if (!resps_[id].closed) return false;
    }
    return true;
  }
  // One GET, the connection run until its stream closes or 30 s pass (then
  // the answer's `closed` is false).
  const Resp& getAndWait(const std::string& path, std::vector<std::pair<std::string, std::string>> extra = {},
                         const std::string& host = kHost) {
    const int32_t id = request("GET", path, "", std::move(extra), host);
    waitClosed(id);
    return resps_[id];
  }

 private:
  asio::io_context ioc_;
  ssl::context ctx_;
  TlsStream s_;
  nghttp2_session* ng_ = nullptr;
  std::string error_, alpn_;
  std::map<int32_t, Resp> resps_;
  std::vector<std::shared_ptr<std::pair<std::string, size_t>>> bodies_;
  bool goaway_ = false;
  uint32_t goaway_error_ = 0;
  bool eof_ = false;
};

// The stream closed with `status` and, unless null, exactly `body`.
::testing::AssertionResult answered(const H2TestClient::Resp& r, int status, const char* body = nullptr) {
  if (!r.closed) return ::testing::AssertionFailure() << "the stream did not close in time";
  if (r.status != status || (body != nullptr && r.body != body)) {
    return ::testing::AssertionFailure()
           << "status " << r.status << " (want " << status << "), body \"" << r.body << "\""
           << (body ? " (want \"" + std::string(body) + "\")" : "");
  }
  return ::testing::AssertionSuccess();
}

// The pod answers "<method> <target> <body size> <X-Forwarded-Proto>" for every request.
TestBackend::ConnHandler echoPod() {
  return TestBackend::httpHandler([](const StringRequest& req, StringResponse& resp) {
    resp.body() = std::string(req.method_string()) + " " + std::string(req.target()) + " " +
                  std::to_string(req.body().size()) + " " + std::string(req["X-Forwarded-Proto"]);
  });
}

class H2RouterTest : public ::testing::Test {
 protected:
  void startRouter(bool http2 = true, const std::function<void(RouterOptions&)>& tweak = {}) {
    RouterOptions o;
    o.http2 = http2;
    o.address = "127.0.0.1";
    o.port = 0;
    o.tls_address = "127.0.0.1";
    o.tls_port = 0;
    o.threads = 2;
    o.header_read_timeout = 5s;
    if (tweak) tweak(o);
    router_ = std::make_unique<Router>(o, RealTimeSource::instance());
    Status s = router_->start();
    ASSERT_TRUE(s.isOk()) << s.toString();
    RouteSpec r;
    r.namespace_name = "default";
    r.name = "hello";
    r.hosts = {kHost};
    r.traffic = {{kRev, 100, ""}};
    auto t = RoutingTable::build({r}, "hash-1");
    ASSERT_TRUE(t.isOk()) << t.status().toString();
    router_->setRoutingTable(*t);
    router_->setCertificates(tableOf({selfSignedCert({kHost})}));
  }
  // The router (HTTP/2 on, `tweak` applied) with the echo pod behind kRev.
  void startWithEchoPod(const std::function<void(RouterOptions&)>& tweak = {}) {
    pod_ = std::make_unique<TestBackend>(echoPod());
    startRouter(true, tweak);
    router_->setEndpoints(kRev, {pod_->endpoint()});
  }
  void TearDown() override {
    if (router_) router_->stop();
  }
  std::unique_ptr<TestBackend> pod_;
  std::unique_ptr<Router> router_;
};

TEST_F(H2RouterTest, ConcurrentStreamsOnOneConnectionEachGetTheirOwnAnswer) {
  startWithEchoPod();
  H2TestClient c(router_->tlsPort(), kHost);
  ASSERT_EQ(c.error(), "");
  ASSERT_EQ(c.alpn(), "h2");
  std::vector<int32_t> ids;
  for (int i = 0; i < 60; ++i) ids.push_back(c.request("GET", "/id/" + std::to_string(i)));
  ASSERT_TRUE(c.runUntil([&] { return c.allClosed(ids); }));
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto& r = c.resp(ids[i]);
    EXPECT_EQ(r.error, 0u) << i;
    EXPECT_EQ(r.status, 200) << i;
    EXPECT_EQ(r.body, "GET /id/" + std::to_string(i) + " 0 https") << i;
  }
  // An unknown host on the same connection: the router's own 404.
  const auto& other = c.getAndWait("/", {}, "nobody.example.com");
  ASSERT_TRUE(answered(other, 404));
  EXPECT_NE(other.body.find("no route for host"), std::string::npos) << other.body;
}

TEST_F(H2RouterTest, RequestBodyLargerThanTheWindowIsStreamedToThePod) {
  startWithEchoPod();
  H2TestClient c(router_->tlsPort(), kHost);
  ASSERT_EQ(c.error(), "");
  const std::string body(300 * 1024, 'b');
  const int32_t a = c.request("POST", "/up", body);
  const int32_t b = c.request("POST", "/up2", std::string(10, 'x'));
  ASSERT_TRUE(c.runUntil([&] { return c.resp(a).closed && c.resp(b).closed; }));
  EXPECT_EQ(c.resp(a).status, 200);
  EXPECT_EQ(c.resp(a).body, "POST /up 307200 https");
  EXPECT_EQ(c.resp(b).body, "POST /up2 10 https");
}

TEST_F(H2RouterTest, StreamToARevisionAtZeroIsHeldUntilAPodIsReady) {
  TestBackend pod(echoPod());
  startRouter();
  std::atomic<int> cold{0};
  router_->on_cold_request = [&](const std::string&) { cold.fetch_add(1); };
  H2TestClient c(router_->tlsPort(), kHost);
  ASSERT_EQ(c.error(), "");
  const int32_t id = c.request("GET", "/cold");
  // Held in the activator queue (no answer yet) until the endpoints arrive.
  ASSERT_TRUE(c.runUntil([&] { return router_->queued(kRev) == 1; }, 20s));
  EXPECT_FALSE(c.resp(id).closed);
  router_->setEndpoints(kRev, {pod.endpoint()});
  ASSERT_TRUE(c.waitClosed(id));
  EXPECT_TRUE(answered(c.resp(id), 200, "GET /cold 0 https"));
}

TEST_F(H2RouterTest, RapidResetFloodGetsGoawayAndOthersAreStillServed) {
  startWithEchoPod();
  H2TestClient bad(router_->tlsPort(), kHost);
  ASSERT_EQ(bad.error(), "");
  for (int i = 0; i < 1000 && !bad.eof(); ++i) {
    const int32_t id = bad.request("GET", "/flood");
    if (!bad.flush()) break;
    bad.reset(id);
    if (!bad.flush()) break;
  }
  ASSERT_TRUE(bad.runUntil([&] { return bad.goaway(); }, 30s));
  EXPECT_EQ(bad.goawayError(), static_cast<uint32_t>(NGHTTP2_ENHANCE_YOUR_CALM));
  // The router goes on serving everyone else.
  H2TestClient good(router_->tlsPort(), kHost);
  ASSERT_EQ(good.error(), "");
  EXPECT_TRUE(answered(good.getAndWait("/after"), 200, "GET /after 0 https"));
}

// Resets the server sends count too (MadeYouReset, CVE-2025-8671): a flood
// of malformed requests, each reset by the router, ends in GOAWAY
// ENHANCE_YOUR_CALM, and other connections are still served.
TEST_F(H2RouterTest, ProvokedResetFloodGetsGoaway) {
  startWithEchoPod();
  H2TestClient bad(router_->tlsPort(), kHost);
  ASSERT_EQ(bad.error(), "");
  for (int round = 0; round < 20 && !bad.goaway() && !bad.eof(); ++round) {
    std::vector<int32_t> ids;
    for (int i = 0; i < 50; ++i) ids.push_back(bad.request("GET", "/bad", "", {{"connection", "close"}}));
    bad.runUntil([&] { return bad.goaway() || bad.allClosed(ids); }, 30s);
  }
  ASSERT_TRUE(bad.runUntil([&] { return bad.goaway(); }, 30s));
  EXPECT_EQ(bad.goawayError(), static_cast<uint32_t>(NGHTTP2_ENHANCE_YOUR_CALM));
  H2TestClient good(router_->tlsPort(), kHost);
  ASSERT_EQ(good.error(), "");
  EXPECT_TRUE(answered(good.getAndWait("/after"), 200));
}

TEST_F(H2RouterTest, MalformedRequestsAreRefusedPerStream) {
  startWithEchoPod();
  H2TestClient c(router_->tlsPort(), kHost);
  ASSERT_EQ(c.error(), "");
  ASSERT_TRUE(answered(c.getAndWait("/first"), 200));
  // A Host header naming another host than :authority: 400, not routed.
  const auto& mixed = c.getAndWait("/mixed", {{"host", "other.example.com"}});
  ASSERT_TRUE(answered(mixed, 400));
  EXPECT_NE(mixed.body.find("differs from :authority"), std::string::npos) << mixed.body;
  // Headers over max_header_bytes: 431.
  ASSERT_TRUE(answered(c.getAndWait("/big", {{"x-big", std::string(40 * 1024, 'a')}}), 431));
  // The connection itself goes on.
  EXPECT_TRUE(answered(c.getAndWait("/fine"), 200, "GET /fine 0 https"));
}

TEST_F(H2RouterTest, DrainSendsGoawayAndFinishesOpenStreams) {
  std::atomic<bool> release{false};
  TestBackend pod(TestBackend::httpHandler([&](const StringRequest& req, StringResponse& resp) {
    while (!release.load()) std::this_thread::sleep_for(10ms);
    resp.body() = "late " + std::string(req.target());
  }));
  startRouter();
  router_->setEndpoints(kRev, {pod.endpoint()});
  H2TestClient c(router_->tlsPort(), kHost);
  ASSERT_EQ(c.error(), "");
  const int32_t id = c.request("GET", "/slow");
  ASSERT_TRUE(c.runUntil([&] { return pod.connections() > 0; }, 20s));
  std::thread drainer([&] { router_->drain(30s); });
  ASSERT_TRUE(c.runUntil([&] { return c.goaway(); }, 20s));
  EXPECT_EQ(c.goawayError(), static_cast<uint32_t>(NGHTTP2_NO_ERROR));
  release = true;
  ASSERT_TRUE(c.waitClosed(id));
  EXPECT_TRUE(answered(c.resp(id), 200, "late /slow"));
  drainer.join();
}

// A TLS record that does not decrypt, mid-session: the connection ends (no
// hang, no crash) and the router goes on serving others.
TEST_F(H2RouterTest, GarbageUnderTlsEndsTheConnectionOnly) {
  startWithEchoPod();
  H2TestClient bad(router_->tlsPort(), kHost);
  ASSERT_EQ(bad.error(), "");
  ASSERT_TRUE(answered(bad.getAndWait("/first"), 200));
  // An application-data record header and 64 bytes of noise.
  bad.sendRaw(std::string("\x17\x03\x03\x00\x40", 5) + std::string(64, '\x5a'));
  EXPECT_TRUE(bad.runUntil([&] { return bad.eof(); }, 20s));
  H2TestClient good(router_->tlsPort(), kHost);
  ASSERT_EQ(good.error(), "");
  EXPECT_TRUE(answered(good.getAndWait("/after"), 200, "GET /after 0 https"));
}

// A HEADERS frame without END_HEADERS and then silence (the CONTINUATION
// never comes): past header_read_timeout GOAWAY and the connection closed.
TEST_F(H2RouterTest, UnfinishedHeaderBlockEndsTheConnection) {
  startWithEchoPod([](RouterOptions& o) { o.header_read_timeout = 2s; });
  H2TestClient c(router_->tlsPort(), kHost);
  ASSERT_EQ(c.error(), "");
  ASSERT_TRUE(answered(c.getAndWait("/first"), 200));
  c.rawHeaders({{":method", "GET"}, {":scheme", "https"}, {":authority", kHost}, {":path", "/half"}},
               0x1 /* END_STREAM, no END_HEADERS */);
  EXPECT_TRUE(c.runUntil([&] { return c.eof(); }, 60s));
  EXPECT_TRUE(c.goaway());
}

// A stream whose client never ends its side (HEADERS without END_STREAM,
// no DATA): once the answer (here the router's own 404) is whole, the
// router resets it with NO_ERROR instead of keeping it half-closed.
TEST_F(H2RouterTest, AnsweredStreamWhoseClientNeverEndsIsReset) {
  startWithEchoPod();
  H2TestClient c(router_->tlsPort(), kHost);
  ASSERT_EQ(c.error(), "");
  const int32_t id = c.requestOpenBody("/open", "nobody.example.com");
  ASSERT_TRUE(c.waitClosed(id, 60s));
  EXPECT_EQ(c.resp(id).status, 404);
  EXPECT_EQ(c.resp(id).error, static_cast<uint32_t>(NGHTTP2_NO_ERROR));
  // The connection goes on.
  EXPECT_TRUE(answered(c.getAndWait("/fine"), 200, "GET /fine 0 https"));
}

// SETTINGS_INITIAL_WINDOW_SIZE=0 and then requests: their responses can
// never be sent; after client_io_timeout each stream is reset (CANCEL) and
// its buffered output dropped, rather than held for ever.
TEST_F(H2RouterTest, StreamsWhoseWindowStaysShutAreCancelled) {
  startWithEchoPod([](RouterOptions& o) { o.client_io_timeout = 2s; });
  H2TestClient c(router_->tlsPort(), kHost);
  ASSERT_EQ(c.error(), "");
  c.setInitialWindow(0);
  std::vector<int32_t> ids;
  for (int i = 0; i < 10; ++i) ids.push_back(c.request("GET", "/stuck/" + std::to_string(i)));
  ASSERT_TRUE(c.runUntil([&] { return c.allClosed(ids); }, 60s));
  for (int32_t id : ids) {
    EXPECT_EQ(c.resp(id).status, 200) << id;  // the head went out, the body could not
    EXPECT_EQ(c.resp(id).error, static_cast<uint32_t>(NGHTTP2_CANCEL)) << id;
    EXPECT_EQ(c.resp(id).body, "") << id;
  }
}

// A client whose own (connection) receive window stays at 0: it never
// sends WINDOW_UPDATE, so after 65,535 body bytes nothing more can be sent
// to it. The pod's 64 MiB answer is not buffered: the router reads from the
// pod only as far as its per-stream buffer, so the pod cannot write it all;
// after the stall timeout (client_io_timeout) the stream is reset or the
// connection closed, and
// both the client's and the pod's connections are freed.
TEST_F(H2RouterTest, ClientWhoseConnectionWindowStaysShutIsFreed) {
  constexpr size_t kBody = 64u << 20;
  std::atomic<size_t> written{0};
  std::atomic<bool> pod_done{false};
  TestBackend pod([&](tcp::socket& sock) {
    beast::flat_buffer buf;
    StringRequest req;
    beast::error_code ec;
    http::read(sock, buf, req, ec);
    if (ec) return;
    const std::string head = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(kBody) + "\r\n\r\n";
    asio::write(sock, asio::buffer(head), ec);
    const std::string chunk(64 * 1024, 'x');
    while (!ec && written.load() < kBody) {
      const size_t n = asio::write(sock, asio::buffer(chunk), ec);
      written += n;
    }
    pod_done = true;
  });
  startRouter(true, [](RouterOptions& o) { o.client_io_timeout = 2s; });
  router_->setEndpoints(kRev, {pod.endpoint()});
  {
    H2TestClient c(router_->tlsPort(), kHost, std::string_view("\x02h2", 3), /*auto_window_update=*/false);
    ASSERT_EQ(c.error(), "");
    ASSERT_EQ(c.alpn(), "h2");
    const int32_t id = c.request("GET", "/big");
    // Ends with the stream reset (CANCEL) or the connection closed: bounded.
    ASSERT_TRUE(c.runUntil([&] { return c.resp(id).closed || c.eof(); }, 90s));
    EXPECT_EQ(c.resp(id).status, 200);
    EXPECT_LE(c.resp(id).body.size(), 65535u);  // no more than the connection window
    if (c.resp(id).closed && !c.eof()) {
      // The watchdog's CANCEL, or the relay's own send timeout (whichever
      // notices the stall first) ending the cut body with INTERNAL_ERROR.
      const uint32_t code = c.resp(id).error;
      EXPECT_TRUE(code == static_cast<uint32_t>(NGHTTP2_CANCEL) ||
                  code == static_cast<uint32_t>(NGHTTP2_INTERNAL_ERROR))
          << code;
    }
  }
  // The pod's connection is released (its write fails or ends) without the
  // router having taken its whole answer.
  const auto end = std::chrono::steady_clock::now() + 60s;
  while ((!pod_done.load() || router_->openConnections() != 0) && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(50ms);
  }
  EXPECT_TRUE(pod_done.load());
  EXPECT_LT(written.load(), kBody) << "the router buffered the whole answer of a client that takes none";
  EXPECT_EQ(router_->openConnections(), 0u);
}

// The header checks HTTP/1.1 requests get apply to HTTP/2 streams too:
// control bytes in a value, the Host rule for :authority, one host field,
// :scheme http or https, :path from '/' ('*' only with OPTIONS). Each is
// refused on its own stream (400, or a stream error), never routed.
TEST_F(H2RouterTest, HeaderChecksMatchHttp11) {
  startWithEchoPod();
  H2TestClient c(router_->tlsPort(), kHost);
  ASSERT_EQ(c.error(), "");
  const std::string host = kHost;
  using Fields = std::vector<std::pair<std::string, std::string>>;
  const std::vector<std::pair<std::string, Fields>> bad = {
      {"control byte",
       {{":method", "GET"}, {":scheme", "https"}, {":authority", host}, {":path", "/"}, {"x-a", "a\x01b"}}},
      {"authority chars",
       {{":method", "GET"}, {":scheme", "https"}, {":authority", "hel<lo>.example.com"}, {":path", "/"}}},
      {"two hosts",
       {{":method", "GET"},
        {":scheme", "https"},
        {":authority", host},
        {":path", "/"},
        {"host", host},
        {"host", host}}},
      {"scheme", {{":method", "GET"}, {":scheme", "ftp"}, {":authority", host}, {":path", "/"}}},
      {"relative path", {{":method", "GET"}, {":scheme", "https"}, {":authority", host}, {":path", "x/y"}}},
      {"asterisk GET", {{":method", "GET"}, {":scheme", "https"}, {":authority", host}, {":path", "*"}}},
  };
  for (const auto& [what, fields] : bad) {
    const int32_t id = c.requestFields(fields);
    ASSERT_TRUE(c.waitClosed(id)) << what;
    const auto& r = c.resp(id);
    EXPECT_TRUE(r.status == 400 || (r.status == 0 && r.error == NGHTTP2_PROTOCOL_ERROR))
        << what << ": status " << r.status << " error " << r.error << " " << r.body;
  }
  EXPECT_EQ(pod_->connections(), 0);
  // Fine requests still go through (a single host equal to :authority included).
  const int32_t ok = c.requestFields(
      {{":method", "GET"}, {":scheme", "https"}, {":authority", host}, {":path", "/ok"}, {"host", host}});
  ASSERT_TRUE(c.waitClosed(ok));
  EXPECT_TRUE(answered(c.resp(ok), 200, "GET /ok 0 https"));
}

// PINGs (or any frame but requests and their bodies) do not keep an idle
// connection open: GOAWAY after keepalive_idle_timeout all the same.
TEST_F(H2RouterTest, PingsDoNotKeepAnIdleConnectionOpen) {
  startWithEchoPod([](RouterOptions& o) { o.keepalive_idle_timeout = 3s; });
  H2TestClient c(router_->tlsPort(), kHost);
  ASSERT_EQ(c.error(), "");
  ASSERT_TRUE(answered(c.getAndWait("/first"), 200));
  const auto end = std::chrono::steady_clock::now() + 60s;
  while (!c.goaway() && !c.eof() && std::chrono::steady_clock::now() < end) {
    c.ping();
    c.runUntil([&] { return c.goaway(); }, 1s);
  }
  EXPECT_TRUE(c.goaway());
  EXPECT_EQ(c.goawayError(), static_cast<uint32_t>(NGHTTP2_NO_ERROR));
}

// HTTP/2 is on by default, yet a client offering only http/1.1 (or a
// router with http2 off) gets HTTP/1.1 on the same listener, unchanged.
TEST_F(H2RouterTest, Http11ClientsOnTheSameListenerAndHttp2Off) {
  startWithEchoPod();
  {
    H2TestClient c(router_->tlsPort(), kHost, std::string_view("\x08http/1.1", 9));
    ASSERT_EQ(c.error(), "");
    EXPECT_EQ(c.alpn(), "http/1.1");
    const StringResponse r = c.http11Get("/one");
    EXPECT_EQ(r.result_int(), 200);
    EXPECT_EQ(r.body(), "GET /one 0 https");
  }
  router_->stop();
  router_.reset();
  startRouter(false);
  router_->setEndpoints(kRev, {pod_->endpoint()});
  H2TestClient c(router_->tlsPort(), kHost);
  ASSERT_EQ(c.error(), "");
  EXPECT_EQ(c.alpn(), "http/1.1");
  const StringResponse r = c.http11Get("/two");
  EXPECT_EQ(r.result_int(), 200);
  EXPECT_EQ(r.body(), "GET /two 0 https");
}

}  // namespace
}  // namespace knap::router
