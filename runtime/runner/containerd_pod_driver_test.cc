// End to end: PodRunner + ContainerdPodDriver against the machine's
// containerd, runc and CNI plugins. knap-testapp is packed into an image with
// knap-mkimage and imported into a private containerd namespace; pods run on
// a private bridge and subnet, and only those pod IPs receive traffic.
// Root only; skips loudly otherwise. Starts containerd if its socket is absent.
#include "runtime/runner/containerd_pod_driver.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "runtime/containerd/image_import.h"
#include "runtime/pod/subprocess.h"
#include "runtime/runner/pod_runner.h"

namespace knap::runner {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr char kImage[] = "dev.local/knap-runner-test:v1";

// GET http://ip:port/path with Connection: close; returns the body or "".
std::string httpGet(const std::string& ip, int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  std::string resp;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    std::string req = "GET " + path + " HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    (void)::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    char buf[8192];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) resp.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  size_t body = resp.find("\r\n\r\n");
  return body == std::string::npos ? "" : resp.substr(body + 4);
}

// GET with a receive timeout of `timeout_ms`; "" when nothing came back in time.
std::string httpGetWithin(const std::string& ip, int port, const std::string& path, int timeout_ms) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  std::string resp;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    std::string req = "GET " + path + " HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    (void)::send(fd, req.data(), req.size(), MSG_NOSIGNAL);
    char buf[8192];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) resp.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  size_t body = resp.find("\r\n\r\n");
  return body == std::string::npos ? "" : resp.substr(body + 4);
}

json makeRevision(const std::string& name, json container_extra = json::object(),
                  json annotations = json::object()) {
  json c = {{"name", "user-container"}, {"image", kImage}};
  for (auto& [k, v] : container_extra.items()) c[k] = v;
  return {{"apiVersion", "serving.knative.dev/v1"},
          {"kind", "Revision"},
          {"metadata",
           {{"name", name},
            {"namespace", "default"},
            {"annotations", annotations},
            {"labels",
             {{"serving.knative.dev/service", "hello"}, {"serving.knative.dev/configuration", "hello"}}}}},
          {"spec", {{"containers", json::array({c})}, {"timeoutSeconds", 10}}}};
}

struct Env {
  bool ok = false;
  std::string skip;
  std::string dir;
  int tag = 0;
  std::unique_ptr<containerd::ContainerdClient> client;
  runtime::CniOptions cni;
};

Env& env() {
  static Env* e = [] {
    auto* e = new Env();
    if (::geteuid() != 0) {
      e->skip = "needs root (containerd, runc, netns)";
      return e;
    }
    if (::access("/usr/lib/cni/bridge", X_OK) != 0) {
      e->skip = "CNI plugins missing (apt-get install containernetworking-plugins)";
      return e;
    }
    const char* app = std::getenv("KNAP_TESTAPP");
    const char* mk = std::getenv("KNAP_MKIMAGE");
    if (!app || !mk || ::access(app, X_OK) != 0 || ::access(mk, X_OK) != 0) {
      e->skip =
          "KNAP_TESTAPP / KNAP_MKIMAGE not built: ninja -C <build> tests/apps/knap-testapp "
          "tools/mkimage/knap-mkimage";
      return e;
    }
    containerd::ContainerdClient::Options o;
    o.ns = "knap-runner-test";
    e->client = std::make_unique<containerd::ContainerdClient>(o, RealTimeSource::instance());
    if (!e->client->version(seconds(3)).isOk()) {
      // Start containerd when its socket is absent (CI containers).
      (void)runtime::runProgram({"sh", "-c", "containerd >/tmp/knap-runner-containerd.log 2>&1 &"}, {},
                                RealTimeSource::instance());
      if (!e->client->version(seconds(20)).isOk()) {
        e->skip = "containerd does not answer on " + o.address + " (see /tmp/knap-runner-containerd.log)";
        return e;
      }
    }
    char tmpl[] = "/tmp/knap-runner-e2e-XXXXXX";
    e->dir = ::mkdtemp(tmpl);
    e->tag = static_cast<int>(::getpid() % 200) + 20;
    e->cni.bridge = "knaprn" + std::to_string(e->tag);
    e->cni.subnet = "10.216." + std::to_string(e->tag) + ".0/24";
    e->cni.network_name = "knaprunner" + std::to_string(e->tag);
    e->cni.netns_prefix = "knaprunner" + std::to_string(e->tag) + "-";
    e->cni.ipam_data_dir = e->dir + "/ipam";
    std::string tar = e->dir + "/app.tar";
    std::string cmd =
        std::string(mk) + " --out " + tar + " --name " + kImage + " --file " + app +
        ":/app/knap-testapp --entrypoint /app/knap-testapp --user app --workdir /app --expose 8080";
    if (std::system((cmd + " >/dev/null").c_str()) != 0) {
      e->skip = "knap-mkimage failed: " + cmd;
      return e;
    }
    auto imported = containerd::importImageArchive(*e->client, tar);
    if (!imported.isOk()) {
      e->skip = "import failed: " + imported.status().toString();
      return e;
    }
    e->ok = true;
    return e;
  }();
  return *e;
}

// Removes the test bridge, the image and the work dir after all tests.
class E2eCleanup : public ::testing::Environment {
 public:
  void TearDown() override {
    Env& e = env();
    if (!e.ok) return;
    (void)e.client->deleteImage(kImage, true);
    (void)runtime::runProgram({"ip", "link", "del", e.cni.bridge}, {}, RealTimeSource::instance());
    std::error_code ec;
    fs::remove_all(e.dir, ec);
  }
};
const auto* const kCleanup = ::testing::AddGlobalTestEnvironment(new E2eCleanup);

