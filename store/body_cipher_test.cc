// KeyringCipher: AES-256-GCM sealing with 0600 key files; tampering, a
// foreign object key and readable key files fail.
#include "store/body_cipher.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>


namespace knap::store {
namespace {

using nlohmann::json;

class CipherDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/knap-cipher-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string keys() const { return dir_ + "/secret-keys"; }
  std::string db() const { return dir_ + "/knap.db"; }
  // Every byte of the database file, WAL and shm included.
  std::string fileBytes() const {
    std::string all;
    for (const char* suffix : {"", "-wal", "-shm"}) {
      std::ifstream in(db() + suffix, std::ios::binary);
      all += std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    }
    return all;
  }
  std::string dir_;
};


TEST_F(CipherDir, CreatesA0600KeyAndRoundTrips) {
  auto c = KeyringCipher::openDir(keys());
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  struct stat st {};
  ASSERT_EQ(::stat((keys() + "/1.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 32);
  Key k{"Secret", "default", "db"};
  auto sealed = (*c)->seal(k, "hello world");
  ASSERT_TRUE(sealed.isOk());
  EXPECT_EQ(sealed->rfind("knap:enc:aes-256-gcm:1:", 0), 0u) << *sealed;
  EXPECT_EQ(sealed->find("hello"), std::string::npos);
  auto opened = (*c)->open(k, *sealed);
  ASSERT_TRUE(opened.isOk());
  EXPECT_EQ(*opened, "hello world");
  // Two seals of one text differ (fresh nonce).
  EXPECT_NE(*(*c)->seal(k, "hello world"), *sealed);
  // Bound to the object: another name does not open it.
  EXPECT_FALSE((*c)->open({"Secret", "default", "other"}, *sealed).isOk());
  // Tampering with any payload byte is detected.
  std::string bad = *sealed;
  bad[bad.size() - 3] = bad[bad.size() - 3] == 'A' ? 'B' : 'A';
  EXPECT_FALSE((*c)->open(k, bad).isOk());
}

TEST_F(CipherDir, RefusesAKeyOthersCanRead) {
  ASSERT_TRUE(KeyringCipher::openDir(keys()).isOk());
  ::chmod((keys() + "/1.key").c_str(), 0644);
  auto c = KeyringCipher::openDir(keys());
  ASSERT_FALSE(c.isOk());
  EXPECT_NE(c.status().message().find("chmod 0600"), std::string::npos) << c.status().message();
}

}  // namespace
}  // namespace knap::store
