// Integration tests: a Router on 127.0.0.1 port 0 in front of loopback
// backend "pods" started by the tests (router/test_backend.h). Real time,
// real sockets; timeouts are short so the suite stays fast. The Router's
// socket timers run on Asio's steady clock, so these tests cannot step a
// simulated clock: they wait for events (eventually(), a Latch the test
// opens) instead of sleeping. The sleeps left are a pod's work or pacing, or
// the minimum time a measurement needs: a slower machine makes them longer,
// which never turns a passing check into a failing one.
#include "router/router.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <thread>

#include "router/test_backend.h"
#include "tests/fakes/wait.h"

namespace knap::router {
namespace {

using namespace knap::router::testing;
using namespace std::chrono_literals;

constexpr const char* kHost = "hello.default.example.com";
constexpr const char* kRev = "default/hello-00001";

using knap::testing::Latch;

// Waits (polling every 5 ms) until `cond` holds or `limit` passes.
bool eventually(const std::function<bool()>& cond, std::chrono::milliseconds limit = 30s) {
  return knap::testing::eventually(cond, limit, 5ms);
}

// Every request header, one "name: value" line each.
std::string echoHeaders(const StringRequest& req) {
  std::string out;
  for (const auto& f : req) {
    out += std::string(f.name_string()) + ": " + std::string(f.value()) + "\n";
  }
  return out;
}

bool hasLine(const std::string& body, const std::string& line) {
  return body.find(line + "\n") != std::string::npos;
}

class RouterTest : public ::testing::Test {
 protected:
  static RouterOptions defaultOptions() {
    RouterOptions o;
    o.address = "127.0.0.1";
    o.port = 0;
    o.internal_port = 0;
    o.admin_port = 0;
    o.threads = 2;
    o.header_read_timeout = 2s;
    o.keepalive_idle_timeout = 5s;
    o.client_io_timeout = 10s;
    o.max_header_bytes = 8 * 1024;
    return o;
  }

  void startRouter(RouterOptions o = defaultOptions()) {
    router_ = std::make_unique<Router>(o, RealTimeSource::instance());
    router_->on_cold_request = [this](const std::string& rev) {
      std::lock_guard<std::mutex> lock(mu_);
      cold_.push_back(rev);
    };
    Status s = router_->start();
    ASSERT_TRUE(s.isOk()) << s.toString();
  }

  static RouteSpec helloRoute(std::vector<TrafficSplit> traffic = {{kRev, 100, ""}}) {
    RouteSpec r;
    r.namespace_name = "default";
    r.name = "hello";
    r.hosts = {kHost};
    r.internal_hosts = {"hello.default.svc.cluster.local"};
    r.traffic = std::move(traffic);
    return r;
  }

  void setRoutes(std::vector<RouteSpec> routes, std::string hash = "hash-1") {
    auto t = RoutingTable::build(routes, hash);
    ASSERT_TRUE(t.isOk()) << t.status().toString();
    router_->setRoutingTable(*t);
  }

  size_t coldCalls() {
    std::lock_guard<std::mutex> lock(mu_);
    return cold_.size();
  }

  void TearDown() override {
    if (router_) router_->stop();
  }

  std::unique_ptr<Router> router_;
  std::mutex mu_;
  std::vector<std::string> cold_;
};

TEST_F(RouterTest, ProxiesGetWithForwardingHeaders) {
  TestBackend pod(TestBackend::httpHandler([](const StringRequest& req, StringResponse& resp) {
    resp.body() = echoHeaders(req);
    resp.set("X-Pod", "1");
  }));
  startRouter();
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});

  auto resp = get(router_->port(), "Hello.Default.Example.com:80", "/path?q=1",
                  {{"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
                   {"X-Forwarded-For", "9.9.9.9"},
                   {"Knative-Serving-Revision", "evil"},
                   {"K-Network-Hash", "abc"},
                   {"X-Custom", "kept"}});
  ASSERT_EQ(resp.result_int(), 200) << resp.body();
  EXPECT_EQ(resp["X-Pod"], "1");
  const std::string& b = resp.body();
  EXPECT_TRUE(hasLine(b, "Host: Hello.Default.Example.com:80")) << b;
  EXPECT_TRUE(hasLine(b, "traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")) << b;
  EXPECT_TRUE(hasLine(b, "X-Forwarded-For: 9.9.9.9, 127.0.0.1")) << b;
  EXPECT_TRUE(hasLine(b, "X-Forwarded-Proto: http")) << b;
  EXPECT_TRUE(
      hasLine(b, "Forwarded: for=9.9.9.9;host=Hello.Default.Example.com:80;proto=http, for=127.0.0.1"))
      << b;
  EXPECT_TRUE(hasLine(b, "X-Custom: kept")) << b;
  EXPECT_EQ(b.find("Knative-Serving-Revision"), std::string::npos) << b;
  EXPECT_EQ(b.find("K-Network-Hash"), std::string::npos) << b;

  // Counted for the autoscaler.
  auto report = router_->collect(kRev, RealTimeSource::instance().monotonic());
  EXPECT_EQ(report.request_count, 1);
}

TEST_F(RouterTest, KeepAliveReusesClientAndPodConnections) {
  TestBackend pod(TestBackend::httpHandler(
      [](const StringRequest& req, StringResponse& resp) { resp.body() = std::string(req.target()); }));
  startRouter();
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});
  TestClient c(router_->port());
  for (int i = 0; i < 20; ++i) {
    StringRequest req{http::verb::get, "/n" + std::to_string(i), 11};
    req.set(http::field::host, kHost);
    auto resp = c.send(std::move(req));
    ASSERT_EQ(resp.result_int(), 200) << c.error().message();
    EXPECT_EQ(resp.body(), "/n" + std::to_string(i));
  }
  EXPECT_EQ(pod.connections(), 1);
}

TEST_F(RouterTest, UnknownHostIs404NamingTheHost) {
  startRouter();
  setRoutes({helloRoute()});
  auto resp = get(router_->port(), "nobody.example.com:8080");
  EXPECT_EQ(resp.result_int(), 404);
  EXPECT_NE(resp.body().find("nobody.example.com"), std::string::npos) << resp.body();
}

TEST_F(RouterTest, ClusterLocalHostOnlyOnInternalListener) {
  TestBackend pod(
      TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) { resp.body() = "pod"; }));
  startRouter();
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});
  EXPECT_EQ(get(router_->port(), "hello.default.svc.cluster.local").result_int(), 404);
  auto resp = get(router_->internalPort(), "hello.default.svc.cluster.local");
  EXPECT_EQ(resp.result_int(), 200);
  EXPECT_EQ(resp.body(), "pod");
}

TEST_F(RouterTest, TrafficSplitFiftyFifty) {
  auto named = [](const char* name) {
    return TestBackend::httpHandler(
        [name](const StringRequest&, StringResponse& resp) { resp.body() = name; });
  };
  TestBackend a(named("a")), b(named("b"));
  startRouter();
  setRoutes({helloRoute({{"default/hello-a", 50, ""}, {"default/hello-b", 50, ""}})});
  router_->setEndpoints("default/hello-a", {a.endpoint()});
  router_->setEndpoints("default/hello-b", {b.endpoint()});
  TestClient c(router_->port());
  int na = 0;
  for (int i = 0; i < 200; ++i) {
    StringRequest req{http::verb::get, "/", 11};
    req.set(http::field::host, kHost);
    auto resp = c.send(std::move(req));
    ASSERT_EQ(resp.result_int(), 200);
    na += resp.body() == "a";
  }
  EXPECT_NEAR(na, 100, 10);
}

TEST_F(RouterTest, MalformedRequestGets400AndRouterKeepsServing) {
  TestBackend pod(
      TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) { resp.body() = "fine"; }));
  startRouter();
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});
  {
    TestClient c(router_->port());
    c.writeRaw("GARBAGE\x01 / NOT-HTTP\r\n\r\n");
    const std::string out = c.readAll();
    EXPECT_EQ(out.rfind("HTTP/1.1 400", 0), 0u) << out;
  }
  {
    TestClient c(router_->port());
    c.writeRaw("GET / HTTP/1.1\r\nHost: " + std::string(kHost) + "\r\nContent-Length: zz\r\n\r\n");
    EXPECT_EQ(c.readAll().rfind("HTTP/1.1 400", 0), 0u);
  }
  auto resp = get(router_->port(), kHost);
  EXPECT_EQ(resp.result_int(), 200);
  EXPECT_EQ(resp.body(), "fine");
}

TEST_F(RouterTest, OversizedHeadersGet431) {
  startRouter();
  setRoutes({helloRoute()});
  auto resp = get(router_->port(), kHost, "/", {{"X-Big", std::string(16 * 1024, 'x')}});
  EXPECT_EQ(resp.result_int(), 431);
}

TEST_F(RouterTest, SlowHeaderClientIsDisconnected) {
  RouterOptions o = defaultOptions();
  o.header_read_timeout = 300ms;
  startRouter(o);
  setRoutes({helloRoute()});
  TestClient c(router_->port());
  c.writeRaw("GET / HTTP/1.1\r\nHost: ");  // and never finishes
  const auto t0 = std::chrono::steady_clock::now();
  c.readAll();  // returns at EOF
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
}