class RunnerE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!env().ok) GTEST_SKIP() << "\n*** SKIPPED: " << env().skip << " ***";
    net_ = std::make_unique<runtime::CniNetwork>(env().cni, RealTimeSource::instance());
    opts_.data_dir = env().dir + "/data";
    driver_ = std::make_unique<ContainerdPodDriver>(*env().client, *net_, RealTimeSource::instance(), opts_);
    runner_ = makeRunner(*driver_);
  }
  void TearDown() override {
    if (runner_) runner_->shutdownAndDestroyAll();
    runner_.reset();
  }
  std::unique_ptr<PodRunner> makeRunner(PodDriver& d) {
    PodRunnerOptions o;
    o.backoff_initial = milliseconds(200);
    o.backoff_max = seconds(2);
    o.config.deployment.progress_deadline = seconds(60);
    o.max_stop_grace = seconds(5);
    auto r = std::make_unique<PodRunner>(d, RealTimeSource::instance(), o);
    return r;
  }
  // Polls until pred holds or `timeout` passes.
  bool waitFor(const std::function<bool()>& pred, Duration timeout = seconds(30)) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      if (pred()) return true;
      std::this_thread::sleep_for(milliseconds(20));
    }
    return pred();
  }
  Endpoint waitReady(const std::string& name) {
    std::string k = "default/" + name;
    bool ok = waitFor([&] { return !runner_->readyEndpoints(k).empty(); });
    EXPECT_TRUE(ok) << name
                    << " never became ready: " << runner_->health("default", name).container_healthy.message;
    auto eps = runner_->readyEndpoints(k);
    return eps.empty() ? Endpoint{} : eps[0];
  }

  ContainerdPodDriverOptions opts_;
  std::unique_ptr<runtime::CniNetwork> net_;
  std::unique_ptr<ContainerdPodDriver> driver_;
  std::unique_ptr<PodRunner> runner_;
};

TEST_F(RunnerE2eTest, PodServesAndHonoursTheRuntimeContract) {
  runner_->start();
  json extra = {{"command", json::array({"/app/knap-testapp"})},
                {"args", json::array({"--listen-delay-ms", "200"})},
                {"workingDir", "/tmp"},
                {"env", json::array({{{"name", "GREETING"}, {"value", "hi"}}})},
                {"resources", {{"limits", {{"cpu", "1"}, {"memory", "128Mi"}}}}}};
  runner_->ensure(makeRevision("contract-00001", extra));
  Endpoint ep = waitReady("contract-00001");
  ASSERT_FALSE(ep.ip.empty());
  EXPECT_EQ(ep.port, 8080);
  EXPECT_EQ(ep.ip.rfind("10.216.", 0), 0u) << "pod must be on the test bridge: " << ep.ip;
  EXPECT_FALSE(httpGet(ep.ip, 8080, "/").empty());

  auto h = runner_->health("default", "contract-00001");
  EXPECT_EQ(h.resources_available.status, "True");
  EXPECT_EQ(h.container_healthy.status, "True");
  EXPECT_EQ(h.actual_replicas, 1);
  EXPECT_EQ(h.image_digest.rfind("dev.local/knap-runner-test@sha256:", 0), 0u) << h.image_digest;

  json info, envj;
  try {
    info = json::parse(httpGet(ep.ip, 8080, "/info"));
    envj = json::parse(httpGet(ep.ip, 8080, "/env"));
  } catch (const json::exception& e) {
    FAIL() << "bad /info or /env: " << e.what();
  }
  EXPECT_EQ(envj["PORT"], "8080");
  EXPECT_EQ(envj["K_SERVICE"], "hello");
  EXPECT_EQ(envj["K_CONFIGURATION"], "hello");
  EXPECT_EQ(envj["K_REVISION"], "contract-00001");
  EXPECT_EQ(envj["GREETING"], "hi");
  EXPECT_EQ(info["argv"], json({"/app/knap-testapp", "--listen-delay-ms", "200"}));
  EXPECT_EQ(info["cwd"], "/tmp");
  EXPECT_EQ(info["uid"], 1000) << "image USER app";
  EXPECT_EQ(info["stdin"], "eof");
  EXPECT_EQ(info["files"]["/tmp"]["mode"], "1777");
  EXPECT_EQ(info["files"]["/dev/console"]["exists"], false);
  for (const char* dev : {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}) {
    EXPECT_EQ(info["files"][dev]["type"], "char_device") << dev;
  }
  EXPECT_EQ(info["files"]["/etc/resolv.conf"]["type"], "file");
  EXPECT_EQ(info["files"]["/etc/resolv.conf"]["perm"], "rw-r--r--");
  EXPECT_EQ(info["proc_sys"]["writable"], false) << info["proc_sys"].dump();
  EXPECT_EQ(info["cgroup_fs"]["writable"], false) << info["cgroup_fs"].dump();
  EXPECT_EQ(info["cgroup_v1"]["memory.limit_in_bytes"], "134217728");
  EXPECT_EQ(info["cgroup_v1"]["cpu.cfs_quota_us"], "100000");
  EXPECT_EQ(info["cgroup_v1"]["cpu.cfs_period_us"], "100000");

  // Logs are captured per pod.
  auto pods = runner_->pods("default/contract-00001");
  ASSERT_EQ(pods.size(), 1u);
  std::ifstream meta(opts_.data_dir + "/pods/" + pods[0].pod_id + "/meta.json");
  EXPECT_TRUE(meta.good());
  EXPECT_TRUE(fs::exists(opts_.data_dir + "/pods/" + pods[0].pod_id + "/stdout.log"));
  // /tmp is a tmpfs of the memory limit, not a directory on the data disk.
  const std::string tmp = opts_.data_dir + "/pods/" + pods[0].pod_id + "/tmp";
  struct statfs sf {};
  ASSERT_EQ(::statfs(tmp.c_str(), &sf), 0) << tmp;
  EXPECT_EQ(static_cast<unsigned long>(sf.f_type), static_cast<unsigned long>(TMPFS_MAGIC)) << tmp;
  EXPECT_EQ(static_cast<int64_t>(sf.f_blocks) * sf.f_bsize, 128 << 20);
}

