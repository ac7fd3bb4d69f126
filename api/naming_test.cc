#include "api/naming.h"

#include <gtest/gtest.h>

namespace knap::api {
namespace {

TEST(NamingTest, RevisionNameIsZeroPaddedGeneration) {
  EXPECT_EQ(revisionName("hello", 1), "hello-00001");
  EXPECT_EQ(revisionName("hello", 42), "hello-00042");
  EXPECT_EQ(revisionName("hello", 123456), "hello-123456");
}

TEST(NamingTest, Md5Hex) {
  EXPECT_EQ(md5Hex(""), "d41d8cd98f00b204e9800998ecf8427e");
  EXPECT_EQ(md5Hex("hello"), "5d41402abc4b2a76b9719d911017c592");
}

TEST(NamingTest, LongConfigurationNameIsTruncatedWithHash) {
  std::string parent(60, 'a');
  std::string name = revisionName(parent, 1);
  EXPECT_EQ(name.size(), 63u);
  // kmeta.ChildName: parent[:31-len(suffix)] + md5(parent) + suffix.
  EXPECT_EQ(name, std::string(25, 'a') + md5Hex(parent) + "-00001");
  EXPECT_TRUE(isDns1035Label(name));
}

TEST(NamingTest, ChildNameExactlyAtLimitIsUnchanged) {
  std::string parent(57, 'b');
  EXPECT_EQ(revisionName(parent, 3), parent + "-00003");
  EXPECT_EQ(childName(std::string(58, 'b'), "-00003").size(), 63u);
  EXPECT_NE(childName(std::string(58, 'b'), "-00003"), std::string(58, 'b') + "-00003");
}

TEST(NamingTest, ChildNameVeryLongSuffixHashesEverything) {
  std::string suffix(40, 's');
  std::string name = childName("parent", suffix);
  EXPECT_LE(name.size(), 63u);
  EXPECT_EQ(name.substr(0, 6), "parent");
}

TEST(NamingTest, Dns1035Label) {
  EXPECT_TRUE(isDns1035Label("hello"));
  EXPECT_TRUE(isDns1035Label("a-1"));
  EXPECT_TRUE(isDns1035Label(std::string(63, 'a')));
  EXPECT_FALSE(isDns1035Label(std::string(64, 'a')));
  EXPECT_FALSE(isDns1035Label(""));
  EXPECT_FALSE(isDns1035Label("1abc"));    // must start with a letter
  EXPECT_FALSE(isDns1035Label("Hello"));   // lower case only
  EXPECT_FALSE(isDns1035Label("hello-"));  // must end alphanumeric
  EXPECT_FALSE(isDns1035Label("hel.lo"));
}

TEST(NamingTest, Dns1123) {
  EXPECT_TRUE(isDns1123Label("1abc"));
  EXPECT_FALSE(isDns1123Label("-abc"));
  EXPECT_TRUE(isDns1123Subdomain("my-sa"));
  EXPECT_TRUE(isDns1123Subdomain("a.b-c.d"));
  EXPECT_FALSE(isDns1123Subdomain("a..b"));
  EXPECT_FALSE(isDns1123Subdomain("A"));
  EXPECT_FALSE(isDns1123Subdomain(".a"));
  EXPECT_FALSE(isDns1123Subdomain(std::string(254, 'a')));
}

TEST(NamingTest, QualifiedName) {
  EXPECT_TRUE(isQualifiedName("hello-00001"));
  EXPECT_TRUE(isQualifiedName("Foo_bar.baz"));
  EXPECT_TRUE(isQualifiedName("example.com/name"));
  EXPECT_FALSE(isQualifiedName("_foo"));
  EXPECT_FALSE(isQualifiedName("a/b/c"));
  EXPECT_FALSE(isQualifiedName("Example.com/name"));
  EXPECT_FALSE(isQualifiedName(""));
  EXPECT_FALSE(isQualifiedName(std::string(64, 'a')));
}

TEST(NamingTest, GenerateNamePrefix) {
  EXPECT_TRUE(isDns1035Prefix("hello-"));
  EXPECT_TRUE(isDns1035Prefix("hello"));
  EXPECT_FALSE(isDns1035Prefix("-"));
  EXPECT_FALSE(isDns1035Prefix("1hello-"));
  EXPECT_FALSE(isDns1035Prefix("Hello-"));
}

TEST(NamingTest, GenerateNameSuffix) {
  std::mt19937 rng(7);
  std::string a = generateNameSuffix("hello-", rng);
  std::string b = generateNameSuffix("hello-", rng);
  EXPECT_EQ(a.size(), 11u);
  EXPECT_EQ(a.substr(0, 6), "hello-");
  EXPECT_NE(a, b);
  EXPECT_TRUE(isDns1035Label(a));
  for (char c : a.substr(6)) EXPECT_NE(std::string("bcdfghjklmnpqrstvwxz2456789").find(c), std::string::npos);
  std::string long_name = generateNameSuffix(std::string(70, 'x'), rng);
  EXPECT_EQ(long_name.size(), 63u);
}

}  // namespace
}  // namespace knap::api

namespace knap::api {
namespace {

TEST(ImageReferenceTest, AcceptsCommonReferences) {
  for (const char* ref : {"ghcr.io/knative/helloworld-go", "ghcr.io/knative/helloworld-go:latest", "busybox",
                          "nginx:1.25", "localhost:5000/app:v1",
                          "docker.io/library/nginx@sha256:"
                          "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                          "kind.local/app:dev_1.2", "registry.example.com:443/a/b/c:tag"}) {
    std::string why;
    EXPECT_TRUE(isValidImageReference(ref, &why)) << ref << ": " << why;
  }
}

TEST(ImageReferenceTest, RefusesBadReferences) {
  for (const char* ref :
       {"", "UPPER/case", "app:", "app@sha256:abc", "a//b", ":tag", "app:-bad", "app/", "a b"}) {
    std::string why;
    EXPECT_FALSE(isValidImageReference(ref, &why)) << ref;
    EXPECT_FALSE(why.empty()) << ref;
  }
}

}  // namespace
}  // namespace knap::api