TEST_F(RouterTest, ProbesAreAnsweredNotForwardedNorCounted) {
  TestBackend pod(
      TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) { resp.body() = "pod"; }));
  startRouter();
  setRoutes({helloRoute()}, "cafe01");
  router_->setEndpoints(kRev, {pod.endpoint()});

  auto p =
      get(router_->port(), kHost, "/healthz", {{"K-Network-Probe", "probe"}, {"K-Network-Hash", "abc123"}});
  EXPECT_EQ(p.result_int(), 200);
  EXPECT_EQ(p["K-Network-Hash"], "abc123");
  auto o =
      get(router_->port(), kHost, "/healthz", {{"K-Network-Probe", "probe"}, {"K-Network-Hash", "override"}});
  EXPECT_EQ(o.result_int(), 200);
  EXPECT_EQ(o["K-Network-Hash"], "cafe01");
  auto empty = get(router_->port(), kHost, "/healthz", {{"K-Network-Probe", "probe"}});
  EXPECT_EQ(empty.result_int(), 400);
  auto unknown = get(router_->port(), "other.example.com", "/healthz",
                     {{"K-Network-Probe", "probe"}, {"K-Network-Hash", "abc"}});
  EXPECT_EQ(unknown.result_int(), 404);
  auto act = get(router_->port(), kHost, "/", {{"K-Network-Probe", "activator"}});
  EXPECT_EQ(act.result_int(), 200);
  EXPECT_EQ(act.body(), "activator\n");
  auto bad = get(router_->port(), kHost, "/", {{"K-Network-Probe", "bogus"}});
  EXPECT_EQ(bad.result_int(), 400);

  EXPECT_EQ(pod.connections(), 0);
  auto report = router_->collect(kRev, RealTimeSource::instance().monotonic());
  EXPECT_EQ(report.request_count, 0);
}

TEST_F(RouterTest, AdminListenerServesMetrics) {
  TestBackend pod(
      TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) { resp.body() = "pod"; }));
  startRouter();
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});
  router_->setDesiredPods(kRev, 1);
  ASSERT_EQ(get(router_->port(), kHost).result_int(), 200);
  auto m = get(router_->adminPort(), "127.0.0.1", "/metrics");
  ASSERT_EQ(m.result_int(), 200);
  EXPECT_NE(m.body().find("knap_router_requests_total{revision=\"default/hello-00001\",code=\"200\"} 1"),
            std::string::npos)
      << m.body();
  EXPECT_NE(m.body().find("knap_revision_pods{revision=\"default/hello-00001\",state=\"ready\"} 1"),
            std::string::npos);
  EXPECT_NE(m.body().find("knap_revision_pods{revision=\"default/hello-00001\",state=\"desired\"} 1"),
            std::string::npos);
  EXPECT_NE(m.body().find("knap_router_request_duration_seconds_count{revision=\"default/hello-00001\"} 1"),
            std::string::npos);
  EXPECT_EQ(get(router_->adminPort(), "127.0.0.1", "/healthz").result_int(), 200);
  // The main listener does not expose metrics.
  EXPECT_EQ(get(router_->port(), "127.0.0.1", "/metrics").result_int(), 404);
}

// --- streaming --------------------------------------------------------------

constexpr size_t kBig = 50u << 20;       // 50 MiB
constexpr size_t kFirstPart = 4u << 20;  // sent before waiting for the other side
constexpr size_t kSeen = 1u << 20;       // what the other side must have seen by then

TEST_F(RouterTest, LargeUploadIsStreamedNotBuffered) {
  std::atomic<size_t> pod_received{0};
  TestBackend pod([&](tcp::socket& sock) {
    beast::flat_buffer buf;
    buf.reserve(64 * 1024);
    http::request_parser<http::buffer_body> p;
    p.body_limit(1ull << 40);
    beast::error_code ec;
    http::read_header(sock, buf, p, ec);
    if (ec) return;
    std::vector<char> chunk(64 * 1024);
    while (!p.is_done()) {
      p.get().body().data = chunk.data();
      p.get().body().size = chunk.size();
      http::read(sock, buf, p, ec);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) return;
      pod_received += chunk.size() - p.get().body().size;
    }
    StringResponse resp{http::status::ok, 11};
    resp.body() = std::to_string(pod_received.load());
    resp.prepare_payload();
    http::write(sock, resp, ec);
  });
  startRouter();
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});

  TestClient c(router_->port());
  c.writeRaw("POST /upload HTTP/1.1\r\nHost: " + std::string(kHost) +
             "\r\nContent-Length: " + std::to_string(kBig) + "\r\n\r\n");
  const std::string block(1 << 20, 'u');
  for (size_t sent = 0; sent < kFirstPart; sent += block.size()) c.writeRaw(block);
  // A proxy that buffers the whole body would never let the pod see these
  // bytes before the upload ends.
  EXPECT_TRUE(eventually([&] { return pod_received.load() >= kSeen; }, 10s))
      << "pod saw " << pod_received.load() << " bytes";
  for (size_t sent = kFirstPart; sent < kBig; sent += block.size()) c.writeRaw(block);
  ASSERT_FALSE(c.error()) << c.error().message();
  http::response<http::string_body> resp;
  beast::error_code ec;
  http::read(c.socket(), c.buffer(), resp, ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(resp.result_int(), 200);
  EXPECT_EQ(resp.body(), std::to_string(kBig));
}

TEST_F(RouterTest, ChunkedUploadIsRelayed) {
  TestBackend pod(TestBackend::httpHandler([](const StringRequest& req, StringResponse& resp) {
    resp.body() = std::to_string(req.body().size()) + ":" + req.body().substr(0, 5);
  }));
  startRouter();
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});
  TestClient c(router_->port());
  c.writeRaw("POST / HTTP/1.1\r\nHost: " + std::string(kHost) +
             "\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
  http::response<http::string_body> resp;
  beast::error_code ec;
  http::read(c.socket(), c.buffer(), resp, ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(resp.body(), "11:hello");
}

TEST_F(RouterTest, LargeDownloadIsStreamedNotBuffered) {
  std::atomic<size_t> client_received{0};
  TestBackend pod([&](tcp::socket& sock) {
    beast::flat_buffer buf;
    StringRequest req;
    beast::error_code ec;
    http::read(sock, buf, req, ec);
    if (ec) return;
    const std::string head = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(kBig) +
                             "\r\nContent-Type: application/octet-stream\r\n\r\n";
    asio::write(sock, asio::buffer(head), ec);
    const std::string block(1 << 20, 'd');
    for (size_t sent = 0; sent < kBig && !ec; sent += block.size()) {
      if (sent == kFirstPart) {
        // The client must get data while the pod is still producing it.
        if (!eventually([&] { return client_received.load() >= kSeen; }, 10s)) return;
      }
      asio::write(sock, asio::buffer(block), ec);
    }
  });
  startRouter();
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});

  TestClient c(router_->port());
  StringRequest req{http::verb::get, "/download", 11};
  req.set(http::field::host, kHost);
  beast::error_code ec;
  http::write(c.socket(), req, ec);
  ASSERT_FALSE(ec);
  http::response_parser<http::buffer_body> p;
  p.body_limit(1ull << 40);
  c.buffer().reserve(64 * 1024);
  http::read_header(c.socket(), c.buffer(), p, ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(p.get().result_int(), 200);
  EXPECT_EQ(p.content_length().value_or(0), kBig);
  std::vector<char> chunk(64 * 1024);
  while (!p.is_done()) {
    p.get().body().data = chunk.data();
    p.get().body().size = chunk.size();
    http::read(c.socket(), c.buffer(), p, ec);
    if (ec == http::error::need_buffer) ec = {};
    ASSERT_FALSE(ec) << ec.message() << " after " << client_received.load();
    client_received += chunk.size() - p.get().body().size;
  }
  EXPECT_EQ(client_received.load(), kBig);
}

// --- concurrency and the activator queue -----------------------------------

TEST_F(RouterTest, ContainerConcurrencyOneNeverOverlaps) {
  std::atomic<int> in_flight{0}, max_in_flight{0}, served{0};
  TestBackend pod(TestBackend::httpHandler([&](const StringRequest&, StringResponse& resp) {
    const int now = ++in_flight;
    int seen = max_in_flight.load();
    while (now > seen && !max_in_flight.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(10ms);  // the pod's work: the longer, the likelier an overlap would show
    --in_flight;
    ++served;
    resp.body() = "ok";
  }));
  startRouter();
  setRoutes({helloRoute()});
  RevisionConfig cfg;
  cfg.container_concurrency = 1;
  router_->setRevisionConfig(kRev, cfg);
  router_->setEndpoints(kRev, {pod.endpoint()});

  std::vector<std::future<int>> clients;
  for (int i = 0; i < 5; ++i) {
    clients.push_back(std::async(std::launch::async, [&] {
      int ok = 0;
      TestClient c(router_->port());
      for (int j = 0; j < 6; ++j) {
        StringRequest req{http::verb::get, "/", 11};
        req.set(http::field::host, kHost);
        ok += c.send(std::move(req)).result_int() == 200;
      }
      return ok;
    }));
  }
  int ok = 0;
  for (auto& f : clients) ok += f.get();
  EXPECT_EQ(ok, 30);  // all served (queued, never rejected)
  EXPECT_EQ(served.load(), 30);
  EXPECT_EQ(max_in_flight.load(), 1);
}

TEST_F(RouterTest, QueuesAtZeroAndReleasesWhenEndpointAppears) {
  TestBackend pod(
      TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) { resp.body() = "warm now"; }));
  startRouter();
  setRoutes({helloRoute()});
  std::vector<std::future<StringResponse>> reqs;
  for (int i = 0; i < 5; ++i) {
    reqs.push_back(std::async(std::launch::async, [&] { return get(router_->port(), kHost); }));
  }
  ASSERT_TRUE(eventually([&] { return router_->queued(kRev) == 5; })) << router_->queued(kRev);
  EXPECT_GE(coldCalls(), 1u);
  {
    std::lock_guard<std::mutex> lock(mu_);
    EXPECT_EQ(cold_[0], kRev);
  }
  // Queued requests count as concurrency for the autoscaler.
  auto report = router_->collect(kRev, RealTimeSource::instance().monotonic());
  EXPECT_EQ(report.request_count, 5);
  EXPECT_GT(report.average_concurrency, 0);
  EXPECT_NE(
      router_->renderMetrics().find("knap_activator_queued_requests{revision=\"default/hello-00001\"} 5"),
      std::string::npos);

  router_->setEndpoints(kRev, {pod.endpoint()});
  for (auto& f : reqs) {
    auto resp = f.get();
    EXPECT_EQ(resp.result_int(), 200);
    EXPECT_EQ(resp.body(), "warm now");
  }
  EXPECT_EQ(router_->queued(kRev), 0u);
  const std::string m = router_->renderMetrics();
  EXPECT_NE(m.find("knap_cold_start_seconds_count{revision=\"default/hello-00001\",path=\"unknown\"} 1"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("knap_activator_queue_wait_seconds_count{revision=\"default/hello-00001\"} 5"),
            std::string::npos)
      << m;
}