TEST_F(RunnerE2eTest, ContainerPortAndRunAsUser) {
  runner_->start();
  json extra = {{"ports", json::array({{{"containerPort", 8801}}})},
                {"securityContext", {{"runAsUser", 2020}}}};
  runner_->ensure(makeRevision("port-00001", extra));
  Endpoint ep = waitReady("port-00001");
  ASSERT_FALSE(ep.ip.empty());
  EXPECT_EQ(ep.port, 8801);
  json envj = json::parse(httpGet(ep.ip, 8801, "/env"), nullptr, false);
  json info = json::parse(httpGet(ep.ip, 8801, "/info"), nullptr, false);
  EXPECT_EQ(envj["PORT"], "8801");
  EXPECT_EQ(info["uid"], 2020);
  EXPECT_EQ(info["euid"], 2020);
}

TEST_F(RunnerE2eTest, CrashingImageFailsWithExitCodeAndLogLines) {
  runner_->start();
  runner_->ensure(makeRevision("crash-00001", {{"args", json::array({"--fail-start"})}}));
  ASSERT_TRUE(
      waitFor([&] { return runner_->health("default", "crash-00001").container_healthy.status == "False"; }));
  auto h = runner_->health("default", "crash-00001");
  EXPECT_EQ(h.container_healthy.reason, "ExitCode1");
  EXPECT_EQ(h.container_healthy.message.rfind("Container failed with: ", 0), 0u)
      << h.container_healthy.message;
  EXPECT_NE(h.container_healthy.message.find("--fail-start"), std::string::npos)
      << h.container_healthy.message;
}

// Exec probes run in the container through containerd's Tasks.Exec: the
// test app's "probe" subcommand asks its own /healthz/readiness.
TEST_F(RunnerE2eTest, ExecReadinessPassesWithinSecondsAtBothPeriods) {
  runner_->start();
  for (int period : {0, 1}) {
    std::string name = "exec-ok-" + std::to_string(period) + "-00001";
    json probe = {{"exec", {{"command", json::array({"/app/knap-testapp", "probe"})}}},
                  {"periodSeconds", period}};
    auto started = std::chrono::steady_clock::now();
    runner_->ensure(makeRevision(name, {{"readinessProbe", probe}}));
    Endpoint ep = waitReady(name);
    ASSERT_FALSE(ep.ip.empty());
    auto took = std::chrono::steady_clock::now() - started;
    EXPECT_LT(took, seconds(5)) << name;
    EXPECT_EQ(runner_->health("default", name).container_healthy.status, "True");
  }
}

TEST_F(RunnerE2eTest, ExecReadinessFailureShowsExitCodeAndOutput) {
  runner_->start();
  // READY_DELAY keeps /healthz/readiness at 500: `knap-testapp probe` exits 1.
  json extra = {
      {"env", json::array({{{"name", "READY_DELAY"}, {"value", "600s"}}})},
      {"readinessProbe",
       {{"exec", {{"command", json::array({"/app/knap-testapp", "probe"})}}}, {"periodSeconds", 1}}}};
  runner_->ensure(makeRevision("exec-bad-00001", extra));
  ASSERT_TRUE(waitFor([&] {
    return runner_->health("default", "exec-bad-00001").container_healthy.message.find("exit code 1") !=
           std::string::npos;
  })) << runner_->health("default", "exec-bad-00001").container_healthy.message;
  auto h = runner_->health("default", "exec-bad-00001");
  EXPECT_EQ(h.container_healthy.status, "Unknown");
  EXPECT_EQ(h.container_healthy.message, "Readiness probe failed: exec /app/knap-testapp: exit code 1");
  EXPECT_EQ(h.actual_replicas, 0);
  // A command that is not there is a failure too, with containerd's reason.
  auto pods = runner_->pods("default/exec-bad-00001");
  ASSERT_EQ(pods.size(), 1u);
  PodHandle handle;
  handle.pod_id = pods[0].pod_id;
  auto r = driver_->execInPod(handle, {"/no/such/binary"}, seconds(2));
  EXPECT_FALSE(r.isOk() && r->exit_code == 0);
  // A command that outlives its timeout is killed and reported as such.
  auto slow = driver_->execInPod(
      handle, {"/app/knap-testapp", "--listen-delay-ms", "60000", "--port-from-arg", "1"}, milliseconds(500));
  EXPECT_EQ(slow.status().code(), Code::kDeadlineExceeded) << slow.status().toString();
  // The exec processes are gone again: the next one still works.
  auto again = driver_->execInPod(handle, {"/app/knap-testapp", "probe"}, seconds(2));
  ASSERT_TRUE(again.isOk()) << again.status().toString();
  EXPECT_EQ(again->exit_code, 1);
}

TEST_F(RunnerE2eTest, ExecLivenessFailureRestartsThePod) {
  runner_->start();
  // Passes while the app is ready; /start-failing makes `probe` exit 1.
  json extra = {{"livenessProbe",
                 {{"exec", {{"command", json::array({"/app/knap-testapp", "probe"})}}},
                  {"periodSeconds", 1},
                  {"failureThreshold", 2}}}};
  runner_->ensure(makeRevision("exec-live-00001", extra));
  Endpoint ep = waitReady("exec-live-00001");
  ASSERT_FALSE(ep.ip.empty());
  std::this_thread::sleep_for(seconds(3));  // several passing exec liveness probes
  ASSERT_EQ(runner_->pods("default/exec-live-00001").size(), 1u);
  EXPECT_EQ(runner_->pods("default/exec-live-00001")[0].pod_id, ep.pod_id) << "a passing probe restarted it";
  EXPECT_FALSE(httpGet(ep.ip, ep.port, "/start-failing").empty());
  ASSERT_TRUE(waitFor(
      [&] {
        auto eps = runner_->readyEndpoints("default/exec-live-00001");
        return !eps.empty() && eps[0].pod_id != ep.pod_id;
      },
      seconds(40)))
      << "the exec liveness failure did not restart the container";
}

