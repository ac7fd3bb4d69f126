#include "runtime/pod/probe.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <thread>

namespace knap::runtime {
namespace {

using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

// One attempt on the real clock with the spec's own attempt timeout.
ProbeResult probeOnce(const ProbeSpec& spec, const std::string& ip, int default_port) {
  return runtime::probeOnce(spec, ip, default_port, attemptTimeout(spec), RealTimeSource::instance());
}

// --- ProbeState: table-driven, times passed in, no sleeping -------------------

struct Step {
  int64_t start_ms;     // attempt start, relative to container start
  int64_t duration_ms;  // how long the attempt took
  bool success;
  bool want_healthy;     // after recording
  int64_t want_next_ms;  // nextProbeAt after recording
};

struct StateCase {
  const char* name;
  ProbeSpec spec;
  ProbeKind kind;
  bool want_initial_healthy;
  int64_t want_first_ms;
  std::vector<Step> steps;
};

ProbeSpec periodic(int period, int success, int failure, int delay = 0) {
  ProbeSpec s;
  s.period_seconds = period;
  s.success_threshold = success;
  s.failure_threshold = failure;
  s.initial_delay_seconds = delay;
  return s;
}

class ProbeStateTest : public ::testing::TestWithParam<StateCase> {};

TEST_P(ProbeStateTest, Transitions) {
  const StateCase& tc = GetParam();
  const MonoTime t0 = MonoTime{} + seconds(1000);
  ProbeState st(tc.spec, tc.kind, t0);
  EXPECT_EQ(st.healthy(), tc.want_initial_healthy);
  EXPECT_EQ(st.nextProbeAt() - t0, milliseconds(tc.want_first_ms));
  int i = 0;
  for (const Step& s : tc.steps) {
    const MonoTime start = t0 + milliseconds(s.start_ms);
    st.record(s.success, start, start + milliseconds(s.duration_ms));
    EXPECT_EQ(st.healthy(), s.want_healthy) << "step " << i;
    EXPECT_EQ(std::chrono::duration_cast<milliseconds>(st.nextProbeAt() - t0).count(), s.want_next_ms)
        << "step " << i;
    ++i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Table, ProbeStateTest,
    ::testing::Values(
        StateCase{"readiness_starts_unready_one_success_suffices",
                  periodic(10, 1, 3),
                  ProbeKind::kReadiness,
                  false,
                  0,
                  {{0, 5, true, true, 10000}}},
        StateCase{"initial_delay",
                  periodic(5, 1, 3, 7),
                  ProbeKind::kReadiness,
                  false,
                  7000,
                  {{7000, 1, false, false, 12000}, {12000, 1, true, true, 17000}}},
        StateCase{"success_threshold_needs_consecutive",
                  periodic(1, 3, 3),
                  ProbeKind::kReadiness,
                  false,
                  0,
                  {{0, 1, true, false, 1000},
                   {1000, 1, true, false, 2000},
                   {2000, 1, false, false, 3000},  // streak broken
                   {3000, 1, true, false, 4000},
                   {4000, 1, true, false, 5000},
                   {5000, 1, true, true, 6000}}},
        StateCase{"failure_threshold_unreadies",
                  periodic(2, 1, 3),
                  ProbeKind::kReadiness,
                  false,
                  0,
                  {{0, 1, true, true, 2000},
                   {2000, 1, false, true, 4000},
                   {4000, 1, false, true, 6000},
                   {6000, 1, true, true, 8000},  // streak broken
                   {8000, 1, false, true, 10000},
                   {10000, 1, false, true, 12000},
                   {12000, 1, false, false, 14000}}},
        StateCase{"slow_attempt_longer_than_period",
                  periodic(1, 1, 3),
                  ProbeKind::kReadiness,
                  false,
                  0,
                  {{0, 1500, true, true, 1500}}},
        StateCase{"liveness_starts_alive_and_dies",
                  periodic(10, 1, 2),
                  ProbeKind::kLiveness,
                  true,
                  0,
                  {{0, 1, false, true, 10000}, {10000, 1, false, false, 20000}}},
        StateCase{"aggressive_retries_every_50ms",
                  ProbeSpec{},
                  ProbeKind::kReadiness,
                  false,
                  0,
                  {{0, 100, false, false, 150}, {150, 100, false, false, 300}, {300, 2, true, true, 1302}}},
        StateCase{"aggressive_ready_tolerates_10s_of_failure",
                  ProbeSpec{},
                  ProbeKind::kReadiness,
                  false,
                  0,
                  {{0, 1, true, true, 1001},
                   {1001, 100, false, true, 1151},
                   {1151, 100, true, true, 2251},  // recovered: back to 1 s rechecks
                   {2251, 100, false, true, 2401},
                   {6000, 100, false, true, 6150},
                   {11100, 100, false, true, 11250},     // 8.949 s since the first failure
                   {12300, 100, false, false, 12450}}},  // 10.149 s: not ready
        StateCase{"aggressive_with_initial_delay",
                  periodic(0, 1, 0, 3),
                  ProbeKind::kReadiness,
                  false,
                  3000,
                  {{3000, 10, true, true, 4010}}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ProbeStateTest, LivenessPeriodZeroMeansTen) {
  ProbeState st(ProbeSpec{}, ProbeKind::kLiveness, MonoTime{});
  st.record(true, MonoTime{}, MonoTime{} + milliseconds(3));
  EXPECT_EQ(st.nextProbeAt(), MonoTime{} + seconds(10));
}

TEST(ProbeStateTest, AttemptTimeouts) {
  EXPECT_EQ(attemptTimeout(ProbeSpec{}), milliseconds(100));
  EXPECT_EQ(attemptTimeout(periodic(5, 1, 3)), seconds(1));
  ProbeSpec s = periodic(5, 1, 3);
  s.timeout_seconds = 4;
  EXPECT_EQ(attemptTimeout(s), seconds(4));
}

// --- parseProbeSpec ------------------------------------------------------------------

TEST(ParseProbeTest, HttpGetWithEverything) {
  auto p = parseProbeSpec(json::parse(R"({
      "httpGet": {"path": "/healthz", "port": 8081, "scheme": "HTTP",
                  "httpHeaders": [{"name": "X-Custom", "value": "v"}]},
      "periodSeconds": 3, "timeoutSeconds": 2, "successThreshold": 2,
      "failureThreshold": 5, "initialDelaySeconds": 4})"),
                          ProbeKind::kReadiness);
  ASSERT_TRUE(p.isOk()) << p.status().toString();
  EXPECT_EQ(p->handler, ProbeHandler::kHttpGet);
  EXPECT_EQ(p->path, "/healthz");
  EXPECT_EQ(p->port, 8081);
  EXPECT_EQ(p->headers, (std::vector<std::pair<std::string, std::string>>{{"X-Custom", "v"}}));
  EXPECT_EQ(p->period_seconds, 3);
  EXPECT_EQ(p->timeout_seconds, 2);
  EXPECT_EQ(p->success_threshold, 2);
  EXPECT_EQ(p->failure_threshold, 5);
  EXPECT_EQ(p->initial_delay_seconds, 4);
}

TEST(ParseProbeTest, Defaults) {
  auto r = parseProbeSpec(json::parse(R"({"tcpSocket": {}})"), ProbeKind::kReadiness);
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(r->handler, ProbeHandler::kTcpSocket);
  EXPECT_EQ(r->port, 0);
  EXPECT_EQ(r->period_seconds, 0);  // aggressive
  EXPECT_EQ(r->timeout_seconds, 1);
  EXPECT_EQ(r->success_threshold, 1);
  EXPECT_EQ(r->failure_threshold, 3);

  auto l = parseProbeSpec(json::parse(R"({"httpGet": {"port": "http1"}})"), ProbeKind::kLiveness);
  ASSERT_TRUE(l.isOk());
  EXPECT_EQ(l->period_seconds, 10);
  EXPECT_EQ(l->port, 0);  // named port = serving port
  EXPECT_EQ(l->path, "/");

  auto empty = parseProbeSpec(json::object(), ProbeKind::kReadiness);  // Knative's defaulted {}
  ASSERT_TRUE(empty.isOk());
  EXPECT_EQ(empty->handler, ProbeHandler::kTcpSocket);
}

TEST(ParseProbeTest, Exec) {
  auto p = parseProbeSpec(json::parse(R"({"exec": {"command": ["cat", "/tmp/ready"]}, "periodSeconds": 1})"),
                          ProbeKind::kReadiness);
  ASSERT_TRUE(p.isOk());
  EXPECT_EQ(p->handler, ProbeHandler::kExec);
  EXPECT_EQ(p->command, (std::vector<std::string>{"cat", "/tmp/ready"}));
}

TEST(ParseProbeTest, Rejections) {
  struct Case {
    const char* json;
    Code code;
    const char* part;
  };
  for (const Case& c : std::vector<Case>{
           {R"({"grpc": {"port": 8080}})", Code::kUnsupported, "gRPC"},
           {R"({"httpGet": {"scheme": "HTTPS"}})", Code::kUnsupported, "only HTTP"},
           {R"({"httpGet": {}, "tcpSocket": {}})", Code::kInvalidArgument, "exactly one"},
           {R"({"exec": {"command": []}})", Code::kInvalidArgument, "exec.command"},
           {R"({"tcpSocket": {"port": 70000}})", Code::kInvalidArgument, "tcpSocket.port"},
           {R"({"tcpSocket": {}, "periodSeconds": "1"})", Code::kInvalidArgument, "periodSeconds"},
           {R"({"httpGet": {"httpHeaders": [{"name": "X\r\nEvil", "value": "1"}]}})", Code::kInvalidArgument,
            "forbidden"},
           {R"([1])", Code::kInvalidArgument, "object"}}) {
    auto p = parseProbeSpec(json::parse(c.json), ProbeKind::kReadiness);
    ASSERT_FALSE(p.isOk()) << c.json;
    EXPECT_EQ(p.status().code(), c.code) << c.json;
    EXPECT_NE(p.status().message().find(c.part), std::string::npos) << p.status().message();
  }
}

// --- probeOnce against real loopback listeners -----------------------------------

// A listener on 127.0.0.1:<ephemeral>. Mode decides what each connection gets.
class TestServer {
 public:
  enum class Mode { kAccept, kHttp, kSilent };
  TestServer(Mode mode, std::string response = "") : mode_(mode), response_(std::move(response)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    EXPECT_EQ(::listen(fd_, 16), 0);
    thread_ = std::thread([this] { loop(); });
  }
  ~TestServer() {
    stop_ = true;
    thread_.join();
    for (int c : held_) ::close(c);
    ::close(fd_);
  }
  int port() const { return port_; }
  std::string lastRequest() {
    std::lock_guard<std::mutex> l(mu_);
    return last_request_;
  }
  int connections() const { return connections_; }

 private:
  void loop() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) != 1) continue;
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      ++connections_;
      if (mode_ == Mode::kAccept) {
        ::close(c);
        continue;
      }
      std::string req;
      char buf[1024];
      while (req.find("\r\n\r\n") == std::string::npos) {
        pollfd q{c, POLLIN, 0};
        if (::poll(&q, 1, 1000) != 1) break;
        ssize_t n = ::recv(c, buf, sizeof buf, 0);
        if (n <= 0) break;
        req.append(buf, static_cast<size_t>(n));
      }
      {
        std::lock_guard<std::mutex> l(mu_);
        last_request_ = req;
      }
      if (mode_ == Mode::kSilent) {
        held_.push_back(c);  // never answer
        continue;
      }
      (void)::send(c, response_.data(), response_.size(), MSG_NOSIGNAL);
      ::close(c);
    }
  }