// Endpoint updates race on their way from the runtime (several threads): one
// older than the newest applied is dropped, so the router never goes back to
// a stale list.
TEST_F(RouterTest, StaleEndpointsVersionIsDropped) {
  TestBackend old_pod(
      TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) { resp.body() = "old"; }));
  TestBackend new_pod(
      TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) { resp.body() = "new"; }));
  startRouter();
  setRoutes({helloRoute()});
  EXPECT_TRUE(router_->setEndpoints(kRev, {new_pod.endpoint()}, {}, 2));
  EXPECT_FALSE(router_->setEndpoints(kRev, {old_pod.endpoint()}, {}, 1));  // delivered late
  for (int i = 0; i < 3; ++i) EXPECT_EQ(get(router_->port(), kHost).body(), "new");
  EXPECT_NE(
      router_->renderMetrics().find("knap_revision_pods{revision=\"default/hello-00001\",state=\"ready\"} 1"),
      std::string::npos);
  // The same version again (one read delivered twice) and newer ones apply.
  EXPECT_TRUE(router_->setEndpoints(kRev, {new_pod.endpoint()}, {}, 2));
  EXPECT_TRUE(router_->setEndpoints(kRev, {old_pod.endpoint()}, {}, 3));
  EXPECT_EQ(get(router_->port(), kHost).body(), "old");
  EXPECT_FALSE(router_->setEndpoints(kRev, {}, {}, 2));
  EXPECT_EQ(get(router_->port(), kHost).body(), "old");
  // Unversioned updates (0) always apply.
  EXPECT_TRUE(router_->setEndpoints(kRev, {new_pod.endpoint()}));
  EXPECT_EQ(get(router_->port(), kHost).body(), "new");
}

// The request that woke a revision carries K-Knap-Cold-Start with the path
// the runtime reported; the others queued with it do not.
TEST_F(RouterTest, ColdStartHeaderAndHistogramByWakePath) {
  TestBackend pod(
      TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) { resp.body() = "up"; }));
  startRouter();
  setRoutes({helloRoute()});
  auto first = std::async(std::launch::async, [&] { return get(router_->port(), kHost); });
  ASSERT_TRUE(eventually([&] { return router_->queued(kRev) == 1; }));
  auto second = std::async(std::launch::async, [&] { return get(router_->port(), kHost); });
  ASSERT_TRUE(eventually([&] { return router_->queued(kRev) == 2; }));
  std::this_thread::sleep_for(30ms);  // the cold start lasts at least this (checked below)
  router_->setEndpoints(kRev, {pod.endpoint()}, WakeInfo{"frozen", std::nullopt});
  auto r1 = first.get();
  auto r2 = second.get();
  ASSERT_EQ(r1.result_int(), 200);
  const std::string h(r1[std::string(kColdStartHeader)]);
  ASSERT_EQ(h.rfind("path=frozen; dur=", 0), 0u) << h;
  const double dur = std::stod(h.substr(h.find("dur=") + 4));
  EXPECT_GE(dur, 0.03);
  EXPECT_LT(dur, 5.0);
  EXPECT_EQ(h.size() - h.find('.') - 1, 3u) << "3 decimals: " << h;
  EXPECT_EQ(r2.result_int(), 200);
  EXPECT_EQ(r2.find(std::string(kColdStartHeader)), r2.end()) << "only the waking request";
  // A request to a warm revision has no header.
  auto r3 = get(router_->port(), kHost);
  EXPECT_EQ(r3.find(std::string(kColdStartHeader)), r3.end());
  std::string m = router_->renderMetrics();
  EXPECT_NE(m.find("knap_cold_start_seconds_count{revision=\"default/hello-00001\",path=\"frozen\"} 1"),
            std::string::npos)
      << m;

  // Back to zero; the image became present after the next waking request
  // arrived: "pulled", whatever pod path the runtime reports.
  router_->setEndpoints(kRev, {});
  const WallTime before = RealTimeSource::instance().now();
  auto fourth = std::async(std::launch::async, [&] { return get(router_->port(), kHost); });
  ASSERT_TRUE(eventually([&] { return router_->queued(kRev) == 1; }));
  router_->setEndpoints(kRev, {pod.endpoint()}, WakeInfo{"cached", RealTimeSource::instance().now()});
  auto r4 = fourth.get();
  EXPECT_EQ(std::string(r4[std::string(kColdStartHeader)]).rfind("path=pulled; dur=", 0), 0u)
      << r4[std::string(kColdStartHeader)];

  // An image that was present before the request: the pod path.
  router_->setEndpoints(kRev, {});
  auto fifth = std::async(std::launch::async, [&] { return get(router_->port(), kHost); });
  ASSERT_TRUE(eventually([&] { return router_->queued(kRev) == 1; }));
  router_->setEndpoints(kRev, {pod.endpoint()}, WakeInfo{"warm", before});
  auto r5 = fifth.get();
  EXPECT_EQ(std::string(r5[std::string(kColdStartHeader)]).rfind("path=warm; dur=", 0), 0u)
      << r5[std::string(kColdStartHeader)];
  m = router_->renderMetrics();
  EXPECT_NE(m.find("knap_cold_start_seconds_count{revision=\"default/hello-00001\",path=\"pulled\"} 1"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("knap_cold_start_seconds_count{revision=\"default/hello-00001\",path=\"warm\"} 1"),
            std::string::npos)
      << m;
  // Removing the revision drops every path's series.
  router_->removeRevision(kRev);
  m = router_->renderMetrics();
  EXPECT_EQ(m.find("knap_cold_start_seconds_count{revision=\"default/hello-00001\""), std::string::npos) << m;
}

TEST_F(RouterTest, WarmPoolGauges) {
  startRouter();
  router_->setRevisionConfig(kRev, RevisionConfig{});
  router_->setWarmPool(kRev, WarmPoolStats{"frozen", 2, 3 * 1024 * 1024});
  std::string m = router_->renderMetrics();
  EXPECT_NE(m.find("knap_warm_pool_pods{revision=\"default/hello-00001\",mode=\"frozen\"} 2"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("knap_warm_pool_memory_bytes{revision=\"default/hello-00001\"} 3145728"),
            std::string::npos)
      << m;
  // A mode change replaces the series.
  router_->setWarmPool(kRev, WarmPoolStats{"created", 1, 1024});
  m = router_->renderMetrics();
  EXPECT_EQ(m.find("mode=\"frozen\""), std::string::npos) << m;
  EXPECT_NE(m.find("knap_warm_pool_pods{revision=\"default/hello-00001\",mode=\"created\"} 1"),
            std::string::npos)
      << m;
  router_->removeRevision(kRev);
  m = router_->renderMetrics();
  EXPECT_EQ(m.find("knap_warm_pool_pods{"), std::string::npos) << m;
  EXPECT_EQ(m.find("knap_warm_pool_memory_bytes{"), std::string::npos) << m;
  // An empty pool reported after the removal does not bring the series back.
  router_->setWarmPool(kRev, WarmPoolStats{"created", 0, 0});
  m = router_->renderMetrics();
  EXPECT_EQ(m.find("knap_warm_pool_pods{"), std::string::npos) << m;
}

TEST_F(RouterTest, ARemovedRevisionLeavesNoStateWhenItsPodsStopAfterwards) {
  startRouter();
  const size_t before = router_->revisionCount();
  router_->setRevisionConfig(kRev, RevisionConfig{});
  ASSERT_TRUE(router_->setEndpoints(kRev, {Endpoint{"127.0.0.1", 9}}));
  EXPECT_EQ(router_->revisionCount(), before + 1);
  router_->removeRevision(kRev);
  EXPECT_EQ(router_->revisionCount(), before);
  // The runtime reports the stopped pods after the revision is gone.
  EXPECT_TRUE(router_->setEndpoints(kRev, {}));
  EXPECT_EQ(router_->revisionCount(), before);
  const std::string m = router_->renderMetrics();
  EXPECT_EQ(m.find("revision=\"default/hello-00001\",state="), std::string::npos) << m;
  // A revision whose pods come up before its configuration still gets them.
  ASSERT_TRUE(router_->setEndpoints(kRev, {Endpoint{"127.0.0.1", 9}}));
  EXPECT_EQ(router_->revisionCount(), before + 1);
}

TEST_F(RouterTest, QueueFullGets503) {
  RouterOptions o = defaultOptions();
  o.queue.max_depth = 2;
  startRouter(o);
  setRoutes({helloRoute()});
  std::vector<std::future<StringResponse>> waiting;
  for (int i = 0; i < 2; ++i) {
    waiting.push_back(std::async(std::launch::async, [&] { return get(router_->port(), kHost); }));
  }
  ASSERT_TRUE(eventually([&] { return router_->queued(kRev) == 2; }));
  auto resp = get(router_->port(), kHost);
  EXPECT_EQ(resp.result_int(), 503);
  EXPECT_NE(resp.body().find("queue full"), std::string::npos) << resp.body();
  router_->removeRevision(kRev);  // releases the two waiting with 503
  for (auto& f : waiting) EXPECT_EQ(f.get().result_int(), 503);
}

TEST_F(RouterTest, QueueWaitLimitGets503) {
  RouterOptions o = defaultOptions();
  o.queue.max_wait = 300ms;
  startRouter(o);
  setRoutes({helloRoute()});
  const auto t0 = std::chrono::steady_clock::now();
  auto resp = get(router_->port(), kHost);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(resp.result_int(), 503);
  EXPECT_NE(resp.body().find("queue wait limit"), std::string::npos) << resp.body();
  EXPECT_GE(took, 250ms);
  EXPECT_LT(took, 3s);
}

TEST_F(RouterTest, QueueTimeCountsAgainstTimeout) {
  startRouter();
  setRoutes({helloRoute()});
  RevisionConfig cfg;
  cfg.timeout = 400ms;
  router_->setRevisionConfig(kRev, cfg);
  auto resp = get(router_->port(), kHost);
  EXPECT_EQ(resp.result_int(), 504);
  EXPECT_NE(resp.body().find("timeout"), std::string::npos);
}

// --- timeouts ---------------------------------------------------------------

TEST_F(RouterTest, TimeoutWithNoResponseByteIs504) {
  Latch release;  // the pod answers only once the test has its 504
  TestBackend pod(TestBackend::httpHandler([release](const StringRequest&, StringResponse& resp) {
    release.wait();
    resp.body() = "too late";
  }));
  Latch::OpenOnExit release_at_end(release);
  startRouter();
  setRoutes({helloRoute()});
  RevisionConfig cfg;
  cfg.timeout = 500ms;
  router_->setRevisionConfig(kRev, cfg);
  router_->setEndpoints(kRev, {pod.endpoint()});
  const auto t0 = std::chrono::steady_clock::now();
  auto resp = get(router_->port(), kHost);
  EXPECT_EQ(resp.result_int(), 504);
  EXPECT_EQ(resp.body(), "request timeout\n");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1400ms);
}