TEST_F(RunnerE2eTest, MissingImageIsContainerMissing) {
  runner_->start();
  json rev = makeRevision("missing-00001");
  rev["spec"]["containers"][0]["image"] = "dev.local/no-such-image:v9";
  runner_->ensure(rev);
  ASSERT_TRUE(waitFor(
      [&] { return runner_->health("default", "missing-00001").container_healthy.status == "False"; }));
  auto h = runner_->health("default", "missing-00001");
  EXPECT_EQ(h.container_healthy.reason, "ContainerMissing");
  EXPECT_NE(h.container_healthy.message.find("knap image import"), std::string::npos);
}

TEST_F(RunnerE2eTest, MemoryHogIsOomKilled) {
  runner_->start();
  runner_->ensure(makeRevision("hog-00001", {{"resources", {{"limits", {{"memory", "64Mi"}}}}}}));
  Endpoint ep = waitReady("hog-00001");
  ASSERT_FALSE(ep.ip.empty());
  (void)httpGet(ep.ip, 8080, "/alloc?mb=200");
  ASSERT_TRUE(waitFor([&] {
    return runner_->health("default", "hog-00001").container_healthy.status == "False";
  })) << "the hog was not reported";
  auto h = runner_->health("default", "hog-00001");
  EXPECT_EQ(h.container_healthy.reason, "OOMKilled") << h.container_healthy.message;
}

TEST_F(RunnerE2eTest, RestartAdoptsRunningPodsWithTheirPids) {
  runner_->start();
  runner_->ensure(makeRevision("adopt-00001"));
  Endpoint ep = waitReady("adopt-00001");
  ASSERT_FALSE(ep.ip.empty());
  json before = json::parse(httpGet(ep.ip, 8080, "/info"), nullptr, false);
  auto pods = runner_->pods("default/adopt-00001");
  ASSERT_EQ(pods.size(), 1u);
  uint32_t host_pid = pods[0].pid;
  ASSERT_NE(host_pid, 0u);
  runner_->stop();  // knapd exits: pods keep running
  runner_.reset();
  ASSERT_EQ(::kill(static_cast<pid_t>(host_pid), 0), 0) << "pod process died with the runner";

  runner_ = makeRunner(*driver_);
  ASSERT_TRUE(runner_->adoptExisting({"default/adopt-00001"}).isOk());
  runner_->start();
  runner_->ensure(makeRevision("adopt-00001"));
  Endpoint again = waitReady("adopt-00001");
  EXPECT_EQ(again.ip, ep.ip);
  auto after_pods = runner_->pods("default/adopt-00001");
  ASSERT_EQ(after_pods.size(), 1u);
  EXPECT_TRUE(after_pods[0].adopted);
  EXPECT_EQ(after_pods[0].pid, host_pid);
  json after = json::parse(httpGet(again.ip, 8080, "/info"), nullptr, false);
  EXPECT_EQ(after["uptime_ms"].get<int64_t>() >= before["uptime_ms"].get<int64_t>(), true)
      << "process restarted";
}

// Multi-container pods: the sidecar shares the pod's netns (the serving
// container reaches it on localhost), has its own env and logs, is adopted
// after a restart, and its crash is the pod's crash: reported and replaced.
TEST_F(RunnerE2eTest, SidecarRunsInThePodIsAdoptedAndItsCrashReplacesThePod) {
  json rev = makeRevision("multi-00001", {{"ports", {{{"containerPort", 8881}}}},
                                          {"env", {{{"name", "FORWARD_PORT"}, {"value", "8882"}}}}});
  rev["spec"]["containers"][0]["volumeMounts"] = {{{"name", "shared"}, {"mountPath", "/shared"}}};
  rev["spec"]["containers"].push_back({{"name", "side"},
                                       {"image", kImage},
                                       {"args", {"--port-from-arg", "8882"}},
                                       {"env", {{{"name", "TEXT"}, {"value", "from the sidecar"}}}},
                                       {"volumeMounts", {{{"name", "shared"}, {"mountPath", "/data"}}}}});
  rev["spec"]["volumes"] = {{{"name", "shared"}, {"emptyDir", {{"sizeLimit", "4Mi"}}}}};
  runner_->start();
  runner_->ensure(rev);
  Endpoint ep = waitReady("multi-00001");
  ASSERT_FALSE(ep.ip.empty());
  EXPECT_EQ(ep.port, 8881);
  EXPECT_NE(httpGet(ep.ip, 8881, "/forward?path=/text").find("from the sidecar"), std::string::npos);
  const std::string pod = ep.pod_id, side = pod + ".1";
  auto t = env().client->getTask(side);
  ASSERT_TRUE(t.isOk()) << t.status().toString();
  EXPECT_EQ(t->status, containerd::TaskStatus::kRunning);
  EXPECT_TRUE(fs::exists(opts_.data_dir + "/pods/" + pod + "/containers/side/stdout.log"));
  // The emptyDir is one volume for both containers.
  EXPECT_NE(httpGet(ep.ip, 8882, "/write?path=/data/note&text=shared").find("written"), std::string::npos);
  EXPECT_NE(httpGet(ep.ip, 8881, "/file?path=/shared/note").find("\"content\":\"shared\""),
            std::string::npos);
  auto existing = driver_->listExisting();
  ASSERT_TRUE(existing.isOk());
  for (const auto& a : *existing) EXPECT_NE(a.handle.pod_id, side) << "a sidecar is not a pod";
  controller::RevisionHealth h = runner_->health("default", "multi-00001");
  ASSERT_EQ(h.image_digests.size(), 2u);
  EXPECT_EQ(h.image_digests[0], h.image_digests[1]);  // one image for both here

  // knapd restarts: the pod and its sidecar are adopted, not recreated.
  runner_->stop();
  runner_.reset();
  driver_ = std::make_unique<ContainerdPodDriver>(*env().client, *net_, RealTimeSource::instance(), opts_);
  runner_ = makeRunner(*driver_);
  ASSERT_TRUE(runner_->adoptExisting({"default/multi-00001"}).isOk());
  runner_->start();
  runner_->ensure(rev);
  Endpoint again = waitReady("multi-00001");
  EXPECT_EQ(again.pod_id, pod);

  // The sidecar dies: the pod is replaced (a new one, with a new sidecar).
  ASSERT_TRUE(env().client->killTask(side, SIGKILL).isOk());
  ASSERT_TRUE(waitFor(
      [&] {
        auto eps = runner_->readyEndpoints("default/multi-00001");
        return !eps.empty() && eps[0].pod_id != pod;
      },
      seconds(60)))
      << runner_->health("default", "multi-00001").container_healthy.message;
  EXPECT_FALSE(env().client->getContainer(side).isOk()) << "the crashed pod's sidecar is left behind";
  Endpoint replaced = runner_->readyEndpoints("default/multi-00001")[0];
  EXPECT_NE(httpGet(replaced.ip, 8881, "/forward?path=/text").find("from the sidecar"), std::string::npos);
  runner_->remove("default", "multi-00001");
  ASSERT_TRUE(
      waitFor([&] { return !env().client->getContainer(replaced.pod_id + ".1").isOk(); }, seconds(30)));
  ASSERT_TRUE(waitFor([&] { return !fs::exists(opts_.data_dir + "/pods/" + replaced.pod_id); }, seconds(30)));
  std::ifstream mounts("/proc/self/mountinfo");
  std::string line;
  while (std::getline(mounts, line))
    EXPECT_EQ(line.find(opts_.data_dir + "/pods/"), std::string::npos) << line;
}