  Mode mode_;
  std::string response_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread thread_;
  std::vector<int> held_;
  std::mutex mu_;
  std::string last_request_;
};

// A port on 127.0.0.1 that is bound but not listening: connects are refused.
class RefusingPort {
 public:
  RefusingPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~RefusingPort() { ::close(fd_); }
  int port() const { return port_; }
  void startListening() { ::listen(fd_, 16); }
  int fd() const { return fd_; }

 private:
  int fd_;
  int port_;
};

ProbeSpec httpSpec(const std::string& path = "/") {
  ProbeSpec s;
  s.handler = ProbeHandler::kHttpGet;
  s.path = path;
  s.period_seconds = 1;
  return s;
}

TEST(ProbeOnceTest, TcpAcceptingSucceeds) {
  TestServer server(TestServer::Mode::kAccept);
  ProbeResult r = probeOnce(ProbeSpec{}, "127.0.0.1", server.port());
  EXPECT_TRUE(r.success) << r.message;
}

TEST(ProbeOnceTest, TcpRefusedFails) {
  RefusingPort port;
  ProbeResult r = probeOnce(ProbeSpec{}, "127.0.0.1", port.port());
  EXPECT_FALSE(r.success);
  EXPECT_NE(r.message.find("refused"), std::string::npos) << r.message;
}

