#include "oci/digest.h"

#include <gtest/gtest.h>

namespace knap::oci {
namespace {

TEST(DigestTest, KnownVectors) {
  EXPECT_EQ(sha256Digest(""), "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256Digest("abc"), "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(DigestTest, IncrementalMatchesOneShot) {
  Sha256 h;
  h.update("a");
  h.update("bc");
  EXPECT_EQ(h.finish(), sha256Digest("abc"));
}

TEST(DigestTest, Validation) {
  EXPECT_TRUE(isSha256Digest(sha256Digest("x")));
  EXPECT_FALSE(isSha256Digest("sha256:abc"));
  EXPECT_FALSE(isSha256Digest("sha512:" + std::string(64, 'a')));
  EXPECT_FALSE(isSha256Digest("sha256:" + std::string(64, 'A')));
}

TEST(ChainIdTest, FollowsTheOciDefinition) {
  const std::string a = sha256Digest("layer-a"), b = sha256Digest("layer-b"), c = sha256Digest("layer-c");
  std::vector<std::string> chain = chainIds({a, b, c});
  ASSERT_EQ(chain.size(), 3u);
  EXPECT_EQ(chain[0], a);  // the base layer's ChainID is its DiffID
  EXPECT_EQ(chain[1], sha256Digest(a + " " + b));
  EXPECT_EQ(chain[2], sha256Digest(chain[1] + " " + c));
  EXPECT_TRUE(chainIds({}).empty());
}

TEST(ChainIdTest, MatchesAHandComputedValue) {
  // printf '%s' "sha256:aaa…a sha256:bbb…b" | sha256sum
  const std::string a = "sha256:" + std::string(64, 'a'), b = "sha256:" + std::string(64, 'b');
  EXPECT_EQ(chainIds({a, b})[1], "sha256:ccd722928bd92476ba1745586fed6e45a102504185ad88cd89e01ff116fd146c");
}

}  // namespace
}  // namespace knap::oci