TEST_F(RunnerE2eTest, LogsAreRotatedByCopyTruncateAndKeepFlowing) {
  opts_.log_rotate_bytes = 2000;
  opts_.log_check_interval = Duration::zero();
  runner_.reset();
  driver_ = std::make_unique<ContainerdPodDriver>(*env().client, *net_, RealTimeSource::instance(), opts_);
  runner_ = makeRunner(*driver_);
  runner_->start();
  runner_->ensure(makeRevision("logs-00001"));
  Endpoint ep = waitReady("logs-00001");
  ASSERT_FALSE(ep.ip.empty());
  for (int i = 0; i < 100; ++i) (void)httpGet(ep.ip, 8080, "/?request=" + std::to_string(i));
  std::string dir = driver_->podDir(runner_->pods("default/logs-00001")[0].pod_id);
  std::string log = dir + "/stdout.log";
  ASSERT_GT(fs::file_size(log), 2000u);
  driver_->rotateLogs(runner_->pods("default/logs-00001")[0].pod_id);
  ASSERT_TRUE(fs::exists(log + ".1"));
  EXPECT_GT(fs::file_size(log + ".1"), 2000u);
  EXPECT_EQ(fs::file_size(log), 0u);
  (void)httpGet(ep.ip, 8080, "/after-rotation");
  // The shim appends asynchronously: lines of the requests before the
  // rotation may still land first, so wait for this request's own line.
  ASSERT_TRUE(
      waitFor([&] { return fileTail(log, 5).find("/after-rotation") != std::string::npos; }, seconds(30)));
  std::string text = fileTail(log, 5);
  EXPECT_NE(text.find("/after-rotation"), std::string::npos) << text;
  EXPECT_EQ(text.find('\0'), std::string::npos) << "the shim must append at the new end, not leave a hole";
}

TEST(ContainerdPodDriverPure, FileTail) {
  char tmpl[] = "/tmp/knap-tail-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  std::string p = dir + "/f.log";
  {
    std::ofstream f(p);
    for (int i = 1; i <= 30; ++i) f << "line " << i << "\n";
  }
  EXPECT_EQ(fileTail(p, 3), "line 28\nline 29\nline 30");
  EXPECT_EQ(fileTail(p, 1), "line 30");
  {
    std::ofstream f(p);
    f << "only\n";
  }
  EXPECT_EQ(fileTail(p, 5), "only");
  {
    std::ofstream f(p);
    f << std::string(5000, 'x') << "\nlast\n";
  }
  EXPECT_EQ(fileTail(p, 5), "last");  // at most 2 KiB, starting at a line
  EXPECT_EQ(fileTail(dir + "/missing", 5), "");
  fs::remove_all(dir);
}

