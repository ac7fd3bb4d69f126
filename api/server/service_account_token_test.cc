#include "api/server/service_account_token.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <vector>

namespace knap::api {
namespace {

const ServiceAccountTokens kTokens = ServiceAccountTokens::withKey(std::string(32, 'k'));
constexpr int64_t kNow = 1800000000;

TEST(ServiceAccountTokenTest, IssuedTokenVerifiesForItsAudienceOnly) {
  auto token = kTokens.issue("team", "builder", "api", 3600, kNow);
  ASSERT_TRUE(token.isOk()) << token.status().toString();
  EXPECT_EQ(std::count(token->begin(), token->end(), '.'), 2);
  auto id = kTokens.verify(*token, "api", kNow);
  ASSERT_TRUE(id.isOk()) << id.status().toString();
  EXPECT_EQ(id->ns, "team");
  EXPECT_EQ(id->name, "builder");
  EXPECT_EQ(id->user(), "system:serviceaccount:team:builder");
  EXPECT_FALSE(kTokens.verify(*token, kApiAudience, kNow).isOk());
  // No audience: the API's.
  auto api = kTokens.issue("team", "default", "", 3600, kNow);
  ASSERT_TRUE(api.isOk());
  EXPECT_TRUE(kTokens.verify(*api, kApiAudience, kNow).isOk());
}

TEST(ServiceAccountTokenTest, LifetimeAndRotationWindow) {
  auto a = kTokens.issue("ns", "sa", "api", 1000, kNow);
  auto b = kTokens.issue("ns", "sa", "api", 1000, kNow + 1);
  ASSERT_TRUE(a.isOk() && b.isOk());
  EXPECT_EQ(*a, *b);  // same rotation window: the same token (no volume churn)
  // Always at least a fifth of the lifetime left, never valid past it.
  EXPECT_TRUE(kTokens.verify(*a, "api", kNow + 200 - 61).isOk());
  EXPECT_FALSE(kTokens.verify(*a, "api", kNow + 1000 + 60).isOk());
  EXPECT_FALSE(kTokens.issue("ns", "sa", "api", 599, kNow).isOk());
  EXPECT_FALSE(kTokens.issue("", "sa", "api", 600, kNow).isOk());
}

constexpr int64_t kMaxIssuedTokenSeconds = 48 * 3600;  // service_account_token.cc

TEST(ServiceAccountTokenTest, LongLifetimeIsClampedTo48Hours) {
  // expirationSeconds up to 2^32 is valid (Kubernetes), but no token lives
  // longer than kMaxIssuedTokenSeconds: clamped, as kube-apiserver does with
  // --service-account-max-token-expiration.
  for (int64_t asked : {kMaxIssuedTokenSeconds + 1, int64_t{1} << 32}) {
    auto t = kTokens.issue("ns", "sa", "api", asked, kNow);
    ASSERT_TRUE(t.isOk()) << asked << ": " << t.status().toString();
    EXPECT_EQ(*t, *kTokens.issue("ns", "sa", "api", kMaxIssuedTokenSeconds, kNow)) << asked;
    EXPECT_FALSE(kTokens.verify(*t, "api", kNow + kMaxIssuedTokenSeconds + 61).isOk()) << asked;
  }
  auto t = kTokens.issue("ns", "sa", "api", kMaxIssuedTokenSeconds, kNow);
  ASSERT_TRUE(t.isOk());
  EXPECT_TRUE(kTokens.verify(*t, "api", kNow).isOk());
}

TEST(ServiceAccountTokenTest, RejectsForgedAndMalformed) {
  auto token = kTokens.issue("ns", "sa", "api", 3600, kNow);
  ASSERT_TRUE(token.isOk());
  auto other = ServiceAccountTokens::withKey(std::string(32, 'x'));
  EXPECT_FALSE(other.verify(*token, "api", kNow).isOk());
  std::string tampered = *token;
  tampered[tampered.find('.') + 3] ^= 1;
  EXPECT_FALSE(kTokens.verify(tampered, "api", kNow).isOk());
  for (const std::string& bad :
       std::vector<std::string>{"", "a.b", "a.b.c.d", "...", std::string(20000, 'a'), "!!.??.**"}) {
    EXPECT_FALSE(kTokens.verify(bad, "api", kNow).isOk()) << bad.substr(0, 20);
  }
}

TEST(ServiceAccountTokenTest, KeyFileIsCreatedOnceWith0600) {
  std::string dir = ::testing::TempDir() + "/satoken-" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  std::string path = dir + "/service-account.key";
  auto first = ServiceAccountTokens::loadOrCreate(path);
  ASSERT_TRUE(first.isOk()) << first.status().toString();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 32);
  auto again = ServiceAccountTokens::loadOrCreate(path);
  ASSERT_TRUE(again.isOk());
  auto token = first->issue("ns", "sa", "api", 3600, kNow);
  ASSERT_TRUE(token.isOk());
  EXPECT_TRUE(again->verify(*token, "api", kNow).isOk());
  std::ofstream(path, std::ios::trunc) << "short";
  EXPECT_FALSE(ServiceAccountTokens::loadOrCreate(path).isOk());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace knap::api
