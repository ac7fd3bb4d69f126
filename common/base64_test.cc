#include "common/base64.h"

#include <gtest/gtest.h>

namespace knap {
namespace {

TEST(Base64, RoundTripsEveryLength) {
  std::string bytes;
  for (int i = 0; i < 300; ++i) {
    bytes.push_back(static_cast<char>(i * 37));
    std::string decoded;
    ASSERT_TRUE(base64Decode(base64Encode(bytes), &decoded)) << i;
    EXPECT_EQ(decoded, bytes);
  }
}

TEST(Base64, KnownValues) {
  EXPECT_EQ(base64Encode("user:pass"), "dXNlcjpwYXNz");
  EXPECT_EQ(base64Encode("a"), "YQ==");
  EXPECT_EQ(base64Encode("ab"), "YWI=");
  std::string out;
  ASSERT_TRUE(base64Decode("", &out));
  EXPECT_EQ(out, "");
  ASSERT_TRUE(base64Decode("YWI=", &out));
  EXPECT_EQ(out, "ab");
}

TEST(Base64, RejectsWhatGoRejects) {
  std::string out;
  for (const char* bad : {"YQ", "YQ=", "Y===", "YQ==YQ==", "Y Q==", "YQ=a", "YR==", "YWJ=", "dXNlcjpwYXNz\n",
                          "-_-_", "####"}) {
    EXPECT_FALSE(base64Decode(bad, &out)) << bad;
  }
}

}  // namespace
}  // namespace knap
