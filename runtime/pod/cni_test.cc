#include "runtime/pod/cni.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <thread>

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

// --- unit tests (no root needed) ---------------------------------------------

TEST(CniConfigTest, BridgeHostLocalConfig) {
  CniOptions o;
  o.ipam_data_dir = "/var/lib/knap/cni";
  json c = makeBridgeConfig(o);
  EXPECT_EQ(c["cniVersion"], "1.0.0");
  EXPECT_EQ(c["name"], "knap");
  EXPECT_EQ(c["type"], "bridge");
  EXPECT_EQ(c["bridge"], "knap0");
  EXPECT_EQ(c["isGateway"], true);
  EXPECT_EQ(c["ipMasq"], true);
  EXPECT_EQ(c["hairpinMode"], true);
  EXPECT_EQ(c["ipam"]["type"], "host-local");
  EXPECT_EQ(c["ipam"]["ranges"], json::parse(R"([[{"subnet":"10.88.0.0/16"}]])"));
  EXPECT_EQ(c["ipam"]["dataDir"], "/var/lib/knap/cni");
  EXPECT_EQ(c["ipam"]["routes"], json::parse(R"([{"dst":"0.0.0.0/0"}])"));

  o.bridge = "br7";
  o.subnet = "10.1.2.0/24";
  o.ip_masq = false;
  o.network_name = "other";
  c = CniNetwork(o, RealTimeSource::instance()).networkConfig();
  EXPECT_EQ(c["bridge"], "br7");
  EXPECT_EQ(c["name"], "other");
  EXPECT_EQ(c["ipMasq"], false);
  EXPECT_EQ(c["ipam"]["ranges"][0][0]["subnet"], "10.1.2.0/24");
}

// Captured from Debian's bridge plugin 1.1.1 on this machine.
const char* kResult100 = R"({
    "cniVersion": "1.0.0",
    "interfaces": [
        {"name": "knapx0", "mac": "ea:78:a0:d6:b9:ec"},
        {"name": "vethf7e353af", "mac": "1e:0b:6b:e9:1f:9a"},
        {"name": "eth0", "mac": "6e:39:84:aa:2b:63", "sandbox": "/var/run/netns/knapprobe-x"}
    ],
    "ips": [{"interface": 2, "address": "10.213.77.2/24", "gateway": "10.213.77.1"}],
    "routes": [{"dst": "0.0.0.0/0"}],
    "dns": {}
})";

TEST(CniResultTest, Parses100Result) {
  auto r = parseCniResult(kResult100, "eth0");
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->ip, "10.213.77.2");
  EXPECT_EQ(r->prefix_length, 24);
  EXPECT_EQ(r->gateway, "10.213.77.1");
}

TEST(CniResultTest, Parses040ResultAndPrefersSandboxInterface) {
  const char* r040 = R"({"cniVersion":"0.4.0",
    "interfaces":[{"name":"br0"},{"name":"eth0","sandbox":"/var/run/netns/x"}],
    "ips":[{"version":"6","interface":1,"address":"fd00::5/64"},
           {"version":"4","interface":0,"address":"10.9.9.1/16"},
           {"version":"4","interface":1,"address":"10.9.0.7/16","gateway":"10.9.0.1"}]})";
  auto r = parseCniResult(r040, "eth0");
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->ip, "10.9.0.7");
  EXPECT_EQ(r->prefix_length, 16);
}

TEST(CniResultTest, FallsBackToFirstIpv4) {
  auto r = parseCniResult(R"({"cniVersion":"0.3.1","ips":[{"version":"4","address":"10.0.0.9/8"}]})", "eth0");
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(r->ip, "10.0.0.9");
  EXPECT_EQ(r->gateway, "");
}

TEST(CniResultTest, RejectsGarbage) {
  for (const char* bad : {"", "not json", "[]", R"({"cniVersion":"1.0.0","ips":[]})",
                          R"({"ips":[{"address":"fd00::1/64"}]})", R"({"code":7,"msg":"boom"})"}) {
    auto r = parseCniResult(bad, "eth0");
    EXPECT_FALSE(r.isOk()) << bad;
    if (!r.isOk()) {
      EXPECT_EQ(r.status().code(), Code::kInternal) << bad;
    }
  }
}