TEST_F(RouterTest, ResponseStartTimeoutIs504) {
  Latch release;  // the pod answers only once the test has its 504
  TestBackend pod(
      TestBackend::httpHandler([release](const StringRequest&, StringResponse&) { release.wait(); }));
  Latch::OpenOnExit release_at_end(release);
  startRouter();
  setRoutes({helloRoute()});
  RevisionConfig cfg;
  cfg.timeout = 10s;
  cfg.response_start_timeout = 300ms;
  router_->setRevisionConfig(kRev, cfg);
  router_->setEndpoints(kRev, {pod.endpoint()});
  EXPECT_EQ(get(router_->port(), kHost).result_int(), 504);
}

// A pod that answers at once, then streams `pieces` chunks `gap` apart.
TestBackend::ConnHandler slowStream(int pieces, std::chrono::milliseconds gap) {
  return [pieces, gap](tcp::socket& sock) {
    beast::flat_buffer buf;
    StringRequest req;
    beast::error_code ec;
    http::read(sock, buf, req, ec);
    if (ec) return;
    std::string head = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    asio::write(sock, asio::buffer(head), ec);
    for (int i = 0; i < pieces && !ec; ++i) {
      asio::write(sock, asio::buffer(std::string("6\r\npiece") + char('0' + i) + "\r\n"), ec);
      std::this_thread::sleep_for(gap);  // pacing: the stream outlasts the timeout however slow the machine
    }
    asio::write(sock, asio::buffer(std::string("0\r\n\r\n")), ec);
  };
}

// A pod that answers at once with one chunk, then stalls until `release`
// opens (the end of the test), then ends the body.
TestBackend::ConnHandler stalledStream(Latch release) {
  return [release](tcp::socket& sock) {
    beast::flat_buffer buf;
    StringRequest req;
    beast::error_code ec;
    http::read(sock, buf, req, ec);
    if (ec) return;
    asio::write(
        sock,
        asio::buffer(std::string("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\npiece0\r\n")),
        ec);
    release.wait();
    asio::write(sock, asio::buffer(std::string("6\r\npiece1\r\n0\r\n\r\n")), ec);
  };
}

TEST_F(RouterTest, StartedStreamIsNotCutByTimeout) {
  // Knative's timeout handler: once the response has started, timeoutSeconds
  // no longer applies (TestRevisionTimeout: first byte at once, then
  // streaming past the timeout => 200 and the whole body).
  TestBackend pod(slowStream(5, 250ms));
  startRouter();
  setRoutes({helloRoute()});
  RevisionConfig cfg;
  cfg.timeout = 500ms;
  router_->setRevisionConfig(kRev, cfg);
  router_->setEndpoints(kRev, {pod.endpoint()});
  auto resp = get(router_->port(), kHost);
  EXPECT_EQ(resp.result_int(), 200);
  EXPECT_EQ(resp.body(), "piece0piece1piece2piece3piece4");
}

TEST_F(RouterTest, IdleTimeoutCutsAStalledStream) {
  Latch release;
  TestBackend pod(stalledStream(release));
  Latch::OpenOnExit release_at_end(release);
  startRouter();
  setRoutes({helloRoute()});
  RevisionConfig cfg;
  cfg.idle_timeout = 300ms;
  router_->setRevisionConfig(kRev, cfg);
  router_->setEndpoints(kRev, {pod.endpoint()});
  TestClient c(router_->port());
  StringRequest req{http::verb::get, "/", 11};
  req.set(http::field::host, kHost);
  auto resp = c.send(std::move(req));
  // Status 200 had been sent; the body was cut: the read fails.
  EXPECT_TRUE(c.error()) << resp.body();
}

// --- upgrade ------------------------------------------------------------------

// Sends a WebSocket upgrade request for kHost on `c` (plus `extra` header
// lines, each ending in CRLF) and reads the answer's head; the status, or
// -1 when no head could be read. Bytes after the head stay in c.buffer().
int upgradeWebSocket(TestClient& c, const std::string& extra = "") {
  c.writeRaw("GET /ws HTTP/1.1\r\nHost: " + std::string(kHost) +
             "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n" + extra + "\r\n");
  http::response_parser<http::empty_body> p;
  beast::error_code ec;
  http::read_header(c.socket(), c.buffer(), p, ec);
  if (ec) {
    ADD_FAILURE() << "no answer to the upgrade: " << ec.message();
    return -1;
  }
  return p.get().result_int();
}

TEST_F(RouterTest, UpgradeIsSplicedBothWays) {
  TestBackend pod([](tcp::socket& sock) {
    beast::flat_buffer buf;
    StringRequest req;
    beast::error_code ec;
    http::read(sock, buf, req, ec);
    if (ec) return;
    if (!boost::beast::iequals(req[http::field::upgrade], "websocket")) {
      asio::write(sock, asio::buffer(std::string("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")),
                  ec);
      return;
    }
    asio::write(sock,
                asio::buffer(std::string(
                    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")),
                ec);
    // Echo, prefixed, until the client closes.
    std::string pending(static_cast<const char*>(buf.data().data()), buf.size());
    if (!pending.empty()) asio::write(sock, asio::buffer("echo:" + pending), ec);
    char data[1024];
    for (;;) {
      const size_t n = sock.read_some(asio::buffer(data), ec);
      if (ec) return;
      asio::write(sock, asio::buffer("echo:" + std::string(data, n)), ec);
    }
  });
  startRouter();
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});
  TestClient c(router_->port());
  c.writeRaw("GET /ws HTTP/1.1\r\nHost: " + std::string(kHost) +
             "\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\r\n");
  http::response_parser<http::empty_body> p;
  beast::error_code ec;
  http::read_header(c.socket(), c.buffer(), p, ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(p.get().result_int(), 101);
  EXPECT_EQ(p.get()[http::field::upgrade], "websocket");
  c.writeRaw("ping-1");
  std::string got(static_cast<const char*>(c.buffer().data().data()), c.buffer().size());
  c.buffer().consume(c.buffer().size());
  char data[256];
  while (got.size() < 11) {
    const size_t n = c.socket().read_some(asio::buffer(data), ec);
    ASSERT_FALSE(ec) << ec.message();
    got.append(data, n);
  }
  EXPECT_EQ(got, "echo:ping-1");
  c.writeRaw("ping-2");
  got.clear();
  while (got.size() < 11) {
    const size_t n = c.socket().read_some(asio::buffer(data), ec);
    ASSERT_FALSE(ec) << ec.message();
    got.append(data, n);
  }
  EXPECT_EQ(got, "echo:ping-2");
}

TEST_F(RouterTest, ExpectContinueAnsweredByRouter) {
  TestBackend pod(TestBackend::httpHandler([](const StringRequest& req, StringResponse& resp) {
    resp.body() = req.body();
    resp.set("X-Saw-Expect", req.count(http::field::expect) ? "yes" : "no");
  }));
  startRouter();
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});
  TestClient c(router_->port());
  c.writeRaw("POST / HTTP/1.1\r\nHost: " + std::string(kHost) +
             "\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n");
  char data[64];
  beast::error_code ec;
  const size_t n = c.socket().read_some(asio::buffer(data), ec);
  ASSERT_FALSE(ec);
  EXPECT_EQ(std::string(data, n).rfind("HTTP/1.1 100 Continue", 0), 0u) << std::string(data, n);
  c.writeRaw("body");
  http::response<http::string_body> resp;
  http::read(c.socket(), c.buffer(), resp, ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(resp.body(), "body");
  EXPECT_EQ(resp["X-Saw-Expect"], "no");
}

TEST_F(RouterTest, RoutingTableSwapKeepsServing) {
  Latch arrived, release;  // the request is at the pod; the pod may answer
  TestBackend pod(TestBackend::httpHandler([arrived, release](const StringRequest&, StringResponse& resp) {
    arrived.open();
    release.wait();
    resp.body() = "slow ok";
  }));
  Latch::OpenOnExit release_at_end(release);
  startRouter();
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});
  auto inflight = std::async(std::launch::async, [&] { return get(router_->port(), kHost); });
  ASSERT_TRUE(arrived.wait());
  router_->setRoutingTable(RoutingTable::empty());
  release.open();
  EXPECT_EQ(inflight.get().body(), "slow ok");
  EXPECT_EQ(get(router_->port(), kHost).result_int(), 404);
}

TEST_F(RouterTest, PodDownIs502) {
  uint16_t dead_port;
  {
    TestBackend gone([](tcp::socket&) {});
    dead_port = gone.port();
  }
  startRouter();
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {Endpoint{"127.0.0.1", dead_port}});
  EXPECT_EQ(get(router_->port(), kHost).result_int(), 502);
}

TEST_F(RouterTest, ClientThatHangsUpLeavesTheQueue) {
  startRouter();
  setRoutes({helloRoute()});
  {
    TestClient c(router_->port());
    c.writeRaw("GET / HTTP/1.1\r\nHost: " + std::string(kHost) + "\r\n\r\n");
    ASSERT_TRUE(eventually([&] { return router_->queued(kRev) == 1; }));
  }  // closes the connection
  EXPECT_TRUE(eventually([&] { return router_->queued(kRev) == 0; }));
  EXPECT_TRUE(eventually([&] {
    return router_->renderMetrics().find(
               "knap_router_requests_total{revision=\"default/hello-00001\",code=\"499\"} 1") !=
           std::string::npos;
  }));
}

