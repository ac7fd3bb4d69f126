// KeyringCipher: AES-256-GCM sealing with 0600 key files; tampering, a
// foreign object key and readable key files fail.
#include "store/body_cipher.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "common/clock.h"
#include "store/sqlite_store.h"

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

json secretBody(const std::string& value) {
  return {{"apiVersion", "v1"}, {"kind", "Secret"}, {"type", "Opaque"}, {"data", {{"password", value}}}};
}

// The SqliteStore integration: Secret bodies are sealed in the objects table
// and in the watch history; other kinds stay JSON; reads, lists and watch
// replays see plaintext.
TEST_F(CipherDir, StoreSealsSecretsInEveryTable) {
  SimulatedTimeSource clock;
  auto store = SqliteStore::open(db(), clock);
  ASSERT_TRUE(store.isOk());
  auto cipher = KeyringCipher::openDir(keys());
  ASSERT_TRUE(cipher.isOk());
  Status set = (*store)->setCipher(std::shared_ptr<BodyCipher>(std::move(*cipher)));
  ASSERT_TRUE(set.isOk()) << set.toString();
  Key k{"Secret", "default", "db"};
  ASSERT_TRUE((*store)->create(k, secretBody("plaintext-canary-1")).isOk());
  ASSERT_TRUE((*store)->update(k, secretBody("plaintext-canary-2"), 0).isOk());
  ASSERT_TRUE((*store)->create({"ConfigMap", "default", "cm"}, {{"data", {{"k", "visible-config"}}}}).isOk());
  auto got = (*store)->get(k);
  ASSERT_TRUE(got.isOk()) << got.status().toString();
  EXPECT_EQ(got->body["data"]["password"], "plaintext-canary-2");
  auto listed = (*store)->list("Secret", "");
  ASSERT_TRUE(listed.isOk());
  // The raw list (the API's list) opens sealed bodies too, labels included.
  auto raw = (*store)->listRaw("Secret", "");
  ASSERT_TRUE(raw.isOk()) << raw.status().toString();
  ASSERT_EQ(raw->size(), 1u);
  EXPECT_EQ(nlohmann::json::parse((*raw)[0].json), (*listed)[0].body);
  ASSERT_EQ(listed->size(), 1u);
  auto events = (*store)->eventsSince(0, "Secret");
  ASSERT_TRUE(events.isOk());
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[0].object.body["data"]["password"], "plaintext-canary-1");
  ASSERT_TRUE((*store)->remove(k).isOk());
  store->reset();
  std::string bytes = fileBytes();
  EXPECT_EQ(bytes.find("plaintext-canary"), std::string::npos);
  EXPECT_NE(bytes.find("visible-config"), std::string::npos) << "the test must read the real file";
  // Without the key the sealed rows do not read.
  auto again = SqliteStore::open(db(), clock);
  ASSERT_TRUE(again.isOk());
  auto history = (*again)->eventsSince(0, "Secret");
  ASSERT_FALSE(history.isOk());
  EXPECT_NE(history.status().message().find("encrypted"), std::string::npos) << history.status().message();
}

// Rotation: a new current key; setCipher reseals plaintext rows (written
// before encryption) and rows sealed with the old key.
TEST_F(CipherDir, SetCipherResealsOldRowsWithTheCurrentKey) {
  SimulatedTimeSource clock;
  Key plain{"Secret", "default", "old-plain"}, sealed_old{"Secret", "default", "old-key"};
  std::string key1(32, '\x01'), key2(32, '\x02');
  {
    auto store = SqliteStore::open(db(), clock);
    ASSERT_TRUE(store.isOk());
    ASSERT_TRUE((*store)->create(plain, secretBody("canary-before-encryption")).isOk());
    ASSERT_TRUE(
        (*store)
            ->setCipher(std::make_shared<KeyringCipher>(std::map<std::string, std::string>{{"1", key1}}, "1"))
            .isOk());
    ASSERT_TRUE((*store)->create(sealed_old, secretBody("canary-key-one")).isOk());
  }
  EXPECT_EQ(fileBytes().find("canary-before-encryption"), std::string::npos);
  auto store = SqliteStore::open(db(), clock);
  ASSERT_TRUE(store.isOk());
  auto rotated =
      std::make_shared<KeyringCipher>(std::map<std::string, std::string>{{"1", key1}, {"2", key2}}, "2");
  ASSERT_TRUE((*store)->setCipher(rotated).isOk());
  EXPECT_EQ((*store)->get(plain)->body["data"]["password"], "canary-before-encryption");
  EXPECT_EQ((*store)->get(sealed_old)->body["data"]["password"], "canary-key-one");
  store->reset();
  // Every row now opens with key 2 alone.
  auto only2 = SqliteStore::open(db(), clock);
  ASSERT_TRUE(only2.isOk());
  ASSERT_TRUE(
      (*only2)
          ->setCipher(std::make_shared<KeyringCipher>(std::map<std::string, std::string>{{"2", key2}}, "2"))
          .isOk());
  EXPECT_EQ((*only2)->get(sealed_old)->body["data"]["password"], "canary-key-one");
  auto history = (*only2)->eventsSince(0, "Secret");
  ASSERT_TRUE(history.isOk()) << history.status().toString();
  EXPECT_EQ(history->size(), 2u);
}

}  // namespace
}  // namespace knap::store
