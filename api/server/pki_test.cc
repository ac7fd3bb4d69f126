#include "api/server/pki.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace knap::api {
namespace {

class PkiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/knap-pki-test.XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
    dir_ = root_ + "/pki";
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  static mode_t modeOf(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return st.st_mode & 0777;
  }

  std::string root_, dir_;
};

TEST_F(PkiTest, CreatesCaServerAndAdminWithPrivateKeys) {
  auto pki = ensurePki(dir_, {"knap.example", "192.0.2.7"});
  ASSERT_TRUE(pki.isOk()) << pki.status().message();
  EXPECT_EQ(modeOf(dir_), 0700u);
  for (const auto& key : {pki->ca_key, pki->server_key, pki->admin_key}) EXPECT_EQ(modeOf(key), 0600u) << key;
  std::string cn;
  std::vector<std::string> orgs;
  ASSERT_TRUE(certificateNames(pki->admin_cert_pem, &cn, &orgs).isOk());
  EXPECT_EQ(cn, "knap-admin");
  EXPECT_EQ(orgs, std::vector<std::string>{"system:masters"});
  ASSERT_TRUE(certificateNames(pki->server_cert_pem, &cn, &orgs).isOk());
  EXPECT_EQ(cn, "knapd");
  // openssl itself agrees the chain and the SANs are right.
  std::string cmd = "openssl verify -CAfile " + pki->ca_cert + " " + pki->server_cert + " " +
                    pki->admin_cert + " >/dev/null 2>&1";
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  std::string sans = root_ + "/sans.txt";
  std::system(("openssl x509 -noout -ext subjectAltName -in " + pki->server_cert + " > " + sans).c_str());
  std::ifstream in(sans);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  for (const char* want : {"DNS:localhost", "IP Address:127.0.0.1", "IP Address:0:0:0:0:0:0:0:1",
                           "DNS:knap.example", "IP Address:192.0.2.7"})
    EXPECT_NE(text.find(want), std::string::npos) << want << " in " << text;
}

TEST_F(PkiTest, ReusesOnRestartAndReissuesTheServerCertWhenHostsChange) {
  auto first = ensurePki(dir_, {"a.example"});
  ASSERT_TRUE(first.isOk()) << first.status().message();
  auto second = ensurePki(dir_, {"a.example"});
  ASSERT_TRUE(second.isOk());
  EXPECT_EQ(first->ca_cert_pem, second->ca_cert_pem);
  EXPECT_EQ(first->server_cert_pem, second->server_cert_pem);
  EXPECT_EQ(first->admin_cert_pem, second->admin_cert_pem);
  auto third = ensurePki(dir_, {"b.example"});
  ASSERT_TRUE(third.isOk());
  EXPECT_EQ(first->ca_cert_pem, third->ca_cert_pem);
  EXPECT_NE(first->server_cert_pem, third->server_cert_pem);
  EXPECT_EQ(first->admin_cert_pem, third->admin_cert_pem);
}

TEST_F(PkiTest, ABrokenLeafIsReissuedButABrokenCaIsAnError) {
  ASSERT_TRUE(ensurePki(dir_, {}).isOk());
  { std::ofstream(dir_ + "/admin.crt") << "garbage"; }
  auto again = ensurePki(dir_, {});
  ASSERT_TRUE(again.isOk()) << again.status().message();
  EXPECT_NE(again->admin_cert_pem.find("BEGIN CERTIFICATE"), std::string::npos);
  { std::ofstream(dir_ + "/ca.key") << "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"; }
  auto broken = ensurePki(dir_, {});
  ASSERT_FALSE(broken.isOk());
  EXPECT_NE(broken.status().message().find("ca.key"), std::string::npos) << broken.status().message();
  std::filesystem::remove(dir_ + "/ca.key");
  auto half = ensurePki(dir_, {});
  ASSERT_FALSE(half.isOk());
  EXPECT_NE(half.status().message().find("without"), std::string::npos) << half.status().message();
}

TEST_F(PkiTest, ANewCaReissuesTheLeaves) {
  auto first = ensurePki(dir_, {});
  ASSERT_TRUE(first.isOk());
  std::filesystem::remove(dir_ + "/ca.crt");
  std::filesystem::remove(dir_ + "/ca.key");
  auto second = ensurePki(dir_, {});
  ASSERT_TRUE(second.isOk());
  EXPECT_NE(first->ca_cert_pem, second->ca_cert_pem);
  EXPECT_NE(first->server_cert_pem, second->server_cert_pem);
  EXPECT_NE(first->admin_cert_pem, second->admin_cert_pem);
}

}  // namespace
}  // namespace knap::api