TEST_F(RouterTest, HeadAndNoContentResponsesKeepConnectionUsable) {
  TestBackend pod(TestBackend::httpHandler([](const StringRequest& req, StringResponse& resp) {
    if (req.target() == "/empty") {
      resp.result(http::status::no_content);
      return;
    }
    resp.body() = "twelve bytes";
  }));
  startRouter();
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});
  TestClient c(router_->port());
  StringRequest head{http::verb::head, "/", 11};
  head.set(http::field::host, kHost);
  auto r1 = c.send(head);
  ASSERT_EQ(r1.result_int(), 200) << c.error().message();
  EXPECT_EQ(r1[http::field::content_length], "12");
  StringRequest empty{http::verb::get, "/empty", 11};
  empty.set(http::field::host, kHost);
  auto r2 = c.send(empty);
  EXPECT_EQ(r2.result_int(), 204) << c.error().message();
  StringRequest full{http::verb::get, "/", 11};
  full.set(http::field::host, kHost);
  auto r3 = c.send(full);
  EXPECT_EQ(r3.result_int(), 200);
  EXPECT_EQ(r3.body(), "twelve bytes");
}

TEST_F(RouterTest, StopWithQueuedRequestsDoesNotHang) {
  startRouter();
  setRoutes({helloRoute()});
  auto waiting = std::async(std::launch::async, [&] { return get(router_->port(), kHost); });
  ASSERT_TRUE(eventually([&] { return router_->queued(kRev) == 1; }));
  router_->stop();
  auto resp = waiting.get();  // connection closed (or 503): anything but a hang
  EXPECT_NE(resp.result_int(), 200);
}

TEST_F(RouterTest, IdleKeepAliveConnectionIsClosed) {
  TestBackend pod(
      TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) { resp.body() = "ok"; }));
  RouterOptions o = defaultOptions();
  o.keepalive_idle_timeout = 300ms;
  startRouter(o);
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});
  TestClient c(router_->port());
  StringRequest req{http::verb::get, "/", 11};
  req.set(http::field::host, kHost);
  ASSERT_EQ(c.send(req).result_int(), 200);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(c.readAll(), "");  // EOF from the router
  const auto idle = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(idle, 250ms);
  EXPECT_LT(idle, 3s);
}

TEST_F(RouterTest, UnknownRevisionCollectsZero) {
  startRouter();
  auto r = router_->collect("default/nope", RealTimeSource::instance().monotonic());
  EXPECT_EQ(r.request_count, 0);
  EXPECT_EQ(r.average_concurrency, 0);
}

// ---------------------------------------------------------------------------
// Framing (issue 8): every forwarded message's framing is re-derived.

// The raw bytes a keep-alive pod received, all connections together, and a
// fixed answer per request it could parse.
struct RecordingPod {
  RecordingPod()
      : pod(TestBackend::httpHandler([this](const StringRequest& req, StringResponse& resp) {
          std::lock_guard<std::mutex> lock(mu);
          seen.push_back(std::string(req.method_string()) + " " + std::string(req.target()) + " " +
                         std::to_string(req.body().size()) + ":" + req.body());
          resp.body() = "saw " + std::string(req.target()) + " " + req.body();
        })) {}
  std::vector<std::string> requests() {
    std::lock_guard<std::mutex> lock(mu);
    return seen;
  }
  std::mutex mu;
  std::vector<std::string> seen;
  TestBackend pod;
};

http::response<http::string_body> readResponse(TestClient& c) {
  http::response<http::string_body> resp;
  beast::error_code ec;
  http::read(c.socket(), c.buffer(), resp, ec);
  if (ec) resp.result(0);
  return resp;
}

TEST_F(RouterTest, ChunkedUploadReachesThePodAsOneRequest) {
  RecordingPod rec;
  startRouter();
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {rec.pod.endpoint()});
  TestClient c(router_->port());
  for (int i = 0; i < 3; ++i) {
    c.writeRaw("POST /up HTTP/1.1\r\nHost: " + std::string(kHost) +
               "\r\nTransfer-Encoding: chunked\r\n\r\n5;ext=\"v\"\r\nhello\r\n0\r\nX-Trailer: t\r\n\r\n");
    auto resp = readResponse(c);
    ASSERT_EQ(resp.result_int(), 200);
    EXPECT_EQ(resp.body(), "saw /up hello");
  }
  // No phantom request "0" after any of them.
  EXPECT_EQ(rec.requests(),
            (std::vector<std::string>{"POST /up 5:hello", "POST /up 5:hello", "POST /up 5:hello"}));
  EXPECT_EQ(rec.pod.connections(), 1);
}

TEST_F(RouterTest, ConnectionCannotRemoveContentLength) {
  RecordingPod rec;
  startRouter();
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {rec.pod.endpoint()});
  TestClient c(router_->port());
  const std::string smuggled = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
  c.writeRaw("POST /a HTTP/1.1\r\nHost: " + std::string(kHost) +
             "\r\nConnection: Content-Length\r\nContent-Length: " + std::to_string(smuggled.size()) +
             "\r\n\r\n" + smuggled);
  auto resp = readResponse(c);
  ASSERT_EQ(resp.result_int(), 200);
  EXPECT_EQ(resp.body(), "saw /a " + smuggled);
  auto next = get(router_->port(), kHost, "/b");
  EXPECT_EQ(next.body(), "saw /b ");
  EXPECT_EQ(rec.requests(), (std::vector<std::string>{
                                "POST /a " + std::to_string(smuggled.size()) + ":" + smuggled, "GET /b 0:"}));
}

TEST_F(RouterTest, HostileFramingGets400AndCloses) {
  RecordingPod rec;
  startRouter();
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {rec.pod.endpoint()});
  const std::string h = "Host: " + std::string(kHost) + "\r\n";
  const std::string tail = "GET /smuggled HTTP/1.1\r\n" + h + "\r\n";
  for (const std::string& bad : std::vector<std::string>{
           "POST / HTTP/1.1\r\n" + h + "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
           "POST / HTTP/1.1\r\n" + h +
               "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
           "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: identity\r\n\r\n",
           "POST / HTTP/1.1\r\n" + h + "Content-Length: 1\r\nContent-Length: 1\r\n\r\nx",
           "GET / HTTP/1.1\r\n" + h + "Host: other\r\n\r\n",
           "GET / HTTP/1.1\r\n" + h + "X: a\r\n b\r\n\r\n",
           "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n",
           "POST / HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n",
       }) {
    TestClient c(router_->port());
    c.writeRaw(bad + tail);
    const std::string out = c.readAll();
    EXPECT_EQ(out.rfind("HTTP/1.1 400", 0), 0u) << bad << "\n--\n" << out;
    EXPECT_EQ(out.find("HTTP/1.1", 1), std::string::npos) << "a second response after: " << bad;
  }
  for (const std::string& r : rec.requests()) EXPECT_EQ(r.find("/smuggled"), std::string::npos) << r;
}

TEST_F(RouterTest, PodResponseFramingIsRederived) {
  // Bare-LF header lines (busybox httpd CGI) and Connection naming
  // Content-Length: the client still gets a framed answer on a kept-alive
  // connection.
  TestBackend pod([](tcp::socket& sock) {
    beast::flat_buffer buf;
    for (;;) {
      StringRequest req;
      beast::error_code ec;
      http::read(sock, buf, req, ec);
      if (ec) return;
      std::string out;
      if (req.target() == "/lf") {
        out = "HTTP/1.1 200 OK\nContent-Type: text/plain\nContent-Length: 2\n\nlf";
      } else if (req.target() == "/conn") {
        out = "HTTP/1.1 200 OK\r\nConnection: Content-Length\r\nContent-Length: 4\r\n\r\nconn";
      } else if (req.target() == "/both") {
        out =
            "HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: "
            "chunked\r\n\r\n4\r\nboth\r\n0\r\n\r\n";
      } else {
        out = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nplain";
      }
      asio::write(sock, asio::buffer(out), ec);
      if (ec) return;
    }
  });
  startRouter();
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});
  TestClient c(router_->port());
  for (const auto& [path, body] : std::vector<std::pair<std::string, std::string>>{
           {"/lf", "lf"}, {"/conn", "conn"}, {"/both", "both"}, {"/x", "plain"}, {"/lf", "lf"}}) {
    StringRequest req{http::verb::get, path, 11};
    req.set(http::field::host, kHost);
    auto resp = c.send(std::move(req));
    ASSERT_EQ(resp.result_int(), 200) << path << " " << c.error().message();
    EXPECT_EQ(resp.body(), body) << path;
    EXPECT_TRUE(resp.has_content_length() || resp.chunked()) << path;
  }
}

// Sockets to 127.0.0.1:`port` in state `st` (hex, /proc/net/tcp: 01
// ESTABLISHED, 08 CLOSE_WAIT) on the side whose remote end is `port`.
int socketsTo(uint16_t port, const char* st) {
  FILE* f = std::fopen("/proc/net/tcp", "r");
  if (f == nullptr) return -1;
  char line[512];
  int n = 0;
  char want[16];
  std::snprintf(want, sizeof want, ":%04X", port);
  while (std::fgets(line, sizeof line, f) != nullptr) {
    char local[64], remote[64], state[8];
    if (std::sscanf(line, " %*d: %63s %63s %7s", local, remote, state) != 3) continue;
    if (std::string(remote).find(want) != std::string::npos && std::string(state) == st) ++n;
  }
  std::fclose(f);
  return n;
}