TEST(ProbeOnceTest, SpecPortOverridesDefault) {
  TestServer server(TestServer::Mode::kAccept);
  RefusingPort refusing;
  ProbeSpec s;
  s.port = server.port();
  EXPECT_TRUE(probeOnce(s, "127.0.0.1", refusing.port()).success);
}

struct HttpCase {
  const char* name;
  std::string response;
  bool want_success;
  std::string want_in_message;
};
class HttpProbeTest : public ::testing::TestWithParam<HttpCase> {};
TEST_P(HttpProbeTest, StatusDecides) {
  TestServer server(TestServer::Mode::kHttp, GetParam().response);
  ProbeResult r = probeOnce(httpSpec("/healthz"), "127.0.0.1", server.port());
  EXPECT_EQ(r.success, GetParam().want_success) << r.message;
  EXPECT_NE(r.message.find(GetParam().want_in_message), std::string::npos) << r.message;
}
INSTANTIATE_TEST_SUITE_P(
    Responses, HttpProbeTest,
    ::testing::Values(
        HttpCase{"ok200", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", true, "HTTP 200"},
        HttpCase{"no_content204", "HTTP/1.1 204 No Content\r\n\r\n", true, "HTTP 204"},
        HttpCase{"redirect302", "HTTP/1.1 302 Found\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n", true,
                 "HTTP 302"},
        HttpCase{"http10", "HTTP/1.0 200 OK\r\n\r\n", true, "HTTP 200"},
        HttpCase{"not_found404", "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", false, "HTTP 404"},
        HttpCase{"error500", "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\nboom", false,
                 "HTTP 500"},
        HttpCase{"unavailable503", "HTTP/1.1 503 Service Unavailable\r\n\r\n", false, "HTTP 503"},
        HttpCase{"closed_without_answer", "", false, "connection closed"},
        HttpCase{"garbage", "SSH-2.0-OpenSSH_9.2\r\n\r\n", false, "not an HTTP response"},
        HttpCase{"split_status_line_no_headers_end", "HTTP/1.1 200 OK\r\n", true, "HTTP 200"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ProbeOnceTest, HttpRequestShape) {
  TestServer server(TestServer::Mode::kHttp, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
  ProbeSpec s = httpSpec("/ready?full=1");
  s.headers = {{"X-Custom", "yes"}, {"user-agent", "my-agent"}};
  ASSERT_TRUE(probeOnce(s, "127.0.0.1", server.port()).success);
  const std::string req = server.lastRequest();
  EXPECT_EQ(req.rfind("GET /ready?full=1 HTTP/1.1\r\n", 0), 0u) << req;
  EXPECT_NE(req.find("Host: 127.0.0.1:" + std::to_string(server.port()) + "\r\n"), std::string::npos) << req;
  EXPECT_NE(req.find("X-Custom: yes\r\n"), std::string::npos) << req;
  EXPECT_NE(req.find("User-Agent: my-agent\r\n"), std::string::npos) << req;  // user header wins
  EXPECT_EQ(req.find("kube-probe"), std::string::npos) << req;
  EXPECT_EQ(req.find("K-Network-Probe"), std::string::npos) << req;

  ASSERT_TRUE(probeOnce(httpSpec("healthz"), "127.0.0.1", server.port()).success);
  const std::string req2 = server.lastRequest();
  EXPECT_EQ(req2.rfind("GET /healthz HTTP/1.1\r\n", 0), 0u) << req2;
  EXPECT_NE(req2.find("User-Agent: kube-probe/1.30\r\n"), std::string::npos) << req2;
  EXPECT_EQ(req2.find("K-Network-Probe"), std::string::npos) << req2;
}

TEST(ProbeOnceTest, SlowServerTimesOut) {
  TestServer server(TestServer::Mode::kSilent);
  ProbeSpec s = httpSpec();
  s.period_seconds = 0;  // aggressive: 100 ms per attempt
  const MonoTime start = RealTimeSource::instance().monotonic();
  ProbeResult r = probeOnce(s, "127.0.0.1", server.port());
  const auto took = RealTimeSource::instance().monotonic() - start;
  EXPECT_FALSE(r.success);
  EXPECT_NE(r.message.find("timeout"), std::string::npos) << r.message;
  EXPECT_GE(took, milliseconds(95));
  EXPECT_LT(took, milliseconds(1000));
  EXPECT_EQ(server.connections(), 1);
}

TEST(ProbeOnceTest, ExecUsesTheHook) {
  ProbeSpec s;
  s.handler = ProbeHandler::kExec;
  s.command = {"cat", "/tmp/ready"};
  std::vector<std::string> seen;
  Duration seen_timeout{};
  auto exec_ok = [&](const std::vector<std::string>& argv, Duration timeout) -> StatusOr<ExecOutcome> {
    seen = argv;
    seen_timeout = timeout;
    return ExecOutcome{0, ""};
  };
  auto exec_fail = [](const std::vector<std::string>&, Duration) -> StatusOr<ExecOutcome> {
    return ExecOutcome{1, "cat: /tmp/ready: No such file or directory\n"};
  };
  auto exec_err = [](const std::vector<std::string>&, Duration) -> StatusOr<ExecOutcome> {
    return unavailable("task gone");
  };
  auto exec_slow = [](const std::vector<std::string>&, Duration) -> StatusOr<ExecOutcome> {
    return Status(Code::kDeadlineExceeded, "still running");
  };
  auto& t = RealTimeSource::instance();
  EXPECT_TRUE(probeOnce(s, "127.0.0.1", 1, seconds(1), t, exec_ok).success);
  EXPECT_EQ(seen, s.command);
  EXPECT_EQ(seen_timeout, seconds(1));
  ProbeResult f = probeOnce(s, "127.0.0.1", 1, seconds(1), t, exec_fail);
  EXPECT_FALSE(f.success);
  EXPECT_EQ(f.message, "exec cat: exit code 1: cat: /tmp/ready: No such file or directory");
  ProbeResult e = probeOnce(s, "127.0.0.1", 1, seconds(1), t, exec_err);
  EXPECT_FALSE(e.success);
  EXPECT_NE(e.message.find("task gone"), std::string::npos);
  ProbeResult slow = probeOnce(s, "127.0.0.1", 1, seconds(2), t, exec_slow);
  EXPECT_FALSE(slow.success);
  EXPECT_EQ(slow.message, "exec cat: timed out after 2000 ms");
  EXPECT_FALSE(probeOnce(s, "127.0.0.1", 1).success);  // no hook
}

TEST(ProbeOnceTest, ReadinessExecAlsoNeedsTheServingPort) {
  auto p = parseProbeSpec(json::parse(R"({"exec": {"command": ["true"]}})"), ProbeKind::kReadiness);
  ASSERT_TRUE(p.isOk());
  EXPECT_TRUE(p->exec_needs_port);
  EXPECT_EQ(attemptTimeout(*p), seconds(1));  // exec keeps timeoutSeconds in aggressive mode
  auto live = parseProbeSpec(json::parse(R"({"exec": {"command": ["true"]}})"), ProbeKind::kLiveness);
  ASSERT_TRUE(live.isOk());
  EXPECT_FALSE(live->exec_needs_port);
  auto exec_ok = [](const std::vector<std::string>&, Duration) -> StatusOr<ExecOutcome> {
    return ExecOutcome{};
  };
  auto& t = RealTimeSource::instance();
  RefusingPort closed;
  ProbeResult r = probeOnce(*p, "127.0.0.1", closed.port(), seconds(1), t, exec_ok);
  EXPECT_FALSE(r.success);
  EXPECT_NE(r.message.find("exit code 0, but tcp"), std::string::npos) << r.message;
  EXPECT_TRUE(probeOnce(*live, "127.0.0.1", closed.port(), seconds(1), t, exec_ok).success);
  TestServer server(TestServer::Mode::kAccept);
  EXPECT_TRUE(probeOnce(*p, "127.0.0.1", server.port(), seconds(1), t, exec_ok).success);
}

TEST(ProbeStateTest, AggressiveExecRetriesEvery200ms) {
  ProbeSpec s;
  s.handler = ProbeHandler::kExec;
  s.command = {"false"};
  MonoTime t0{};
  ProbeState st(s, ProbeKind::kReadiness, t0);
  st.record(false, t0, t0 + milliseconds(40));
  EXPECT_EQ(st.nextProbeAt(), t0 + milliseconds(240));
  st.record(true, t0 + milliseconds(240), t0 + milliseconds(280));
  EXPECT_TRUE(st.healthy());
  EXPECT_EQ(st.nextProbeAt(), t0 + milliseconds(1280));
}

// --- Prober: simulated time; the listener appears after some attempts -------------

TEST(ProberTest, WaitUntilReadyAggressive) {
  SimulatedTimeSource time;
  RefusingPort port;
  Prober prober(time, "127.0.0.1", port.port(), defaultReadinessProbe());
  int waits = 0;
  Duration waited{0};
  Status s = prober.waitUntilReady(time.monotonic() + seconds(10), [&](Duration d) {
    ++waits;
    waited += d;
    time.advance(d);
    if (waits == 4) port.startListening();
  });
  EXPECT_TRUE(s.isOk()) << s.toString();
  EXPECT_TRUE(prober.ready());
  EXPECT_EQ(waits, 4);
  EXPECT_EQ(waited, milliseconds(200));  // 4 x 50 ms
  EXPECT_TRUE(prober.lastReadinessResult().success);
}

TEST(ProberTest, WaitUntilReadyDeadline) {
  SimulatedTimeSource time;
  RefusingPort port;
  Prober prober(time, "127.0.0.1", port.port(), defaultReadinessProbe());
  int waits = 0;
  Status s = prober.waitUntilReady(time.monotonic() + seconds(1), [&](Duration d) {
    ++waits;
    time.advance(d);
  });
  EXPECT_EQ(s.code(), Code::kDeadlineExceeded);
  EXPECT_NE(s.message().find("refused"), std::string::npos) << s.message();
  EXPECT_EQ(waits, 20);
  EXPECT_FALSE(prober.ready());
}

TEST(ProberTest, LivenessFailureStopsWaiting) {
  SimulatedTimeSource time;
  RefusingPort port;
  ProbeSpec readiness;
  readiness.handler = ProbeHandler::kExec;
  readiness.command = {"false"};
  ProbeSpec liveness;
  liveness.period_seconds = 1;
  liveness.failure_threshold = 2;
  Prober prober(time, "127.0.0.1", port.port(), readiness, liveness,
                [](const std::vector<std::string>&, Duration) -> StatusOr<ExecOutcome> {
                  return ExecOutcome{1, ""};
                });
  EXPECT_TRUE(prober.live());
  Status s = prober.waitUntilReady(time.monotonic() + seconds(30), [&](Duration d) { time.advance(d); });
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_FALSE(prober.live());
  EXPECT_NE(prober.lastLivenessResult().message.find("refused"), std::string::npos);
}

TEST(ProberTest, RunDueSkipsProbesNotYetDue) {
  SimulatedTimeSource time;
  TestServer server(TestServer::Mode::kAccept);
  ProbeSpec slow = periodic(10, 1, 3, 5);  // first attempt after 5 s
  Prober prober(time, "127.0.0.1", server.port(), slow);
  MonoTime next = prober.runDue();
  EXPECT_EQ(server.connections(), 0);
  EXPECT_EQ(next - time.monotonic(), seconds(5));
  time.advance(seconds(5));
  next = prober.runDue();
  EXPECT_TRUE(prober.ready());
  EXPECT_EQ(next - time.monotonic(), seconds(10));
}

}  // namespace
}  // namespace knap::runtime
