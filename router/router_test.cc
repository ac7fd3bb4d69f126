// Integration tests: a Router on 127.0.0.1 port 0 in front of loopback
// backend "pods" started by the tests (router/test_backend.h). Real time,
// real sockets; timeouts are short so the suite stays fast.
#include "router/router.h"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <future>
#include <thread>

#include "router/test_backend.h"

namespace knap::router {
namespace {

using namespace knap::router::testing;
using namespace std::chrono_literals;

constexpr const char* kHost = "hello.default.example.com";
constexpr const char* kRev = "default/hello-00001";

// Waits (polling) until `cond` holds or `limit` passes.
template <typename F>
bool eventually(F cond, std::chrono::milliseconds limit = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(5ms);
  }
  return cond();
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
  EXPECT_TRUE(hasLine(b, "Forwarded: for=9.9.9.9;host=Hello.Default.Example.com:80;proto=http, for=127.0.0.1")) << b;
  EXPECT_TRUE(hasLine(b, "X-Custom: kept")) << b;
  EXPECT_EQ(b.find("Knative-Serving-Revision"), std::string::npos) << b;
  EXPECT_EQ(b.find("K-Network-Hash"), std::string::npos) << b;

  // Counted for the autoscaler.
  auto report = router_->collect(kRev, RealTimeSource::instance().monotonic());
  EXPECT_EQ(report.request_count, 1);
}

TEST_F(RouterTest, KeepAliveReusesClientAndPodConnections) {
  TestBackend pod(TestBackend::httpHandler([](const StringRequest& req, StringResponse& resp) {
    resp.body() = std::string(req.target());
  }));
  startRouter(); setRoutes({helloRoute()});
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
  startRouter(); setRoutes({helloRoute()});
  auto resp = get(router_->port(), "nobody.example.com:8080");
  EXPECT_EQ(resp.result_int(), 404);
  EXPECT_NE(resp.body().find("nobody.example.com"), std::string::npos) << resp.body();
}

TEST_F(RouterTest, ClusterLocalHostOnlyOnInternalListener) {
  TestBackend pod(TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) {
    resp.body() = "pod";
  }));
  startRouter(); setRoutes({helloRoute()});
  router_->setEndpoints(kRev, {pod.endpoint()});
  EXPECT_EQ(get(router_->port(), "hello.default.svc.cluster.local").result_int(), 404);
  auto resp = get(router_->internalPort(), "hello.default.svc.cluster.local");
  EXPECT_EQ(resp.result_int(), 200);
  EXPECT_EQ(resp.body(), "pod");
}

TEST_F(RouterTest, TrafficSplitFiftyFifty) {
  auto named = [](const char* name) {
    return TestBackend::httpHandler([name](const StringRequest&, StringResponse& resp) {
      resp.body() = name;
    });
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
  TestBackend pod(TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) {
    resp.body() = "fine";
  }));
  startRouter(); setRoutes({helloRoute()});
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
  startRouter(); setRoutes({helloRoute()});
  auto resp = get(router_->port(), kHost, "/", {{"X-Big", std::string(16 * 1024, 'x')}});
  EXPECT_EQ(resp.result_int(), 431);
}

TEST_F(RouterTest, SlowHeaderClientIsDisconnected) {
  RouterOptions o = defaultOptions();
  o.header_read_timeout = 300ms;
  startRouter(o); setRoutes({helloRoute()});
  TestClient c(router_->port());
  c.writeRaw("GET / HTTP/1.1\r\nHost: ");  // and never finishes
  const auto t0 = std::chrono::steady_clock::now();
  c.readAll();  // returns at EOF
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 3s);
}

TEST_F(RouterTest, ProbesAreAnsweredNotForwardedNorCounted) {
  TestBackend pod(TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) {
    resp.body() = "pod";
  }));
  startRouter(); setRoutes({helloRoute()}, "cafe01");
  router_->setEndpoints(kRev, {pod.endpoint()});

  auto p = get(router_->port(), kHost, "/healthz",
               {{"K-Network-Probe", "probe"}, {"K-Network-Hash", "abc123"}});
  EXPECT_EQ(p.result_int(), 200);
  EXPECT_EQ(p["K-Network-Hash"], "abc123");
  auto o = get(router_->port(), kHost, "/healthz",
               {{"K-Network-Probe", "probe"}, {"K-Network-Hash", "override"}});
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
  TestBackend pod(TestBackend::httpHandler([](const StringRequest&, StringResponse& resp) {
    resp.body() = "pod";
  }));
  startRouter(); setRoutes({helloRoute()});
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

}  // namespace
}  // namespace knap::router
