// CertificateManager without a reachable CA: the account key is created
// 0600 and reused, a new host is reported pending then failed with the
// ACME error, failures are retried with doubling back-off (on a simulated
// clock), and a corrupt account key is refused. (Issuance, renewal and
// certificates on disk are covered by client_test and tests/e2e/test_acme.py.)
#include "acme/manager.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace knap::acme {
namespace {

std::string tempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "knap-acme-XXXXXX").string();
  char* d = mkdtemp(tmpl.data());
  EXPECT_NE(d, nullptr);
  return tmpl;
}

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

template <typename F>
bool waitFor(F pred) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

TEST(CertificateManagerTest, KeyKeptAndFailureReported) {
  const std::string dir = tempDir();
  std::atomic<int> changes{0};
  ManagerOptions o;
  o.directory_url = "http://127.0.0.1:1/dir";  // nothing listens on port 1
  o.data_dir = dir;
  o.on_change = [&](const std::string& host) {
    EXPECT_EQ(host, "a.example.com");
    ++changes;
  };
  std::string first_key;
  {
    CertificateManager m(o, RealTimeSource::instance());
    ASSERT_TRUE(m.start().isOk());
    struct stat st {};
    ASSERT_EQ(::stat((dir + "/acme/account.key").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    first_key = slurp(dir + "/acme/account.key");
    EXPECT_FALSE(m.state("a.example.com").has_value());
    m.setHosts({"a.example.com"});
    ASSERT_TRUE(waitFor([&] {
      auto s = m.state("a.example.com");
      return s && s->kind == HostState::Kind::kFailed;
    }));
    auto s = m.state("a.example.com");
    EXPECT_NE(s->message.find("ACME directory"), std::string::npos) << s->message;
    EXPECT_GE(changes.load(), 2);  // added (pending), then failed
    m.setHosts({});
    EXPECT_FALSE(m.state("a.example.com").has_value());
    // Names that are not DNS host names (they would name files) are refused.
    m.setHosts({"../../etc/x", "*.example.com", "A.example.com", ""});
    EXPECT_FALSE(m.state("../../etc/x").has_value());
    EXPECT_FALSE(m.state("*.example.com").has_value());
    m.stop();
  }
  {
    CertificateManager m(o, RealTimeSource::instance());
    ASSERT_TRUE(m.start().isOk());
    EXPECT_EQ(slurp(dir + "/acme/account.key"), first_key);  // reused
  }
  // A corrupt account key is refused with the path in the message.
  {
    std::ofstream(dir + "/acme/account.key") << "not a key";
    CertificateManager m(o, RealTimeSource::instance());
    Status st = m.start();
    ASSERT_FALSE(st.isOk());
    EXPECT_NE(st.message().find("account.key"), std::string::npos) << st.message();
  }
  std::filesystem::remove_all(dir);
}

// A "CA" on 127.0.0.1 that accepts each connection and closes it at once:
// every issuance attempt fails at the directory, and attempts() counts them.
class ClosingServer {
 public:
  ClosingServer() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 16), 0);
    socklen_t len = sizeof a;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;  // shut down
        ++attempts_;
        ::close(c);
      }
    });
  }
  ~ClosingServer() {
    ::shutdown(fd_, SHUT_RDWR);
    thread_.join();
    ::close(fd_);
  }
  int port() const { return port_; }
  int attempts() const { return attempts_.load(); }

 private:
  int fd_ = -1;
  int port_ = 0;
  std::atomic<int> attempts_{0};
  std::thread thread_;
};

TEST(CertificateManagerTest, FailuresAreRetriedWithDoublingBackOffOnTheClock) {
  const std::string dir = tempDir();
  ClosingServer ca;
  SimulatedTimeSource clock;
  ManagerOptions o;
  o.directory_url = "http://127.0.0.1:" + std::to_string(ca.port()) + "/dir";
  o.data_dir = dir;
  CertificateManager m(o, clock);
  ASSERT_TRUE(m.start().isOk());
  auto failed = [&] {
    auto s = m.state("a.example.com");
    return s && s->kind == HostState::Kind::kFailed;
  };
  // The loop is idle when it waits on the simulated clock for the next due host.
  auto idle = [&] { return clock.waiters() >= 1; };
  m.setHosts({"a.example.com"});
  ASSERT_TRUE(waitFor(failed));
  ASSERT_TRUE(waitFor(idle));
  EXPECT_EQ(ca.attempts(), 1);
  // Not before the first retry is due...
  clock.advance(CertificateManager::kFirstRetry - std::chrono::seconds(1));
  ASSERT_TRUE(waitFor(idle));
  EXPECT_EQ(ca.attempts(), 1);
  // ...then at kFirstRetry, and the next after twice that.
  clock.advance(std::chrono::seconds(1));
  ASSERT_TRUE(waitFor([&] { return ca.attempts() == 2; }));
  ASSERT_TRUE(waitFor(idle));
  clock.advance(2 * CertificateManager::kFirstRetry - std::chrono::seconds(1));
  ASSERT_TRUE(waitFor(idle));
  EXPECT_EQ(ca.attempts(), 2);
  clock.advance(std::chrono::seconds(1));
  ASSERT_TRUE(waitFor([&] { return ca.attempts() == 3; }));
  EXPECT_TRUE(failed());
  m.stop();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace knap::acme