TEST(CniErrorTest, UsesPluginErrorObject) {
  Status s = cniError("CNI bridge ADD for pod p1", 1,
                      R"({"code":999,"msg":"failed to open netns \"/x\"","details":"no such file"})", "");
  EXPECT_EQ(s.code(), Code::kInternal);
  EXPECT_EQ(s.message(), "CNI bridge ADD for pod p1: failed to open netns \"/x\": no such file");

  s = cniError(
      "ADD", 1,
      R"({"code":999,"msg":"failed to allocate for range 0: no IP addresses available in range set: 10.0.0.1-10.0.0.2"})",
      "");
  EXPECT_EQ(s.code(), Code::kResourceExhausted);
  s = cniError("ADD", 1, R"({"code":11,"msg":"busy"})", "");
  EXPECT_EQ(s.code(), Code::kUnavailable);
  s = cniError("DEL", 2, "", "panic: oops\n");
  EXPECT_EQ(s.message(), "DEL: panic: oops");
  s = cniError("DEL", 2, "", "");
  EXPECT_EQ(s.message(), "DEL: exit status 2");
}

TEST(CniPodIdTest, Validation) {
  for (const char* ok : {"p", "hello-00001-deployment-7f9c", "a.b_c-1", "0abc"}) {
    EXPECT_TRUE(validatePodId(ok).isOk()) << ok;
  }
  for (const char* bad : {"", "-x", ".x", "a/b", "a b", "a;rm", "ü"}) {
    Status s = validatePodId(bad);
    EXPECT_FALSE(s.isOk()) << bad;
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << bad;
  }
  EXPECT_FALSE(validatePodId(std::string(201, 'a')).isOk());
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/knap-cni-test-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() { (void)runProgram({"rm", "-rf", path_}, {}); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void writeFile(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

TEST(CniListTest, ListsNetnsAndLeasesOfThisNetworkOnly) {
  TempDir dir;
  CniOptions o;
  o.netns_dir = dir.path() + "/netns";
  o.ipam_data_dir = dir.path() + "/ipam";
  o.network_name = "knap";
  ::mkdir(o.netns_dir.c_str(), 0755);
  ::mkdir(o.ipam_data_dir.c_str(), 0755);
  ::mkdir((o.ipam_data_dir + "/knap").c_str(), 0755);
  ::mkdir((o.ipam_data_dir + "/other").c_str(), 0755);
  for (const char* f : {"knap-pod-b", "knap-pod-a", "cni-1234", "knap-"})
    writeFile(o.netns_dir + "/" + f, "");
  writeFile(o.ipam_data_dir + "/knap/10.88.0.2", "pod-a\r\neth0");
  writeFile(o.ipam_data_dir + "/knap/10.88.0.3", "pod-c\r\neth0");
  writeFile(o.ipam_data_dir + "/knap/last_reserved_ip.0", "10.88.0.3");
  writeFile(o.ipam_data_dir + "/knap/lock", "");
  writeFile(o.ipam_data_dir + "/other/10.88.0.4", "pod-d\r\neth0");
  CniNetwork net(o, RealTimeSource::instance());
  EXPECT_EQ(net.listPodNetworks(), (std::vector<std::string>{"pod-a", "pod-b"}));
  EXPECT_EQ(net.listLeases(),
            (std::map<std::string, std::string>{{"10.88.0.2", "pod-a"}, {"10.88.0.3", "pod-c"}}));
  EXPECT_EQ(net.netnsPath("pod-a"), o.netns_dir + "/knap-pod-a");
}

TEST(CniSetUpTest, RejectsBadPodIdAndMissingPlugins) {
  CniNetwork net(CniOptions{}, RealTimeSource::instance());
  auto r = net.setUp("../../etc");
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);

  CniOptions o;
  o.plugin_dir = "/nonexistent/cni";
  auto r2 = CniNetwork(o, RealTimeSource::instance()).setUp("pod-1");
  ASSERT_FALSE(r2.isOk());
  EXPECT_EQ(r2.status().code(), Code::kNotFound);
  EXPECT_NE(r2.status().message().find("containernetworking-plugins"), std::string::npos);
}

// --- integration: real netns, bridge and host-local (root only) ----------------

// Listening TCP socket created inside the network namespace at `netns_path`:
// a short-lived thread joins the namespace (setns is per thread for
// CLONE_NEWNET) and makes the socket; the socket stays in that namespace.
int listenInNetns(const std::string& netns_path, const std::string& ip, int port) {
  int result = -1;
  std::thread t([&] {
    int ns = ::open(netns_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0) return;
    if (::setns(ns, CLONE_NEWNET) != 0) {
      ::close(ns);
      return;
    }
    ::close(ns);
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 8) != 0) {
      ::close(fd);
      return;
    }
    result = fd;
  });
  t.join();
  return result;
}

