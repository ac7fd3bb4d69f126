// End-to-end check of the pod building blocks without containerd: a spec from
// buildOciSpec, a network from CniNetwork, run by runc itself, made ready by
// Prober, then the Knative runtime contract inspected from inside through
// knap-testapp's /info and /env. Root only; skips loudly otherwise.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <thread>

#include "runtime/pod/cni.h"
#include "runtime/pod/oci_spec.h"
#include "runtime/pod/probe.h"
#include "runtime/pod/subprocess.h"

namespace knap::runtime {
namespace {

// The real clock for the subprocess calls of this test (only mains name it in knap code).
StatusOr<ProgramResult> runProgram(const std::vector<std::string>& argv, const ProgramOptions& o) {
  return runtime::runProgram(argv, o, RealTimeSource::instance());
}
StatusOr<std::string> runChecked(const std::vector<std::string>& argv, const ProgramOptions& o = {}) {
  return runtime::runChecked(argv, o, RealTimeSource::instance());
}

using nlohmann::json;

void writeFile(const std::string& path, const std::string& text, mode_t mode = 0644) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  ::chmod(path.c_str(), mode);
}

std::string readFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// GET http://ip:port/path with Connection: close; returns the body or "".
std::string httpGet(const std::string& ip, int port, const std::string& path) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{5, 0};
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

class PodRuncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "\n*** SKIPPED: needs root (runc, netns) ***";
    if (::access("/usr/sbin/runc", X_OK) != 0 && ::access("/usr/bin/runc", X_OK) != 0) {
      GTEST_SKIP() << "\n*** SKIPPED: runc missing (apt-get install runc) ***";
    }
    if (::access("/usr/lib/cni/bridge", X_OK) != 0) {
      GTEST_SKIP() << "\n*** SKIPPED: CNI plugins missing (apt-get install containernetworking-plugins) ***";
    }
    const char* app = std::getenv("KNAP_TESTAPP");
    testapp_ = app ? app : "";
    if (testapp_.empty() || ::access(testapp_.c_str(), X_OK) != 0) {
      GTEST_SKIP() << "\n*** SKIPPED: KNAP_TESTAPP (" << testapp_
                   << ") is not built: ninja -C <build> tests/apps/knap-testapp ***";
    }
    char tmpl[] = "/tmp/knap-pod-runc-XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    tag_ = static_cast<int>(::getpid() % 200) + 20;
    cni_.bridge = "knapr" + std::to_string(tag_);
    cni_.subnet = "10.214." + std::to_string(tag_) + ".0/24";
    cni_.network_name = "knapruncnet" + std::to_string(tag_);
    cni_.netns_prefix = "knapruncnet" + std::to_string(tag_) + "-";
    cni_.ipam_data_dir = dir_ + "/ipam";
    net_ = std::make_unique<CniNetwork>(cni_, RealTimeSource::instance());
    pod_id_ = "hello-00001-runc-" + std::to_string(::getpid());
  }

  void TearDown() override {
    if (!net_) return;
    (void)runProgram({"runc", "--root", dir_ + "/runc", "kill", pod_id_, "KILL"}, {});
    (void)runProgram({"runc", "--root", dir_ + "/runc", "delete", "-f", pod_id_}, {});
    Status s = net_->tearDown(pod_id_);
    EXPECT_TRUE(s.isOk()) << s.toString();
    (void)runProgram({"ip", "link", "del", cni_.bridge}, {});
    (void)runProgram({"rm", "-rf", dir_}, {});
    // runc removes the pod's cgroups; the empty parents are ours to remove.
    (void)runProgram({"sh", "-c", "rmdir /sys/fs/cgroup/*/knaptest 2>/dev/null; true"}, {});
  }

  std::string testapp_;
  std::string dir_;
  int tag_ = 0;
  CniOptions cni_;
  std::unique_ptr<CniNetwork> net_;
  std::string pod_id_;
};