// Without a log driver, rotateLogs copy-truncates the sidecars' logs
// (<pod dir>/containers/<name>/) as well as the serving container's.
TEST(ContainerdPodDriverPure, RotateLogsCoversSidecars) {
  char tmpl[] = "/tmp/knap-rotate-XXXXXX";
  const std::string data = ::mkdtemp(tmpl);
  containerd::ContainerdClient client(
      containerd::ContainerdClient::Options{.address = data + "/no-containerd.sock"},
      RealTimeSource::instance());
  runtime::CniNetwork net(runtime::CniOptions{}, RealTimeSource::instance());
  ContainerdPodDriverOptions opts;
  opts.data_dir = data;
  opts.log_rotate_bytes = 100;
  ContainerdPodDriver driver(client, net, RealTimeSource::instance(), opts);
  const std::string dir = driver.podDir("p1");
  fs::create_directories(dir + "/containers/side");
  fs::create_directories(dir + "/containers/small");
  auto write = [](const std::string& path, size_t n) { std::ofstream(path) << std::string(n, 'x'); };
  write(dir + "/stdout.log", 500);
  write(dir + "/containers/side/stdout.log", 500);
  write(dir + "/containers/side/stderr.log", 300);
  write(dir + "/containers/small/stdout.log", 50);
  driver.rotateLogs("p1");
  for (const std::string& rotated :
       {dir + "/stdout.log", dir + "/containers/side/stdout.log", dir + "/containers/side/stderr.log"}) {
    EXPECT_EQ(fs::file_size(rotated), 0u) << rotated;
    ASSERT_TRUE(fs::exists(rotated + ".1")) << rotated;
    EXPECT_GE(fs::file_size(rotated + ".1"), 300u) << rotated;
  }
  EXPECT_EQ(fs::file_size(dir + "/containers/small/stdout.log"), 50u);
  EXPECT_FALSE(fs::exists(dir + "/containers/small/stdout.log.1"));
  fs::remove_all(data);
}

// H1: an image's /etc/passwd is read without trusting its layers: no symlink
// is followed (to a host file, /dev/zero, or within the layer), a FIFO does
// not hang, and a huge (sparse) file is refused with the limit named.
TEST(ContainerdPodDriverPure, ReadLayerFileDoesNotTrustTheLayer) {
  char tmpl[] = "/tmp/knap-layer-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);
  auto layer = [&](const std::string& name) {
    std::string d = root + "/" + name;
    fs::create_directories(d + "/etc");
    return d;
  };
  const std::string host_file = root + "/host-secret";
  { std::ofstream(host_file) << "root:x:0:0:HOST FILE:/root:/bin/sh\n"; }

  const std::string good = layer("good");
  { std::ofstream(good + "/etc/passwd") << "app:x:1000:1000::/home/app:/bin/sh\n"; }
  auto r = readLayerFile(good, "etc/passwd");
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ(**r, "app:x:1000:1000::/home/app:/bin/sh\n");

  const std::string empty = layer("empty");
  r = readLayerFile(empty, "etc/passwd");
  ASSERT_TRUE(r.isOk());
  EXPECT_FALSE(r->has_value());
  r = readLayerFile(root + "/no-such-layer", "etc/passwd");
  ASSERT_TRUE(r.isOk());
  EXPECT_FALSE(r->has_value());

  const std::string zero = layer("zero");  // would read forever through std::ifstream
  fs::create_symlink("/dev/zero", zero + "/etc/passwd");
  r = readLayerFile(zero, "etc/passwd");
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition) << r.status().toString();

  const std::string host = layer("host");  // a host file parsed as the image's passwd
  fs::create_symlink(host_file, host + "/etc/passwd");
  r = readLayerFile(host, "etc/passwd");
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition);

  const std::string etc_link = root + "/etclink";  // a symlinked directory on the way
  fs::create_directories(etc_link);
  fs::create_directory_symlink(root + "/good/etc", etc_link + "/etc");
  r = readLayerFile(etc_link, "etc/passwd");
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition);

  const std::string fifo = layer("fifo");  // opening it for reading would hang
  ASSERT_EQ(::mkfifo((fifo + "/etc/passwd").c_str(), 0644), 0);
  r = readLayerFile(fifo, "etc/passwd");
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition);

  const std::string huge = layer("huge");  // 8 GiB sparse: refused before reading
  {
    std::ofstream(huge + "/etc/passwd") << "x";
    fs::resize_file(huge + "/etc/passwd", uint64_t{8} << 30);
  }
  r = readLayerFile(huge, "etc/passwd");
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), Code::kResourceExhausted);
  EXPECT_NE(r.status().message().find("etc/passwd"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("1048576 bytes"), std::string::npos) << r.status().message();
  { std::ofstream(huge + "/etc/group") << std::string(kMaxImageUserFileBytes, 'g'); }
  r = readLayerFile(huge, "etc/group");  // exactly the limit: read
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ((*r)->size(), static_cast<size_t>(kMaxImageUserFileBytes));

  r = readLayerFile(good, "../good/etc/passwd");
  EXPECT_FALSE(r.isOk());

  // Across layers (topmost first): the first layer with the path decides; a
  // symlink shadows the lower layers' file, which is then not read either.
  auto l = readFromLayers({empty, good}, "etc/passwd");
  ASSERT_TRUE(l.isOk());
  ASSERT_TRUE(l->has_value());
  EXPECT_NE((*l)->find("app:x:1000"), std::string::npos);
  l = readFromLayers({zero, good}, "etc/passwd");
  ASSERT_TRUE(l.isOk()) << l.status().toString();
  EXPECT_FALSE(l->has_value());
  l = readFromLayers({fifo, host}, "etc/passwd");
  ASSERT_TRUE(l.isOk());
  EXPECT_FALSE(l->has_value());
  l = readFromLayers({empty, huge}, "etc/passwd");
  ASSERT_FALSE(l.isOk());
  EXPECT_EQ(l.status().code(), Code::kResourceExhausted);
  l = readFromLayers({empty}, "etc/passwd");
  ASSERT_TRUE(l.isOk());
  EXPECT_FALSE(l->has_value());
  fs::remove_all(root);
}

// Resources knap leaves in containerd and the kernel, for leak checks.
struct Census {
  size_t containers = 0, tasks = 0, snapshots = 0, netns = 0, leases = 0, veths = 0;
  bool operator==(const Census&) const = default;
};
std::ostream& operator<<(std::ostream& os, const Census& c) {
  return os << "{containers " << c.containers << ", tasks " << c.tasks << ", active snapshots " << c.snapshots
            << ", netns " << c.netns << ", IP leases " << c.leases << ", veths " << c.veths << "}";
}

