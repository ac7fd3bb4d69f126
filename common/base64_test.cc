#include "common/base64.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

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
  for (const char* bad :
       {"YQ", "YQ=", "Y===", "YQ==YQ==", "Y Q==", "YQ=a", "YR==", "YWJ=", "dXNlcjpwYXNz\n", "-_-_", "####"}) {
    EXPECT_FALSE(base64Decode(bad, &out)) << bad;
  }
}

TEST(Base64Url, RoundTripsWithoutPadding) {
  for (const std::string& s : std::vector<std::string>{"", "f", "fo", "foo", "foob", "fooba", "foobar",
                                                       std::string("\xff\xfe\x00\x01", 4)}) {
    std::string enc = base64UrlEncode(s), dec;
    EXPECT_EQ(enc.find_first_of("+/="), std::string::npos) << enc;
    ASSERT_TRUE(base64UrlDecode(enc, &dec)) << enc;
    EXPECT_EQ(dec, s);
  }
  std::string out;
  EXPECT_FALSE(base64UrlDecode("a", &out));
  EXPECT_FALSE(base64UrlDecode("ab+c", &out));
  EXPECT_FALSE(base64UrlDecode("Zh", &out));  // stray bits: not canonical
}

TEST(Base64Url, KnownValuesAndStrictness) {
  const std::string bytes("\xfb\xff\x00\x01", 4);
  EXPECT_EQ(base64UrlEncode(bytes), "-_8AAQ");
  std::string out;
  ASSERT_TRUE(base64UrlDecode("-_8AAQ", &out));
  EXPECT_EQ(out, bytes);
  EXPECT_FALSE(base64UrlDecode("+/8AAQ", &out));    // the standard alphabet is not base64url
  EXPECT_FALSE(base64UrlDecode("-_8AAQ==", &out));  // no padding
  EXPECT_FALSE(base64UrlDecode("A", &out));
  EXPECT_EQ(base64UrlEncode(""), "");
}

}  // namespace
}  // namespace knap
