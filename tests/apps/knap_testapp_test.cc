// Runs the real knap-testapp binary (KNAP_TESTAPP) on loopback and checks
// every endpoint and flag other suites rely on.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <future>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

using nlohmann::json;

std::string appPath() {
  const char* p = getenv("KNAP_TESTAPP");
  return p ? p : "";
}

int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

int connectTo(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

struct Response {
  int status = 0;
  std::string head;
  std::string body;
};

// Sends raw bytes and reads until the server closes (requests use Connection: close).
Response rawExchange(int port, const std::string& raw) {
  Response r;
  int fd = connectTo(port);
  if (fd < 0) return r;
  send(fd, raw.data(), raw.size(), MSG_NOSIGNAL);
  std::string all;
  char buf[65536];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) all.append(buf, static_cast<size_t>(n));
  close(fd);
  size_t end = all.find("\r\n\r\n");
  if (end == std::string::npos) return r;
  r.head = all.substr(0, end);
  r.body = all.substr(end + 4);
  r.status = std::atoi(r.head.substr(9, 3).c_str());
  return r;
}

Response get(int port, const std::string& path, const std::string& extra_headers = "") {
  return rawExchange(
      port, "GET " + path + " HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n" + extra_headers + "\r\n");
}

std::string dechunk(const std::string& body) {
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t eol = body.find("\r\n", pos);
    if (eol == std::string::npos) return out;
    size_t n = std::stoul(body.substr(pos, eol - pos), nullptr, 16);
    if (n == 0) return out;
    out += body.substr(eol + 2, n);
    pos = eol + 2 + n + 2;
  }
}