Census census(const containerd::ContainerdClient& client, runtime::CniNetwork& net) {
  Census c;
  if (auto v = client.listContainers(); v.isOk()) c.containers = v->size();
  if (auto v = client.listTasks(); v.isOk()) c.tasks = v->size();
  if (auto v = client.listSnapshots(); v.isOk()) {
    for (const auto& s : *v) c.snapshots += s.kind == containerd::SnapshotKind::kActive;
  }
  c.netns = net.listPodNetworks().size();
  c.leases = net.listLeases().size();
  auto links = runtime::runProgram({"ip", "-o", "link", "show", "master", net.options().bridge}, {},
                                   RealTimeSource::instance());
  if (links.isOk()) {
    for (char ch : links->stdout_text) c.veths += ch == '\n';
  }
  return c;
}

TEST_F(RunnerE2eTest, FiftyCreateDeleteCyclesLeaveNothingBehind) {
  runner_->start();
  // Warm up: the bridge exists once a pod ran.
  runner_->ensure(makeRevision("warm-00001"));
  waitReady("warm-00001");
  runner_->remove("default", "warm-00001");
  ASSERT_TRUE(waitFor([&] { return runner_->pods("default/warm-00001").empty(); }));
  Census before = census(*env().client, *net_);
  for (int i = 0; i < 50; ++i) {
    std::string name = "cycle-" + std::to_string(i);
    runner_->ensure(makeRevision(name));
    Endpoint ep = waitReady(name);
    ASSERT_FALSE(ep.ip.empty()) << "cycle " << i;
    runner_->remove("default", name);
    ASSERT_TRUE(waitFor([&] { return runner_->pods("default/" + name).empty(); })) << "cycle " << i;
  }
  Census after = census(*env().client, *net_);
  EXPECT_EQ(after, before);
  EXPECT_EQ(after.containers, 0u);
  EXPECT_EQ(after.tasks, 0u);
  EXPECT_EQ(after.netns, 0u);
  EXPECT_EQ(after.leases, 0u);
}

// What the kernel says of the pod container's cgroup freezer ("" if no such
// file): v1 freezer.state, v2 cgroup.freeze.
std::string freezerState(const std::string& parent, const std::string& id) {
  for (const std::string& path : {"/sys/fs/cgroup/freezer/" + parent + "/" + id + "/freezer.state",
                                  "/sys/fs/cgroup/" + parent + "/" + id + "/cgroup.freeze"}) {
    std::ifstream f(path);
    std::string line;
    if (f && std::getline(f, line)) return line == "1" ? "FROZEN" : line == "0" ? "THAWED" : line;
  }
  return "";
}

// The driver's warm-pool primitives on real containerd: a created task has a
// cgroup with memory charged; a started pod frozen with pause() stops
// answering and answers again after resume(); memoryBytes() follows the pod.
TEST_F(RunnerE2eTest, PauseResumeAndMemoryBytes) {
  PodRequest req;
  req.revision = makeRevision("pause-00001");
  req.ns = "default";
  req.revision_name = "pause-00001";
  req.image = kImage;
  req.pod_id = "pause-00001-t1";
  auto h = driver_->create(req);
  ASSERT_TRUE(h.isOk()) << h.status().toString();
  auto created_mem = driver_->memoryBytes(*h);
  ASSERT_TRUE(created_mem.isOk()) << created_mem.status().toString();
  EXPECT_GT(*created_mem, 0);
  auto pid = driver_->start(*h);
  ASSERT_TRUE(pid.isOk()) << pid.status().toString();
  ASSERT_TRUE(waitFor([&] { return !httpGet(h->ip, h->port, "/info").empty(); }, seconds(10)));
  auto running_mem = driver_->memoryBytes(*h);
  ASSERT_TRUE(running_mem.isOk());
  EXPECT_GT(*running_mem, 100 * 1024) << "a started pod holds more than a few pages";
  EXPECT_LT(*running_mem, 512LL << 20);

  ASSERT_TRUE(driver_->pause(*h).isOk());
  // knapd freezes the cgroup itself; containerd is not told.
  EXPECT_EQ(freezerState(opts_.cgroup_parent, h->pod_id), "FROZEN");
  auto t = env().client->getTask(h->pod_id);
  ASSERT_TRUE(t.isOk());
  EXPECT_EQ(t->status, containerd::TaskStatus::kRunning);
  EXPECT_EQ(httpGetWithin(h->ip, h->port, "/info", 300), "") << "a frozen pod must not answer";
  auto frozen_mem = driver_->memoryBytes(*h);
  ASSERT_TRUE(frozen_mem.isOk());
  EXPECT_GT(*frozen_mem, 0);
  // listExisting sees it as a frozen pod (destroyed at a restart).
  auto existing = driver_->listExisting();
  ASSERT_TRUE(existing.isOk());
  bool seen = false;
  for (const auto& a : *existing) {
    if (a.handle.pod_id == h->pod_id) {
      seen = true;
      EXPECT_TRUE(a.paused);
    }
  }
  EXPECT_TRUE(seen);

  ASSERT_TRUE(driver_->resume(*h).isOk());
  EXPECT_EQ(freezerState(opts_.cgroup_parent, h->pod_id), "THAWED");
  t = env().client->getTask(h->pod_id);
  ASSERT_TRUE(t.isOk());
  EXPECT_EQ(t->status, containerd::TaskStatus::kRunning);
  EXPECT_NE(httpGetWithin(h->ip, h->port, "/info", 2000), "") << "thawed pod answers";

  // stop() of a frozen pod thaws it first, so SIGTERM lands (the test app
  // exits on it) well within the grace period.
  ASSERT_TRUE(driver_->pause(*h).isOk());
  ASSERT_EQ(freezerState(opts_.cgroup_parent, h->pod_id), "FROZEN");
  auto stop0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(driver_->stop(*h, seconds(20)).isOk());
  EXPECT_LT(std::chrono::steady_clock::now() - stop0, seconds(15))
      << "SIGTERM to a frozen pod waited for SIGKILL";

  ASSERT_TRUE(driver_->destroy(*h).isOk());
  auto gone = driver_->memoryBytes(*h);
  EXPECT_EQ(gone.status().code(), Code::kNotFound);
  EXPECT_EQ(driver_->pause(*h).code(), Code::kNotFound);
}