TEST_F(PodRuncTest, RuntimeContractInsideARealContainer) {
  // Rootfs: the static test app plus passwd/group, like a distroless image.
  const std::string bundle = dir_ + "/bundle";
  const std::string rootfs = bundle + "/rootfs";
  ASSERT_TRUE(runChecked({"mkdir", "-p", rootfs + "/app", rootfs + "/etc", dir_ + "/pod"}).isOk());
  ASSERT_TRUE(runChecked({"cp", testapp_, rootfs + "/app/knap-testapp"}).isOk());
  const std::string passwd = "root:x:0:0:root:/root:/bin/sh\napp:x:1000:1001:app:/app:/bin/sh\n";
  const std::string group = "root:x:0:\napp:x:1001:\nextra:x:2002:app\n";
  writeFile(rootfs + "/etc/passwd", passwd);
  writeFile(rootfs + "/etc/group", group);

  auto network = net_->setUp(pod_id_);
  ASSERT_TRUE(network.isOk()) << network.status().toString();
  const std::string resolv = "nameserver " + network->gateway + "\nsearch default.svc.cluster.local\n";
  PodHostFiles files = makePodHostFiles(pod_id_, network->ip, "nameserver 127.0.0.53\n" + resolv);
  writeFile(dir_ + "/pod/resolv.conf", files.resolv_conf);
  writeFile(dir_ + "/pod/hosts", files.hosts);
  writeFile(dir_ + "/pod/hostname", files.hostname);

  PodSpecInput in;
  in.revision = json::parse(R"JSON({
    "metadata": {"name": "hello-00001", "namespace": "default"},
    "spec": {"containerConcurrency": 0, "timeoutSeconds": 300, "containers": [{
      "image": "example.com/testapp",
      "ports": [{"containerPort": 8801}],
      "env": [{"name": "GREETING", "value": "hi $(NAME)"}, {"name": "NAME", "value": "knap"}],
      "resources": {"limits": {"cpu": "1", "memory": "128Mi"}},
      "securityContext": {"readOnlyRootFilesystem": true},
      "readinessProbe": {"httpGet": {"path": "/healthz"}}
    }]}})JSON");
  in.image_config = {{"config",
                      {{"Entrypoint", {"/app/knap-testapp"}},
                       {"Env", {"PATH=/app"}},
                       {"User", "app"},
                       {"WorkingDir", "/app"}}}};
  in.service_name = "hello";
  in.configuration_name = "hello";
  in.revision_name = "hello-00001";
  in.pod_id = pod_id_;
  in.netns_path = network->netns_path;
  in.etc_passwd = passwd;
  in.etc_group = group;
  in.resolv_conf_path = dir_ + "/pod/resolv.conf";
  in.hosts_path = dir_ + "/pod/hosts";
  in.hostname_path = dir_ + "/pod/hostname";
  in.cgroups_path = "/knaptest/" + pod_id_;
  in.nofile_limit = maxNofileForPods();
  auto spec = buildOciSpec(in);
  ASSERT_TRUE(spec.isOk()) << spec.status().toString();
  writeFile(bundle + "/config.json", spec->dump(2));

  // Detached runc; its stdio goes to a file so no pipe of ours stays open.
  auto run = runProgram({"sh", "-c",
                         "exec runc --root '" + dir_ + "/runc' run -d --bundle '" + bundle + "' '" + pod_id_ +
                             "' >'" + dir_ + "/runc.log' 2>&1 </dev/null"},
                        {});
  ASSERT_TRUE(run.isOk()) << run.status().toString();
  ASSERT_EQ(run->exit_code, 0) << readFile(dir_ + "/runc.log");

  auto readiness =
      parseProbeSpec(in.revision["spec"]["containers"][0]["readinessProbe"], ProbeKind::kReadiness);
  ASSERT_TRUE(readiness.isOk()) << readiness.status().toString();
  Prober prober(RealTimeSource::instance(), network->ip, 8801, *readiness);
  Status ready = prober.waitUntilReady(RealTimeSource::instance().monotonic() + std::chrono::seconds(20),
                                       [](Duration d) { std::this_thread::sleep_for(d); });
  ASSERT_TRUE(ready.isOk()) << ready.toString() << "\nrunc log: " << readFile(dir_ + "/runc.log");

  json info, env;
  try {
    info = json::parse(httpGet(network->ip, 8801, "/info"));
    env = json::parse(httpGet(network->ip, 8801, "/env"));
  } catch (const json::exception& e) {
    FAIL() << "bad /info or /env: " << e.what();
  }
  // §1.7 identity, cwd, env.
  EXPECT_EQ(info["uid"], 1000);
  EXPECT_EQ(info["euid"], 1000);
  EXPECT_EQ(info["gid"], 1001);
  EXPECT_EQ(info["groups"], json({"1001", "2002"}));
  EXPECT_EQ(info["cwd"], "/app");
  EXPECT_EQ(info["hostname"], pod_id_);
  EXPECT_EQ(info["stdin"], "eof");
  EXPECT_EQ(env["PORT"], "8801");
  EXPECT_EQ(env["K_SERVICE"], "hello");
  EXPECT_EQ(env["K_CONFIGURATION"], "hello");
  EXPECT_EQ(env["K_REVISION"], "hello-00001");
  EXPECT_EQ(env["GREETING"], "hi $(NAME)");  // NAME is defined later: not expanded
  EXPECT_EQ(env["PATH"], "/app");
  // §1.8 filesystems.
  EXPECT_EQ(info["files"]["/tmp"]["perm"], "rwxrwxrwx");
  EXPECT_EQ(info["files"]["/tmp"]["mode"], "1777");
  EXPECT_EQ(info["files"]["/dev/console"]["exists"], false);
  for (const char* dev : {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}) {
    EXPECT_EQ(info["files"][dev]["type"], "char_device") << dev;
  }
  EXPECT_EQ(info["files"]["/dev/fd"]["type"], "symlink");
  EXPECT_EQ(info["files"]["/etc/resolv.conf"]["type"], "file");
  EXPECT_EQ(info["resolv_conf"], resolv.substr(0, resolv.size() - 1));
  EXPECT_EQ(info["etc_hostname"], pod_id_);
  EXPECT_NE(info["hosts"].get<std::string>().find(network->ip + "\t" + pod_id_), std::string::npos)
      << info["hosts"];
  EXPECT_EQ(info["files"]["/etc/resolv.conf"]["perm"], "rw-r--r--");
  // §1.9 kernel isolation.
  EXPECT_EQ(info["proc_sys"]["writable"], false) << info["proc_sys"].dump();
  EXPECT_EQ(info["cgroup_fs"]["writable"], false) << info["cgroup_fs"].dump();
  EXPECT_EQ(info["cgroup_v1"]["memory.limit_in_bytes"], "134217728");
  EXPECT_EQ(info["cgroup_v1"]["cpu.cfs_quota_us"], "100000");
  EXPECT_EQ(info["cgroup_v1"]["cpu.cfs_period_us"], "100000");
  EXPECT_EQ(info["cgroup_v1"]["cpu.shares"], "1024");

  // The liveness-style HTTP probe with the kube-probe agent reaches the app.
  ProbeSpec health = *readiness;
  health.period_seconds = 1;
  ProbeResult r = probeOnce(health, network->ip, 8801, attemptTimeout(health), RealTimeSource::instance());
  EXPECT_TRUE(r.success) << r.message;
}

}  // namespace
}  // namespace knap::runtime