class App {
 public:
  explicit App(std::vector<std::string> args, std::vector<std::string> env = {}, bool wait_ready = true) {
    port_ = freePort();
    pid_ = fork();
    if (pid_ == 0) {
      // The caller's env first: getenv() takes the first PORT=, so a test can name another port.
      std::vector<std::string> e = env;
      e.push_back("PORT=" + std::to_string(port_));
      e.push_back("K_REVISION=rev-00001");
      std::vector<char*> ep, ap;
      for (auto& s : e) ep.push_back(s.data());
      ep.push_back(nullptr);
      std::string bin = appPath();
      ap.push_back(bin.data());
      for (auto& s : args) ap.push_back(s.data());
      ap.push_back(nullptr);
      int devnull = open("/dev/null", O_RDWR);
      dup2(devnull, 0);  // stdin reads EOF, as the runtime contract wants
      dup2(devnull, 1);
      execve(bin.c_str(), ap.data(), ep.data());
      _exit(127);
    }
    if (wait_ready) ready_ = waitConnectable(5000);
  }
  ~App() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  bool waitConnectable(int ms) {
    for (int i = 0; i < ms / 10; ++i) {
      int fd = connectTo(port_);
      if (fd >= 0) {
        close(fd);
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  // Exit status, or -1 if still running after `ms`.
  int waitExit(int ms) {
    for (int i = 0; i < ms / 10; ++i) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  bool ready() const { return ready_; }

 private:
  int port_ = 0;
  pid_t pid_ = -1;
  bool ready_ = false;
  bool reaped_ = false;
};

class TestAppTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (appPath().empty() || access(appPath().c_str(), X_OK) != 0) {
      FAIL() << "KNAP_TESTAPP must name the built knap-testapp binary (meson test sets it)";
    }
  }
};

TEST_F(TestAppTest, RootEnvAndHeaders) {
  App app({}, {"EXTRA=1"});
  ASSERT_TRUE(app.ready());
  Response r = get(app.port(), "/");
  ASSERT_EQ(r.status, 200);
  json root = json::parse(r.body);
  EXPECT_EQ(root["revision"], "rev-00001");
  EXPECT_NE(root["message"].get<std::string>().find("revision=rev-00001"), std::string::npos);

  json env = json::parse(get(app.port(), "/env").body);
  EXPECT_EQ(env["PORT"], std::to_string(app.port()));
  EXPECT_EQ(env["EXTRA"], "1");

  json h = json::parse(
      get(app.port(), "/headers?a=b", "X-Multi: one\r\nX-Multi: two\r\ntraceparent: 00-abc-01\r\n").body);
  EXPECT_EQ(h["method"], "GET");
  EXPECT_EQ(h["protocol"], "HTTP/1.1");
  EXPECT_EQ(h["host"], "app.test");
  EXPECT_EQ(h["target"], "/headers?a=b");
  EXPECT_EQ(h["headers"]["X-Multi"], "one, two");
  EXPECT_EQ(h["headers"]["traceparent"], "00-abc-01");
  EXPECT_EQ(get(app.port(), "/nope").status, 404);
}

TEST_F(TestAppTest, EchoWithLengthAndChunkedBodies) {
  App app({});
  ASSERT_TRUE(app.ready());
  std::string big(200000, 'b');
  Response r =
      rawExchange(app.port(),
                  "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: text/x-test\r\n"
                  "Content-Length: " +
                      std::to_string(big.size()) + "\r\n\r\n" + big);
  ASSERT_EQ(r.status, 200);
  EXPECT_TRUE(r.body == big);
  EXPECT_NE(r.head.find("Content-Type: text/x-test"), std::string::npos);
  r = rawExchange(app.port(),
                  "POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
                  "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
  EXPECT_EQ(r.body, "hello world");
}

TEST_F(TestAppTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  App app({});
  ASSERT_TRUE(app.ready());
  int fd = connectTo(app.port());
  ASSERT_GE(fd, 0);
  std::string two =
      "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /inflight HTTP/1.1\r\nHost: x\r\nConnection: "
      "close\r\n\r\n";
  send(fd, two.data(), two.size(), MSG_NOSIGNAL);
  std::string all;
  char buf[4096];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0) all.append(buf, static_cast<size_t>(n));
  close(fd);
  size_t first = all.find("HTTP/1.1 200");
  ASSERT_NE(first, std::string::npos);
  EXPECT_NE(all.find("HTTP/1.1 200", first + 1), std::string::npos) << all;
  EXPECT_NE(all.find("\"requests\":2"), std::string::npos) << all;
}

TEST_F(TestAppTest, WhoamiReportsTheRequestItSaw) {
  App app({});
  ASSERT_TRUE(app.ready());
  // FNV-1a-64 of "hello world".
  Response r = rawExchange(app.port(),
                           "POST /whoami HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Request-Id: r-1\r\n"
                           "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
  ASSERT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("\"id\":\"r-1\""), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("\"body_len\":11"), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("\"body_fnv\":\"779a65e7023cd2e7\""), std::string::npos) << r.body;
  EXPECT_NE(r.body.find("\"seq\":1"), std::string::npos) << r.body;
  r = rawExchange(app.port(),
                  "GET /rawhead?mode=connection-cl HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(r.body, "raw connection-cl\n");
}

TEST_F(TestAppTest, HealthToggle) {
  App app({});
  ASSERT_TRUE(app.ready());
  EXPECT_EQ(get(app.port(), "/healthz").status, 200);
  EXPECT_EQ(get(app.port(), "/health/off").status, 200);
  EXPECT_EQ(get(app.port(), "/healthz").status, 503);
  get(app.port(), "/health/on");
  EXPECT_EQ(get(app.port(), "/healthz").status, 200);
}

TEST_F(TestAppTest, ConcurrencyIsCounted) {
  App app({});
  ASSERT_TRUE(app.ready());
  std::vector<std::future<Response>> calls;
  for (int i = 0; i < 5; ++i)
    calls.push_back(std::async(std::launch::async, [&] { return get(app.port(), "/sleep?ms=400"); }));
  for (auto& c : calls) EXPECT_EQ(c.get().status, 200);
  json inflight = json::parse(get(app.port(), "/inflight").body);
  EXPECT_EQ(inflight["max_inflight"], 5);
  EXPECT_EQ(inflight["inflight"], 1);  // this request
}

// A client that never has two requests outstanding (the router with
// containerConcurrency 1, alternating between two pooled keep-alive
// connections) must never be seen as 2 in flight, although the server thread
// of the previous request may not yet have returned from its write.
TEST_F(TestAppTest, OneAtATimeClientIsNeverTwoInFlight) {
  App app({});
  ASSERT_TRUE(app.ready());
  int fds[2] = {connectTo(app.port()), connectTo(app.port())};
  ASSERT_GE(fds[0], 0);
  ASSERT_GE(fds[1], 0);
  const std::string req = "GET /sleep?ms=0 HTTP/1.1\r\nHost: x\r\n\r\n";
  std::string pending[2];
  for (int i = 0; i < 3000; ++i) {
    int fd = fds[i % 2];
    std::string& buf = pending[i % 2];
    ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
    size_t end = std::string::npos;
    char chunk[4096];
    while (true) {  // read exactly one response (Content-Length framed)
      size_t head = buf.find("\r\n\r\n");
      if (head != std::string::npos) {
        size_t cl = buf.find("Content-Length: ");
        ASSERT_NE(cl, std::string::npos) << buf;
        end = head + 4 + std::stoul(buf.substr(cl + 16));
        if (buf.size() >= end) break;
      }
      ssize_t n = recv(fd, chunk, sizeof chunk, 0);
      ASSERT_GT(n, 0);
      buf.append(chunk, static_cast<size_t>(n));
    }
    buf.erase(0, end);
  }
  close(fds[0]);
  close(fds[1]);
  json inflight = json::parse(get(app.port(), "/inflight").body);
  EXPECT_EQ(inflight["max_inflight"], 1) << inflight.dump();
  EXPECT_EQ(inflight["requests"], 3001);
}

TEST_F(TestAppTest, StreamAllocAndInfo) {
  App app({});
  ASSERT_TRUE(app.ready());
  Response s = get(app.port(), "/stream?chunks=3&ms=10");
  EXPECT_NE(s.head.find("Transfer-Encoding: chunked"), std::string::npos);
  EXPECT_EQ(dechunk(s.body), "chunk 0\nchunk 1\nchunk 2\n");
  EXPECT_EQ(json::parse(get(app.port(), "/alloc?mb=8").body)["allocated_mb"], 8);
  EXPECT_EQ(json::parse(get(app.port(), "/alloc?mb=2").body)["allocated_mb"], 10);
  EXPECT_EQ(json::parse(get(app.port(), "/alloc?free=1").body)["allocated_mb"], 0);
  json info = json::parse(get(app.port(), "/info").body);
  EXPECT_EQ(info["uid"], getuid());
  EXPECT_EQ(info["files"]["/dev/null"]["type"], "char_device");
  EXPECT_EQ(info["files"]["/tmp"]["type"], "directory");
  EXPECT_TRUE(info.contains("cgroup_v1"));
  EXPECT_TRUE(info["proc_sys"].contains("writable"));
  EXPECT_EQ(info["stdin"], "eof");  // stdin is /dev/null here
}

TEST_F(TestAppTest, CrashExitsWithTheCode) {
  App app({});
  ASSERT_TRUE(app.ready());
  get(app.port(), "/crash?code=7");
  EXPECT_EQ(app.waitExit(3000), 7);
}

TEST_F(TestAppTest, SigtermDrainsInFlightRequestsThenExitsZero) {
  App app({});
  ASSERT_TRUE(app.ready());
  auto slow = std::async(std::launch::async, [&] { return get(app.port(), "/sleep?ms=600"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  kill(app.pid(), SIGTERM);
  Response r = slow.get();
  EXPECT_EQ(r.status, 200);  // finished despite SIGTERM
  EXPECT_EQ(app.waitExit(3000), 0);
}

TEST_F(TestAppTest, StartupFlags) {
  {
    App fail({"--fail-start"}, {}, false);
    EXPECT_EQ(fail.waitExit(3000), 1);
  }
  {
    App crash({"--exit-after-ms", "200"});
    ASSERT_TRUE(crash.ready());
    EXPECT_EQ(crash.waitExit(3000), 3);
  }
  {
    App slow({"--listen-delay-ms", "500"}, {}, false);
    std::this_thread::sleep_for(std::chrono::milliseconds(150));
    EXPECT_EQ(connectTo(slow.port()), -1);  // not listening yet
    EXPECT_TRUE(slow.waitConnectable(3000));
  }
  {
    int port = freePort();
    App arg({"--port-from-arg", std::to_string(port)}, {}, false);  // PORT env names another port
    int status = 0;
    for (int i = 0; i < 300 && status == 0; ++i) {
      status = get(port, "/healthz").status;
      if (status == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    EXPECT_EQ(status, 200);
    EXPECT_EQ(connectTo(arg.port()), -1);
  }
}

// What Knative's conformance test images do (readiness, timeout,
// singlethreaded, failing, hellovolume, multicontainer), and the exec-probe
// helper `knap-testapp probe`.
TEST_F(TestAppTest, KnativeReadinessImage) {
  App app({}, {"READY_DELAY=400ms"});
  ASSERT_TRUE(app.ready());
  EXPECT_EQ(get(app.port(), "/healthz/readiness").status, 500);
  auto probe = [&] {
    App p({"probe"}, {"PORT=" + std::to_string(app.port())}, false);
    return p.waitExit(3000);
  };
  EXPECT_EQ(probe(), 1);  // not ready yet: exit 1
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  Response ready = get(app.port(), "/healthz/readiness");
  EXPECT_EQ(ready.status, 200);
  EXPECT_EQ(ready.body, "Hello World! How about some tasty noodles?");
  EXPECT_EQ(get(app.port(), "/healthz/liveness").body, "1");
  EXPECT_EQ(get(app.port(), "/healthz/liveness").body, "2");
  EXPECT_EQ(get(app.port(), "/healthz/livenessCounter").body, "2");
  EXPECT_EQ(probe(), 0);
  EXPECT_EQ(get(app.port(), "/start-failing").status, 200);
  EXPECT_EQ(probe(), 1);
  EXPECT_EQ(get(app.port(), "/healthz/readiness").status, 500);
  EXPECT_EQ(get(app.port(), "/healthz/liveness").status, 500);
  EXPECT_EQ(get(app.port(), "/healthz/livenessCounter").body, "2");
}

TEST_F(TestAppTest, ProbeSubcommandFailsWhenNothingListens) {
  int port = freePort();
  App nobody({"probe"}, {"PORT=" + std::to_string(port)}, false);
  EXPECT_EQ(nobody.waitExit(3000), 1);
}

TEST_F(TestAppTest, TimeoutSingleFilesAndForward) {
  App app({}, {"TEXT=What a spaceport!"});
  ASSERT_TRUE(app.ready());
  auto start = std::chrono::steady_clock::now();
  Response t = get(app.port(), "/timeout?initialTimeout=100&timeout=200");
  EXPECT_EQ(t.status, 200);
  EXPECT_EQ(t.body.find("Slept for 200 milliseconds") != std::string::npos, true) << t.body;
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(300));
  EXPECT_EQ(get(app.port(), "/text").body, "What a spaceport!");
  // /single: a second request while one is inside gets 500.
  std::thread first([&] { EXPECT_EQ(get(app.port(), "/single?ms=400").status, 200); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(get(app.port(), "/single?ms=1").status, 500);
  first.join();
  EXPECT_EQ(get(app.port(), "/single?ms=1").status, 200);
  // /write then /file
  std::string path = "/tmp/knap-testapp-test-" + std::to_string(app.port());
  EXPECT_EQ(get(app.port(), "/write?path=" + path + "&text=From+file").status, 200);
  json f = json::parse(get(app.port(), "/file?path=" + path).body);
  EXPECT_EQ(f["content"], "From file");
  EXPECT_EQ(f["stat"]["is_dir"], false);
  unlink(path.c_str());
  EXPECT_EQ(get(app.port(), "/file?path=/no/such/file").status, 404);
  // /forward to another app on loopback
  App sidecar({}, {"TEXT=Yay!! multi-container works"});
  ASSERT_TRUE(sidecar.ready());
  Response fw = get(app.port(), "/forward?port=" + std::to_string(sidecar.port()) + "&path=/text");
  EXPECT_EQ(fw.status, 200);
  EXPECT_EQ(fw.body, "Yay!! multi-container works");
  // /mounts: type and source of /proc
  json m = json::parse(get(app.port(), "/mounts").body);
  EXPECT_EQ(m["/proc"]["type"], "proc");
  // positional arguments are kept, not rejected (TestCmdArgs)
  App args({"abra", "cadabra"});
  ASSERT_TRUE(args.ready());
  EXPECT_EQ(json::parse(get(args.port(), "/info").body)["argv"][2], "cadabra");
}

TEST_F(TestAppTest, CrashAfterLikeKnativesFailingImage) {
  App crash({"--crash-after-ms", "100"}, {}, false);
  EXPECT_EQ(crash.waitExit(3000), 5);
}

}  // namespace