// Connects from the host to ip:port, sends "ping", returns what the server answered.
std::string pingFromHost(const std::string& ip, int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{3, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      ::send(fd, "ping", 4, MSG_NOSIGNAL) == 4) {
    char buf[128];
    ssize_t n;
    while ((n = ::recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, static_cast<size_t>(n));
  } else {
    out = std::string("connect/send failed: ") + std::strerror(errno);
  }
  ::close(fd);
  return out;
}

// Accepts one connection on `listen_fd`, reads "ping" and answers "pong <tag>".
std::thread serveOnce(int listen_fd, std::string tag) {
  return std::thread([listen_fd, tag] {
    pollfd p{listen_fd, POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) return;
    int c = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) return;
    char buf[16];
    ssize_t n = ::recv(c, buf, sizeof buf, 0);
    if (n == 4 && std::string(buf, 4) == "ping") {
      std::string reply = "pong " + tag;
      (void)::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
    }
    ::close(c);
  });
}

bool isDir(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

size_t countEntries(const std::string& dir) {
  size_t n = 0;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d)) {
      if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") ++n;
    }
    ::closedir(d);
  }
  return n;
}

class CniIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) {
      GTEST_SKIP() << "\n*** SKIPPED: CNI integration tests need root (netns, veth, bridge) ***";
    }
    if (::access("/usr/lib/cni/bridge", X_OK) != 0 || ::access("/usr/lib/cni/host-local", X_OK) != 0) {
      GTEST_SKIP() << "\n*** SKIPPED: /usr/lib/cni/{bridge,host-local} missing "
                      "(apt-get install containernetworking-plugins) ***";
    }
    if (::access("/usr/sbin/ip", X_OK) != 0 && ::access("/sbin/ip", X_OK) != 0) {
      GTEST_SKIP() << "\n*** SKIPPED: iproute2 `ip` missing ***";
    }
    // A bridge, subnet, network name and netns prefix of this test run only,
    // so a knapd running on the same machine is never touched.
    tag_ = static_cast<int>(::getpid() % 200) + 20;
    const int tag = tag_;
    options_.bridge = "knapt" + std::to_string(tag);
    options_.subnet = "10.213." + std::to_string(tag) + ".0/24";
    options_.network_name = "knaptest" + std::to_string(tag);
    options_.netns_prefix = "knaptest" + std::to_string(tag) + "-";
    options_.ipam_data_dir = dir_.path() + "/ipam";
    if (isDir("/sys/class/net/" + options_.bridge)) {
      GTEST_SKIP() << "\n*** SKIPPED: bridge " << options_.bridge << " already exists ***";
    }
    net_ = std::make_unique<CniNetwork>(options_, RealTimeSource::instance());
  }
  void TearDown() override {
    if (!net_) return;
    for (const auto& id : net_->listPodNetworks()) (void)net_->tearDown(id);
    (void)runProgram({"ip", "link", "del", options_.bridge}, {});
  }

  std::string natRules() {
    auto r = runProgram({"iptables", "-t", "nat", "-S"}, {});
    return r.isOk() ? r->stdout_text : "";
  }

  int tag_ = 0;
  TempDir dir_;
  CniOptions options_;
  std::unique_ptr<CniNetwork> net_;
};

TEST_F(CniIntegrationTest, ThreePodsReachableThenFullyCleanedUp) {
  const std::vector<std::string> pods = {"pod-a", "pod-b", "pod-c"};
  std::vector<PodNetwork> nets;
  for (const auto& p : pods) {
    auto n = net_->setUp(p);
    ASSERT_TRUE(n.isOk()) << n.status().toString();
    EXPECT_EQ(n->netns_path, "/var/run/netns/" + options_.netns_prefix + p);
    EXPECT_EQ(n->prefix_length, 24);
    EXPECT_EQ(n->gateway, "10.213." + std::to_string(tag_) + ".1");
    EXPECT_EQ(n->ip.rfind("10.213." + std::to_string(tag_) + ".", 0), 0u) << n->ip;
    nets.push_back(*n);
  }
  std::set<std::string> ips;
  for (const auto& n : nets) ips.insert(n.ip);
  EXPECT_EQ(ips.size(), 3u) << "pods must get distinct addresses";
  EXPECT_EQ(net_->listPodNetworks(), pods);
  EXPECT_EQ(net_->listLeases().size(), 3u);
  EXPECT_EQ(countEntries("/sys/class/net/" + options_.bridge + "/brif"), 3u);

  for (size_t i = 0; i < pods.size(); ++i) {
    int lfd = listenInNetns(nets[i].netns_path, nets[i].ip, 8080);
    ASSERT_GE(lfd, 0) << "listen in " << nets[i].netns_path;
    std::thread server = serveOnce(lfd, pods[i]);
    EXPECT_EQ(pingFromHost(nets[i].ip, 8080), "pong " + pods[i]);
    server.join();
    ::close(lfd);
  }
  // lo is up inside the pod namespace.
  auto lo = runProgram({"ip", "-n", options_.netns_prefix + "pod-a", "-o", "link", "show", "lo"}, {});
  ASSERT_TRUE(lo.isOk());
  EXPECT_NE(lo->stdout_text.find("UP"), std::string::npos) << lo->stdout_text;
  EXPECT_NE(natRules().find(options_.network_name), std::string::npos);

  for (const auto& p : pods) {
    Status s = net_->tearDown(p);
    EXPECT_TRUE(s.isOk()) << s.toString();
  }
  EXPECT_TRUE(net_->listPodNetworks().empty());
  EXPECT_TRUE(net_->listLeases().empty());
  EXPECT_EQ(countEntries("/sys/class/net/" + options_.bridge + "/brif"), 0u) << "veths left on the bridge";
  for (const auto& p : pods) EXPECT_FALSE(isDir("/var/run/netns/" + options_.netns_prefix + p));
  EXPECT_EQ(natRules().find(options_.network_name), std::string::npos) << "masquerade rules left behind";

  // Idempotent: a second tearDown, and one for a pod that never existed.
  EXPECT_TRUE(net_->tearDown("pod-a").isOk());
  EXPECT_TRUE(net_->tearDown("never-there").isOk());
}