TEST_F(RouterTest, IdlePodConnectionsClosedByPodOrTimeoutDoNotLinger) {
  // A pod that closes every connection 100 ms after answering, without
  // saying so: the pool must close its side at once (no CLOSE-WAIT).
  TestBackend closing([](tcp::socket& sock) {
    beast::flat_buffer buf;
    StringRequest req;
    beast::error_code ec;
    http::read(sock, buf, req, ec);
    if (ec) return;
    const std::string out = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    asio::write(sock, asio::buffer(out), ec);
    std::this_thread::sleep_for(100ms);  // then closes: the pool notices whenever it comes (polled below)
  });
  RouterOptions o = defaultOptions();
  o.upstream_idle_timeout = 300ms;
  startRouter(o);
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {closing.endpoint()});
  for (int i = 0; i < 10; ++i) EXPECT_EQ(get(router_->port(), kHost).body(), "ok");
  EXPECT_TRUE(eventually([&] { return socketsTo(closing.port(), "08") == 0; }, 2000ms))
      << socketsTo(closing.port(), "08") << " pod connections in CLOSE-WAIT";

  // A pod that keeps connections open: closed after the upstream idle timeout.
  RecordingPod rec;
  router_->setEndpoints(kRev, {rec.pod.endpoint()});
  EXPECT_EQ(get(router_->port(), kHost, "/k").body(), "saw /k ");
  EXPECT_EQ(socketsTo(rec.pod.port(), "01"), 1);
  EXPECT_TRUE(eventually([&] { return socketsTo(rec.pod.port(), "01") == 0; }, 3000ms));
}

TEST_F(RouterTest, PodConnectionsClosedWhenThePodLeavesTheEndpoints) {
  RecordingPod a, b;
  startRouter();
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {a.pod.endpoint()});
  EXPECT_EQ(get(router_->port(), kHost, "/k").body(), "saw /k ");
  EXPECT_EQ(socketsTo(a.pod.port(), "01"), 1);
  router_->setEndpoints(kRev, {b.pod.endpoint()});
  // (Generous bounds: a loaded CI machine; the idle timeout, 30 s, is far away.)
  EXPECT_TRUE(eventually([&] { return socketsTo(a.pod.port(), "01") == 0; }, 5000ms));
  EXPECT_EQ(get(router_->port(), kHost, "/k").body(), "saw /k ");
  router_->removeRevision(kRev);
  EXPECT_TRUE(eventually([&] { return socketsTo(b.pod.port(), "01") == 0; }, 5000ms));
}

// -- limits, drain, restart continuity (issue 8) --------------------------------

// The value of a metric series in Prometheus text ("name{labels}"), -1 if absent.
double metricValue(const std::string& text, const std::string& series) {
  const size_t at = text.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(text.substr(at + series.size() + 2));
}

StringRequest helloGet(const std::string& target = "/") {
  StringRequest req{http::verb::get, target, 11};
  req.set(http::field::host, kHost);
  return req;
}

TEST_F(RouterTest, ConnectionsOverTheLimitGet503AndTheSlotFreesOnClose) {
  TestBackend pod(
      TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) { resp.body() = "ok"; }));
  RouterOptions o = defaultOptions();
  o.max_connections = 2;
  startRouter(o);
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});
  auto a = std::make_unique<TestClient>(router_->port());
  TestClient b(router_->port());
  ASSERT_EQ(a->send(helloGet()).result_int(), 200);
  ASSERT_EQ(b.send(helloGet()).result_int(), 200);
  EXPECT_EQ(router_->openConnections(), 2u);

  TestClient c(router_->port());
  c.writeRaw("GET / HTTP/1.1\r\nHost: " + std::string(kHost) + "\r\n\r\n");
  const std::string refused = c.readAll();
  EXPECT_EQ(refused.rfind("HTTP/1.1 503 ", 0), 0u) << refused;
  EXPECT_NE(refused.find("Connection: close"), std::string::npos) << refused;
  EXPECT_NE(refused.find("connection limit reached (2 connections"), std::string::npos) << refused;
  EXPECT_EQ(
      metricValue(router_->renderMetrics(), "knap_router_rejected_connections_total{listener=\"external\"}"),
      1);
  EXPECT_EQ(metricValue(router_->renderMetrics(), "knap_router_open_connections{listener=\"external\"}"), 2);

  // A closed connection frees its place; the limit is per listener.
  a.reset();
  ASSERT_TRUE(eventually([&] { return router_->openConnections() == 1; }));
  EXPECT_EQ(get(router_->port(), kHost).result_int(), 200);
  EXPECT_EQ(b.send(helloGet()).result_int(), 200);
}

TEST_F(RouterTest, AcceptBacksOffWhileOutOfFileDescriptors) {
  TestBackend pod(
      TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) { resp.body() = "ok"; }));
  startRouter();
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});
  // The client socket is made first; then every free descriptor is taken.
  const int client = ::socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(client, 0);
  timeval tv{20, 0};
  ::setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &old), 0);
  rlimit low = old;
  low.rlim_cur = std::min<rlim_t>(old.rlim_cur, 4096);
  ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &low), 0);
  std::vector<int> filler;
  for (int fd; (fd = ::dup(client)) >= 0;) filler.push_back(fd);
  ASSERT_EQ(errno, EMFILE);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(router_->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);  // in the backlog
  const std::string req = "GET / HTTP/1.1\r\nHost: " + std::string(kHost) + "\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(client, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  // The window the accept attempts are counted in: at least one comes at
  // once; a slower machine makes fewer, never more.
  ASSERT_TRUE(eventually([&] {
    return metricValue(router_->renderMetrics(), "knap_router_accept_errors_total{listener=\"external\"}") >=
           1;
  }));
  std::this_thread::sleep_for(1500ms);
  const double errors =
      metricValue(router_->renderMetrics(), "knap_router_accept_errors_total{listener=\"external\"}");
  // Backing off (5 ms doubling to 1 s) makes about 9 attempts in 1.5 s; a
  // busy loop would make tens of thousands.
  EXPECT_GE(errors, 1);
  EXPECT_LE(errors, 40);
  for (int fd : filler) ::close(fd);
  ::setrlimit(RLIMIT_NOFILE, &old);
  // Descriptors are back: the waiting connection is served.
  std::string got;
  char data[4096];
  for (ssize_t n; (n = ::recv(client, data, sizeof data, 0)) > 0;) got.append(data, static_cast<size_t>(n));
  ::close(client);
  EXPECT_EQ(got.rfind("HTTP/1.1 200 ", 0), 0u) << got;
}

TEST_F(RouterTest, IdleTunnelIsClosedAndReleasesItsSlot) {
  TestBackend pod(TestBackend::echoTunnel());
  RouterOptions o = defaultOptions();
  o.tunnel_idle_timeout = 1s;
  startRouter(o);
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});
  TestClient c(router_->port());
  ASSERT_EQ(upgradeWebSocket(c), 101);
  beast::error_code ec;
  // Traffic keeps it open past the idle timeout...
  char data[256];
  auto last_io = std::chrono::steady_clock::now();
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(250ms);  // pacing: 6 x 250 ms of traffic outlasts the 1 s idle timeout
    c.writeRaw("p");
    size_t got = 0;
    while (got < 6) {
      got += c.socket().read_some(asio::buffer(data), ec);
      ASSERT_FALSE(ec) << "tunnel closed while busy (round " << i << "): " << ec.message();
    }
    last_io = std::chrono::steady_clock::now();
  }
  // ...silence closes it, and its connection and pod slot are released.
  c.socket().read_some(asio::buffer(data), ec);
  EXPECT_TRUE(ec) << "the tunnel should have been closed";
  EXPECT_GE(std::chrono::steady_clock::now() - last_io, 800ms);
  EXPECT_TRUE(eventually([&] { return router_->openConnections() == 0; }));
  EXPECT_TRUE(eventually([&] {
    return router_->renderMetrics().find(
               "knap_router_requests_total{revision=\"default/hello-00001\",code=\"101\"} 1") !=
           std::string::npos;
  }));
}

TEST_F(RouterTest, DrainFinishesInFlightAndHeldRequestsAndClosesIdleOnes) {
  Latch slow_arrived, release_slow;  // /slow is at the pod; the pod may answer it
  TestBackend pod(
      TestBackend::httpHandler([slow_arrived, release_slow](const StringRequest& req, StringResponse& resp) {
        if (req.target() == "/slow") {
          slow_arrived.open();
          release_slow.wait();
        }
        resp.body() = std::string(req.target());
      }));
  Latch::OpenOnExit release_at_end(release_slow);
  startRouter();
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});
  const int port = router_->port();
  TestClient idle(port);
  ASSERT_EQ(idle.send(helloGet()).result_int(), 200);  // kept alive, now idle
  auto slow = std::async(std::launch::async, [&] { return get(port, kHost, "/slow"); });
  ASSERT_TRUE(eventually([&] { return router_->openConnections() == 2; }));
  ASSERT_TRUE(slow_arrived.wait());  // in flight at the pod when the drain starts
  // A request held in the activator queue (its revision has no pod yet).
  RouteSpec other = helloRoute({{"default/other-00001", 100, ""}});
  other.name = "other";
  other.hosts = {"other.default.example.com"};
  other.internal_hosts = {};
  setRoutes({helloRoute(), other});
  auto held = std::async(std::launch::async, [&] { return get(port, "other.default.example.com", "/held"); });
  ASSERT_TRUE(eventually([&] { return router_->queued("default/other-00001") == 1; }));

  auto drained = std::async(std::launch::async, [&] { return router_->drain(10s); });
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(idle.readAll(), "");                         // the idle connection is closed at once...
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);  // ...not at its 5 s idle timeout
  // No new connections.
  ASSERT_TRUE(eventually([&] {
    TestClient late(port);
    return late.error().failed();
  }));
  release_slow.open();  // the in-flight request finishes during the drain
  auto s = slow.get();
  EXPECT_EQ(s.result_int(), 200);
  EXPECT_EQ(s.body(), "/slow");
  EXPECT_EQ(s[http::field::connection], "close");
  EXPECT_EQ(drained.wait_for(100ms), std::future_status::timeout) << "drain must wait for the held request";
  router_->setEndpoints("default/other-00001", {pod.endpoint()});
  auto h = held.get();
  EXPECT_EQ(h.result_int(), 200);
  EXPECT_EQ(h.body(), "/held");
  EXPECT_EQ(h[http::field::connection], "close");
  ASSERT_EQ(drained.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(drained.get(), 0u);
}

