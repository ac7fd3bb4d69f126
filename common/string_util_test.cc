#include "common/string_util.h"

#include <gtest/gtest.h>

namespace knap {
namespace {

TEST(Strings, AsciiLowerTouchesOnlyAToZ) {
  EXPECT_EQ(asciiLower("Content-Type"), "content-type");
  EXPECT_EQ(asciiLower("\xC3\x89T\xC3\x89"), "\xC3\x89t\xC3\x89");  // UTF-8 bytes kept
  EXPECT_EQ(asciiLower(""), "");
}

TEST(Strings, TrimOwsIsSpacesAndTabsOnly) {
  EXPECT_EQ(trimOws(" \t a b \t "), "a b");
  EXPECT_EQ(trimOws("\r\nx\r\n"), "\r\nx\r\n");
  EXPECT_EQ(trimOws(" \t "), "");
}

TEST(Strings, TrimSpaceIsAsciiWhitespace) {
  EXPECT_EQ(trimSpace("\r\n\t\v\f x y \n"), "x y");
  EXPECT_EQ(trimSpace("\n"), "");
  EXPECT_EQ(trimSpace("\xA0x\xA0"), "\xA0x\xA0");  // not ASCII whitespace
}

TEST(Strings, SplitHostPortAcceptsNamesAddressesAndBracketedV6) {
  auto a = splitHostPort("127.0.0.1:8080");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 8080);
  auto b = splitHostPort("[::1]:6443");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->port, 6443);
  auto c = splitHostPort("localhost:0");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->host, "localhost");
  EXPECT_EQ(c->port, 0);
  EXPECT_EQ(splitHostPort("h:65535")->port, 65535);
}

TEST(Strings, SplitHostPortRejectsWhatIsNotHostColonPort) {
  for (const char* bad : {"", "localhost", ":80", "::1:80", "[::1]", "[::1:80", "::1]:80", "[]:80", "h:",
                          "h:65536", "h:123456", "h:-1", "h:+1", "h: 80", "h:80 ", "h:0x50", "a[b]:80"}) {
    EXPECT_FALSE(splitHostPort(bad)) << bad;
  }
}

}  // namespace
}  // namespace knap