// The runner's warm pool on real containerd, both modes: the pool pod sits
// PAUSED (frozen) or CREATED (created), is no endpoint, and a scale from zero
// promotes it; the pool refills; removal leaves no container behind.
class WarmPoolE2eTest : public RunnerE2eTest, public ::testing::WithParamInterface<WarmPoolMode> {};

TEST_P(WarmPoolE2eTest, PoolPodIsPromotedOnWake) {
  runner_.reset();
  PodRunnerOptions o;
  o.backoff_initial = milliseconds(200);
  o.backoff_max = seconds(2);
  o.config.deployment.progress_deadline = seconds(60);
  o.max_stop_grace = seconds(5);
  o.warm_pool_size = 1;
  o.warm_pool_mode = GetParam();
  o.warm_memory_interval = seconds(1);
  runner_ = std::make_unique<PodRunner>(*driver_, RealTimeSource::instance(), o);
  runner_->start();
  const std::string name = std::string("warm-") + warmPoolModeName(GetParam());
  const std::string k = "default/" + name;
  runner_->setDesiredScale(k, 0);
  runner_->ensure(makeRevision(name));
  ASSERT_TRUE(waitFor([&] {
    return runner_->warmPool(k).pods == 1 && runner_->warmPool(k).memory_bytes > 0;
  })) << "pool never filled";
  std::string warm_id;
  for (auto& p : runner_->pods(k)) warm_id = p.pod_id;
  auto t = env().client->getTask(warm_id);
  ASSERT_TRUE(t.isOk());
  EXPECT_EQ(t->status, GetParam() == WarmPoolMode::kFrozen ? containerd::TaskStatus::kRunning
                                                           : containerd::TaskStatus::kCreated);
  EXPECT_EQ(freezerState(opts_.cgroup_parent, warm_id),
            GetParam() == WarmPoolMode::kFrozen ? "FROZEN" : "THAWED");
  EXPECT_TRUE(runner_->readyEndpoints(k).empty());
  EXPECT_EQ(runner_->readyPods(k), 0);
  std::cout << "[ figures  ] " << warmPoolModeName(GetParam()) << " warm pod holds "
            << runner_->warmPool(k).memory_bytes << " bytes\n";

  auto t0 = std::chrono::steady_clock::now();
  runner_->setDesiredScale(k, 1);
  ASSERT_TRUE(waitFor([&] { return !runner_->readyEndpoints(k).empty(); }, seconds(10)));
  WakeReport wake;
  Endpoint ep = runner_->readyEndpoints(k, &wake).at(0);
  EXPECT_EQ(ep.pod_id, warm_id);
  std::string body = httpGetWithin(ep.ip, ep.port, "/info", 2000);
  auto t1 = std::chrono::steady_clock::now();
  EXPECT_NE(body, "");
  EXPECT_EQ(wake.path, GetParam() == WarmPoolMode::kFrozen ? "frozen" : "warm");
  std::cout << "[ figures  ] " << warmPoolModeName(GetParam()) << " promote -> first response "
            << std::chrono::duration<double, std::milli>(t1 - t0).count() << " ms\n";
  // Refilled in the background with a new pod.
  ASSERT_TRUE(waitFor([&] { return runner_->warmPool(k).pods == 1; }));
  for (auto& p : runner_->pods(k)) {
    if (p.warm) {
      EXPECT_NE(p.pod_id, warm_id);
    }
  }
  // More wakes, each through the refilled pool pod.
  for (int cycle = 0; cycle < 5; ++cycle) {
    runner_->setDesiredScale(k, 0);
    ASSERT_TRUE(waitFor([&] {
      return runner_->readyPods(k) == 0 && runner_->warmPool(k).pods == 1 && runner_->pods(k).size() == 1;
    })) << "cycle "
        << cycle << ": not back at zero with a full pool";
    std::string next;
    for (auto& p : runner_->pods(k)) next = p.pod_id;
    auto c0 = std::chrono::steady_clock::now();
    runner_->setDesiredScale(k, 1);
    ASSERT_TRUE(waitFor([&] { return !runner_->readyEndpoints(k).empty(); }, seconds(10)))
        << "cycle " << cycle << ": promoted pod " << next << " never became ready";
    Endpoint e = runner_->readyEndpoints(k, &wake).at(0);
    EXPECT_EQ(e.pod_id, next);
    EXPECT_NE(httpGetWithin(e.ip, e.port, "/info", 2000), "");
    std::cout << "[ figures  ] " << warmPoolModeName(GetParam()) << " wake " << cycle + 2 << ": "
              << std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0).count()
              << " ms\n";
    ASSERT_TRUE(waitFor([&] { return runner_->warmPool(k).pods == 1; }));
  }
  runner_->remove("default", name);
  ASSERT_TRUE(waitFor([&] { return runner_->pods(k).empty(); }));
  auto containers = env().client->listContainers();
  ASSERT_TRUE(containers.isOk());
  for (const auto& c : *containers) {
    auto rev = c.labels.find(kRevisionLabel);
    EXPECT_FALSE(rev != c.labels.end() && rev->second == name) << "left behind: " << c.id;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, WarmPoolE2eTest,
                         ::testing::Values(WarmPoolMode::kCreated, WarmPoolMode::kFrozen),
                         [](const auto& info) { return std::string(warmPoolModeName(info.param)); });

}  // namespace
}  // namespace knap::runner