TEST_F(RouterTest, DrainGivesASilentNewConnectionTwoSeconds) {
  TestBackend pod(
      TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) { resp.body() = "ok"; }));
  RouterOptions o = defaultOptions();
  o.header_read_timeout = 30s;
  startRouter(o);
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});
  TestClient silent(router_->port());  // connected, sends nothing
  ASSERT_TRUE(eventually([&] { return router_->openConnections() == 1; }));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(router_->drain(20s), 0u);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 15s);  // not the 30 s header timeout
  EXPECT_EQ(silent.readAll(), "");
}

TEST_F(RouterTest, DrainServesANewConnectionThatSendsWithinTheGrace) {
  TestBackend pod(
      TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) { resp.body() = "ok"; }));
  startRouter();
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});
  TestClient c(router_->port());
  ASSERT_TRUE(eventually([&] { return router_->openConnections() == 1; }));
  auto drained = std::async(std::launch::async, [&] { return router_->drain(20s); });
  ASSERT_TRUE(eventually([&] {  // the drain has begun: new connections are refused
    TestClient late(router_->port());
    return late.error().failed();
  }));
  auto r = c.send(helloGet());
  EXPECT_EQ(r.result_int(), 200);
  EXPECT_EQ(r[http::field::connection], "close");
  EXPECT_EQ(drained.get(), 0u);
}

TEST_F(RouterTest, DrainGivesUpAtItsDeadline) {
  TestBackend pod(TestBackend::echoTunnel());
  startRouter();
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});
  TestClient c(router_->port());
  ASSERT_EQ(upgradeWebSocket(c), 101);
  EXPECT_EQ(router_->drain(300ms), 1u);  // the tunnel is still open
  router_->stop();
  EXPECT_EQ(c.readAll(), "");
}

TEST_F(RouterTest, RequestsBeforeTheFirstRoutingTableAreHeldNot404) {
  TestBackend pod(
      TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) { resp.body() = "ok"; }));
  RouterOptions o = defaultOptions();
  o.startup_hold = 10s;
  startRouter(o);
  router_->setEndpoints(kRev, {pod.endpoint()});
  auto early = std::async(std::launch::async, [&] { return get(router_->port(), kHost); });
  ASSERT_TRUE(eventually([&] { return router_->openConnections() == 1; }));
  EXPECT_EQ(early.wait_for(300ms), std::future_status::timeout) << "answered before the routes were loaded";
  setRoutes({helloRoute()});
  auto r = early.get();
  EXPECT_EQ(r.result_int(), 200) << r.body();
  // Once loaded, an unknown host is 404 at once.
  EXPECT_EQ(get(router_->port(), "nope.example.com").result_int(), 404);
}

TEST_F(RouterTest, StartupHoldIsBounded) {
  RouterOptions o = defaultOptions();
  o.startup_hold = 300ms;
  startRouter(o);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = get(router_->port(), kHost);
  EXPECT_EQ(r.result_int(), 404) << r.body();
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 250ms);
}

TEST_F(RouterTest, ServesAnInheritedListeningSocket) {
  TestBackend pod(
      TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) { resp.body() = "ok"; }));
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 16), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  RouterOptions o = defaultOptions();
  o.external_fd = fd;
  startRouter(o);
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});
  EXPECT_EQ(router_->port(), ntohs(addr.sin_port));
  EXPECT_EQ(get(router_->port(), kHost).result_int(), 200);
}

TEST_F(RouterTest, AnInheritedFdThatIsNotAListenerIsRefused) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  RouterOptions o = defaultOptions();
  o.external_fd = p[0];
  Router r(o, RealTimeSource::instance());
  Status st = r.start();
  EXPECT_FALSE(st.isOk());
  EXPECT_NE(st.message().find("not a socket"), std::string::npos) << st.toString();
  ::close(p[0]);
  ::close(p[1]);
}

// The pod response buffer is a worker's spare, reused across exchanges
// (SpareBuffer in proxy.cc): bytes a pod sent past its response, and bytes
// it sent right after a 101 (the tunnel's), must never reach the next
// exchange on the same worker; and the tunnel still gets its early bytes.
TEST_F(RouterTest, SparePodBufferCarriesNothingIntoTheNextExchange) {
  TestBackend pod([](tcp::socket& sock) {
    beast::flat_buffer buf;
    StringRequest req;
    beast::error_code ec;
    http::read(sock, buf, req, ec);
    if (ec) return;
    if (boost::beast::iequals(req[http::field::upgrade], "websocket")) {
      asio::write(sock,
                  asio::buffer(std::string("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                                           "Connection: Upgrade\r\n\r\nearly-bytes")),
                  ec);
    } else {
      // A whole response, then what looks like another one nobody asked for.
      asio::write(sock,
                  asio::buffer(std::string("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
                                           "HTTP/1.1 203 Junk\r\nContent-Length: 4\r\n\r\nJUNK")),
                  ec);
    }
    char data[256];
    while (!ec) sock.read_some(asio::buffer(data), ec);
  });
  RouterOptions o = defaultOptions();
  o.threads = 1;  // every exchange on the one worker, the one set of spares
  startRouter(o);
  setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});
  for (int i = 0; i < 3; ++i) {
    auto resp = get(router_->port(), kHost, "/");
    ASSERT_EQ(resp.result_int(), 200) << i << " " << resp.body();
    EXPECT_EQ(resp.body(), "ok") << i;
  }
  {
    TestClient c(router_->port());
    ASSERT_EQ(upgradeWebSocket(c), 101);
    beast::error_code ec;
    std::string got(static_cast<const char*>(c.buffer().data().data()), c.buffer().size());
    char data[256];
    while (got.size() < 11) {
      const size_t n = c.socket().read_some(asio::buffer(data), ec);
      ASSERT_FALSE(ec) << ec.message();
      got.append(data, n);
    }
    EXPECT_EQ(got, "early-bytes");
  }
  for (int i = 0; i < 3; ++i) {
    auto resp = get(router_->port(), kHost, "/");
    ASSERT_EQ(resp.result_int(), 200) << i << " " << resp.body();
    EXPECT_EQ(resp.body(), "ok") << i;
  }
}

// --- review of 569f8d2: the bodiless request's inline head write / read ------
//
// A scripted pod: each accepted connection gets an index (0, 1, ...); the
// script reads request heads (no bodies: only bodiless requests here) and
// answers with the raw bytes the test gives for (connection, request).

// Reads one request head; false on EOF/error.
bool readRequestHead(tcp::socket& s, std::string& buf, std::string* head) {
  beast::error_code ec;
  for (;;) {
    const size_t end = buf.find("\r\n\r\n");
    if (end != std::string::npos) {
      *head = buf.substr(0, end + 4);
      buf.erase(0, end + 4);
      return true;
    }
    char data[4096];
    const size_t n = s.read_some(asio::buffer(data), ec);
    if (ec) return false;
    buf.append(data, n);
  }
}

// One step of a pod's answer: bytes to write, then a pause.
struct PodStep {
  std::string bytes;
  std::chrono::milliseconds pause{0};
  bool close = false;  // close the connection after this step
};
// (connection index, request index on it) -> steps; an empty list: close
// without answering.
using PodScript = std::function<std::vector<PodStep>(int conn, int req, const std::string& head)>;

TestBackend::ConnHandler scriptedPod(std::shared_ptr<std::atomic<int>> conns, PodScript script) {
  return [conns, script](tcp::socket& sock) {
    const int conn = conns->fetch_add(1);
    std::string buf, head;
    for (int req = 0; readRequestHead(sock, buf, &head); ++req) {
      const std::vector<PodStep> steps = script(conn, req, head);
      if (steps.empty()) return;  // close unanswered
      beast::error_code ec;
      for (const PodStep& st : steps) {
        if (!st.bytes.empty()) asio::write(sock, asio::buffer(st.bytes), ec);
        if (ec) return;
        if (st.pause.count() > 0) std::this_thread::sleep_for(st.pause);
        if (st.close) return;
      }
    }
  };
}

StringRequest bodilessRequest(http::verb v = http::verb::get, const std::string& target = "/") {
  StringRequest req{v, target, 11};
  req.set(http::field::host, kHost);
  req.keep_alive(true);
  return req;
}

class PodHeadPathTest : public RouterTest {
 protected:
  void startOneWorker() {
    RouterOptions o = defaultOptions();
    o.threads = 1;  // one worker: one pool, one set of spare buffers
    startRouter(o);
    setRoutes({helloRoute()});
  }
  // One worker in front of `pod`, and a client connection to it.
  TestClient serve(const TestBackend& pod) {
    startOneWorker();
    router_->setEndpoints(kRev, {pod.endpoint()});
    return TestClient(router_->port());
  }
};