TEST_F(CniIntegrationTest, SetUpTwiceRecreatesAndCleanupOrphans) {
  auto a = net_->setUp("keep");
  ASSERT_TRUE(a.isOk()) << a.status().toString();
  auto b = net_->setUp("orphan");
  ASSERT_TRUE(b.isOk()) << b.status().toString();
  // A second setUp of the same pod replaces the first (no second lease).
  auto b2 = net_->setUp("orphan");
  ASSERT_TRUE(b2.isOk()) << b2.status().toString();
  EXPECT_EQ(net_->listLeases().size(), 2u);

  // A lease whose netns vanished (e.g. after a reboot) is an orphan too.
  auto c = net_->setUp("lost");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  ASSERT_TRUE(runChecked({"ip", "netns", "delete", options_.netns_prefix + "lost"}).isOk());
  EXPECT_EQ(net_->listLeases().size(), 3u);

  Status s = net_->cleanupOrphans({"keep"});
  EXPECT_TRUE(s.isOk()) << s.toString();
  EXPECT_EQ(net_->listPodNetworks(), std::vector<std::string>{"keep"});
  auto leases = net_->listLeases();
  ASSERT_EQ(leases.size(), 1u);
  EXPECT_EQ(leases.begin()->first, a->ip);
  EXPECT_EQ(leases.begin()->second, "keep");

  // The survivor still works.
  int lfd = listenInNetns(a->netns_path, a->ip, 9000);
  ASSERT_GE(lfd, 0);
  std::thread server = serveOnce(lfd, "keep");
  EXPECT_EQ(pingFromHost(a->ip, 9000), "pong keep");
  server.join();
  ::close(lfd);
  EXPECT_TRUE(net_->tearDown("keep").isOk());
  EXPECT_TRUE(net_->listLeases().empty());
  EXPECT_EQ(natRules().find(options_.network_name), std::string::npos) << "masquerade rules left behind";
}

TEST_F(CniIntegrationTest, ConcurrentSetUpOnAFreshBridge) {
  // The bridge does not exist yet: every ADD races to create it and its address.
  constexpr int kPods = 4;
  std::vector<std::thread> threads;
  std::vector<StatusOr<PodNetwork>> results(kPods, Status(Code::kInternal, "not run"));
  for (int i = 0; i < kPods; ++i) {
    threads.emplace_back([&, i] { results[i] = net_->setUp("par-" + std::to_string(i)); });
  }
  for (auto& t : threads) t.join();
  std::set<std::string> ips;
  for (int i = 0; i < kPods; ++i) {
    ASSERT_TRUE(results[i].isOk()) << "pod " << i << ": " << results[i].status().toString();
    ips.insert(results[i]->ip);
  }
  EXPECT_EQ(ips.size(), static_cast<size_t>(kPods));
  threads.clear();
  std::vector<Status> down(kPods);
  for (int i = 0; i < kPods; ++i) {
    threads.emplace_back([&, i] { down[i] = net_->tearDown("par-" + std::to_string(i)); });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kPods; ++i) EXPECT_TRUE(down[i].isOk()) << down[i].toString();
  EXPECT_TRUE(net_->listLeases().empty());
  EXPECT_TRUE(net_->listPodNetworks().empty());
}

}  // namespace
}  // namespace knap::runtime
