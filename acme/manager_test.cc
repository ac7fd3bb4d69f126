// CertificateManager without a reachable CA: the account key is created
// 0600 and reused, a new host is reported pending then failed with the
// ACME error, and a corrupt account key is refused. (Issuance, renewal and
// certificates on disk are covered by client_test and tests/e2e/test_acme.py.)
#include "acme/manager.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

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
    CertificateManager m(o);
    ASSERT_TRUE(m.start().isOk());
    struct stat st{};
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
    CertificateManager m(o);
    ASSERT_TRUE(m.start().isOk());
    EXPECT_EQ(slurp(dir + "/acme/account.key"), first_key);  // reused
  }
  // A corrupt account key is refused with the path in the message.
  {
    std::ofstream(dir + "/acme/account.key") << "not a key";
    CertificateManager m(o);
    Status st = m.start();
    ASSERT_FALSE(st.isOk());
    EXPECT_NE(st.message().find("account.key"), std::string::npos) << st.message();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace knap::acme