const char kOk[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

// 103 Early Hints in its own read, the final head in a later one: the 103
// is skipped (its fields do not leak) and the connection is pooled after.
TEST_F(PodHeadPathTest, EarlyHintsInItsOwnReadThenFinal) {
  auto conns = std::make_shared<std::atomic<int>>(0);
  TestBackend pod(scriptedPod(conns, [](int, int req, const std::string&) {
    if (req == 0) {
      return std::vector<PodStep>{{"HTTP/1.1 103 Early Hints\r\nLink: </a.css>\r\nX-Hint: 1\r\n\r\n", 50ms},
                                  {"HTTP/1.1 200 OK\r\nX-Final: 1\r\nContent-Length: 5\r\n\r\nfinal"}};
    }
    return std::vector<PodStep>{{kOk}};
  }));
  TestClient c = serve(pod);
  auto r1 = c.send(bodilessRequest());
  ASSERT_EQ(r1.result_int(), 200) << r1.body();
  EXPECT_EQ(r1.body(), "final");
  EXPECT_EQ(r1["X-Final"], "1");
  EXPECT_EQ(r1.count("X-Hint"), 0u);
  EXPECT_EQ(r1.count("Link"), 0u);
  auto r2 = c.send(bodilessRequest());
  ASSERT_EQ(r2.result_int(), 200) << r2.body();
  EXPECT_EQ(r2.body(), "ok");
  EXPECT_EQ(conns->load(), 1);  // the pod connection was reused
}

// 100 Continue and the final head in the same read (and a body after it).
TEST_F(PodHeadPathTest, InterimAndFinalInOneRead) {
  auto conns = std::make_shared<std::atomic<int>>(0);
  TestBackend pod(scriptedPod(conns, [](int, int, const std::string&) {
    return std::vector<PodStep>{
        {"HTTP/1.1 100 Continue\r\nX-Interim: 1\r\n\r\n"
         "HTTP/1.1 103 Early Hints\r\nLink: </b>\r\n\r\n"
         "HTTP/1.1 201 Created\r\nContent-Length: 3\r\n\r\nnew"}};
  }));
  TestClient c = serve(pod);
  for (int i = 0; i < 2; ++i) {
    auto r = c.send(bodilessRequest());
    ASSERT_EQ(r.result_int(), 201) << i << " " << r.body();
    EXPECT_EQ(r.body(), "new");
    EXPECT_EQ(r.count("X-Interim"), 0u);
    EXPECT_EQ(r.count("Link"), 0u);
  }
  EXPECT_EQ(conns->load(), 1);
}

// A final head split across reads (mid-field, and mid status line).
TEST_F(PodHeadPathTest, HeadSplitAcrossReads) {
  auto conns = std::make_shared<std::atomic<int>>(0);
  TestBackend pod(scriptedPod(conns, [](int, int req, const std::string&) {
    if (req == 0) {
      return std::vector<PodStep>{{"HTTP/1.1 200 OK\r\nX-Pa", 50ms},
                                  {"rt: one\r\nContent-Length: 2\r\n\r\nab"}};
    }
    return std::vector<PodStep>{
        {"HTT", 50ms}, {"P/1.1 202 Accepted\r\nContent-Length: 2\r\n", 30ms}, {"\r\ncd"}};
  }));
  TestClient c = serve(pod);
  auto r1 = c.send(bodilessRequest());
  ASSERT_EQ(r1.result_int(), 200) << r1.body();
  EXPECT_EQ(r1["X-Part"], "one");
  EXPECT_EQ(r1.body(), "ab");
  auto r2 = c.send(bodilessRequest());
  ASSERT_EQ(r2.result_int(), 202) << r2.body();
  EXPECT_EQ(r2.body(), "cd");
  EXPECT_EQ(conns->load(), 1);
}

// HEAD: the pod's Content-Length describes no body on the wire; the
// exchange stays in sync and the next request on the connection works.
TEST_F(PodHeadPathTest, HeadRequestStaysInSync) {
  auto conns = std::make_shared<std::atomic<int>>(0);
  TestBackend pod(scriptedPod(conns, [](int, int, const std::string& head) {
    if (head.rfind("HEAD ", 0) == 0)
      return std::vector<PodStep>{{"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n"}};
    return std::vector<PodStep>{{kOk}};
  }));
  TestClient c = serve(pod);
  auto r1 = c.send(bodilessRequest(http::verb::head));
  ASSERT_EQ(r1.result_int(), 200);
  auto r2 = c.send(bodilessRequest());
  ASSERT_EQ(r2.result_int(), 200) << r2.body();
  EXPECT_EQ(r2.body(), "ok");
  EXPECT_EQ(conns->load(), 1);
}

// A pooled connection the pod closes after reading the request (the
// keep-alive race): retried once on a fresh connection.
TEST_F(PodHeadPathTest, ReusedConnectionClosedIsRetriedOnce) {
  auto conns = std::make_shared<std::atomic<int>>(0);
  TestBackend pod(scriptedPod(conns, [](int conn, int req, const std::string&) {
    if (conn == 0 && req == 1) return std::vector<PodStep>{};  // read it, close unanswered
    return std::vector<PodStep>{{kOk}};
  }));
  TestClient c = serve(pod);
  ASSERT_EQ(c.send(bodilessRequest()).result_int(), 200);
  auto r2 = c.send(bodilessRequest());
  ASSERT_EQ(r2.result_int(), 200) << r2.body();
  EXPECT_EQ(r2.body(), "ok");
  EXPECT_EQ(conns->load(), 2);
}

// The retry after attempt 0 left a parsed interim head in `rh`: the 103's
// fields must not show up in attempt 1's answer, whether that arrives in
// one read or split.
TEST_F(PodHeadPathTest, APodThatSentAnInterimAnswerAndClosedIsNotAskedAgain) {
  // An Early Hints shows the pod had the request (which may not be
  // idempotent): its close is a 502, not a retry on a fresh connection.
  for (bool split : {false, true}) {
    auto conns = std::make_shared<std::atomic<int>>(0);
    TestBackend pod(scriptedPod(conns, [split](int conn, int req, const std::string&) {
      if (conn == 0 && req == 1) {
        if (split)
          return std::vector<PodStep>{{"HTTP/1.1 103 Early", 20ms},
                                      {" Hints\r\nLink: </x>\r\n\r\n", 20ms, true}};
        return std::vector<PodStep>{
            {"HTTP/1.1 103 Early Hints\r\nLink: </leak>\r\nX-Leak: 1\r\n\r\n", 20ms, true}};
      }
      return std::vector<PodStep>{{kOk}};
    }));
    startOneWorker();
    router_->setEndpoints(kRev, {pod.endpoint()});
    {
      TestClient c(router_->port());
      ASSERT_EQ(c.send(bodilessRequest()).result_int(), 200);
      auto r2 = c.send(bodilessRequest());
      EXPECT_EQ(r2.result_int(), 502) << split << " " << r2.body();
      EXPECT_EQ(r2.count("X-Leak"), 0u) << split;
      EXPECT_EQ(r2.count("Link"), 0u) << split;
      EXPECT_EQ(conns->load(), 1) << "the request went to the pod a second time (split " << split << ")";
    }
    router_->stop();
    router_.reset();
  }
}

// A malformed head on a reused connection is not retried: 502 naming it.
TEST_F(PodHeadPathTest, MalformedHeadOnReusedConnectionIsNotRetried) {
  auto conns = std::make_shared<std::atomic<int>>(0);
  TestBackend pod(scriptedPod(conns, [](int conn, int req, const std::string&) {
    if (conn == 0 && req == 1) return std::vector<PodStep>{{"HTTP/1.1 2OO Bad\r\n\r\n"}};
    return std::vector<PodStep>{{kOk}};
  }));
  TestClient c = serve(pod);
  ASSERT_EQ(c.send(bodilessRequest()).result_int(), 200);
  auto r2 = c.send(bodilessRequest());
  EXPECT_EQ(r2.result_int(), 502) << r2.body();
  EXPECT_NE(r2.body().find("malformed"), std::string::npos) << r2.body();
  EXPECT_EQ(conns->load(), 1);
}

// A fresh connection the pod closes after the request: 502, no retry.
TEST_F(PodHeadPathTest, FreshConnectionClosedIs502) {
  auto conns = std::make_shared<std::atomic<int>>(0);
  TestBackend pod(scriptedPod(conns, [](int, int, const std::string&) { return std::vector<PodStep>{}; }));
  TestClient c = serve(pod);
  auto r = c.send(bodilessRequest());
  EXPECT_EQ(r.result_int(), 502) << r.body();
  EXPECT_EQ(conns->load(), 1);
}

// response_start_timeout: a pod that never answers, and one that sends only
// an interim 103 and stalls: 504 at the deadline, not at `timeout`.
TEST_F(PodHeadPathTest, ResponseStartTimeoutCoversInterimAndSilence) {
  auto conns = std::make_shared<std::atomic<int>>(0);
  TestBackend pod(scriptedPod(conns, [](int, int, const std::string& head) {
    if (head.find("/hint") != std::string::npos) {
      return std::vector<PodStep>{{"HTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n", 1500ms}};
    }
    return std::vector<PodStep>{{"", 1500ms}};
  }));
  startOneWorker();
  RevisionConfig cfg;
  cfg.response_start_timeout = 300ms;
  router_->setRevisionConfig(kRev, cfg);
  router_->setEndpoints(kRev, {pod.endpoint()});
  for (const char* target : {"/silent", "/hint"}) {
    TestClient c(router_->port());
    const auto t0 = std::chrono::steady_clock::now();
    auto r = c.send(bodilessRequest(http::verb::get, target));
    const auto took = std::chrono::steady_clock::now() - t0;
    EXPECT_EQ(r.result_int(), 504) << target << " " << r.body();
    EXPECT_LT(took, 1400ms) << target;
  }
}

// Bytes past the response (an unasked second response): the connection is
// not pooled; the next request gets its own answer from a new connection.
TEST_F(PodHeadPathTest, BytesPastTheResponseKeepConnectionOutOfPool) {
  auto conns = std::make_shared<std::atomic<int>>(0);
  TestBackend pod(scriptedPod(conns, [](int conn, int, const std::string&) {
    if (conn == 0) {
      return std::vector<PodStep>{
          {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nJUNK"}};
    }
    return std::vector<PodStep>{{"HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond"}};
  }));
  TestClient c = serve(pod);
  auto r1 = c.send(bodilessRequest());
  ASSERT_EQ(r1.result_int(), 200);
  EXPECT_EQ(r1.body(), "ok");
  auto r2 = c.send(bodilessRequest());
  ASSERT_EQ(r2.result_int(), 200);
  EXPECT_EQ(r2.body(), "second");
  EXPECT_EQ(conns->load(), 2);
}

// 101 to a request that asked for no upgrade: 502; to one that did: a tunnel.
TEST_F(PodHeadPathTest, UnaskedSwitchIs502) {
  auto conns = std::make_shared<std::atomic<int>>(0);
  TestBackend pod(scriptedPod(conns, [](int, int, const std::string&) {
    return std::vector<PodStep>{
        {"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n"}};
  }));
  TestClient c = serve(pod);
  auto r = c.send(bodilessRequest());
  EXPECT_EQ(r.result_int(), 502) << r.body();
}

}  // namespace
}  // namespace knap::router
