#include "oci/reference.h"

#include <gtest/gtest.h>

namespace knap::oci {
namespace {

const std::string kDigest = "sha256:" + std::string(64, 'a');

struct Case {
  std::string in, registry, repository, tag, digest;
};

TEST(ReferenceTest, ParsesLikeDocker) {
  const std::vector<Case> cases = {
      {"nginx", "docker.io", "library/nginx", "latest", ""},
      {"nginx:1.25", "docker.io", "library/nginx", "1.25", ""},
      {"team/app", "docker.io", "team/app", "latest", ""},
      {"docker.io/nginx", "docker.io", "library/nginx", "latest", ""},
      {"index.docker.io/library/nginx:x", "docker.io", "library/nginx", "x", ""},
      {"localhost/app", "localhost", "app", "latest", ""},
      {"localhost:5000/app:v1", "localhost:5000", "app", "v1", ""},
      {"127.0.0.1:5000/app:v1", "127.0.0.1:5000", "app", "v1", ""},
      {"registry.example.com/team/app:v3", "registry.example.com", "team/app", "v3", ""},
      {"ghcr.io/a/b/c@" + kDigest, "ghcr.io", "a/b/c", "", kDigest},
      {"127.0.0.1:5000/app:v1@" + kDigest, "127.0.0.1:5000", "app", "v1", kDigest},
      {"my-registry:5000/a.b/c_d__e-f", "my-registry:5000", "a.b/c_d__e-f", "latest", ""},
      {"[::1]:5000/app", "[::1]:5000", "app", "latest", ""},
  };
  for (const Case& c : cases) {
    StatusOr<Reference> r = parseReference(c.in);
    ASSERT_TRUE(r.isOk()) << c.in << ": " << r.status().toString();
    EXPECT_EQ(r->registry, c.registry) << c.in;
    EXPECT_EQ(r->repository, c.repository) << c.in;
    EXPECT_EQ(r->tag, c.tag) << c.in;
    EXPECT_EQ(r->digest, c.digest) << c.in;
  }
}

TEST(ReferenceTest, RejectsWithReasons) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "empty"},
      {"Nginx", "lowercase"},
      {"app:", "invalid tag"},
      {"app:-x", "invalid tag"},
      {"app@sha256:abc", "64 lowercase hex"},
      {"app@md5:" + std::string(32, 'a'), "only sha256"},
      {"a b", "whitespace"},
      {"localhost:5000/", "no repository"},
      {"app//x", "invalid repository path component"},
      {"app/-x", "invalid repository path component"},
      {"foo.com:port/app", "invalid registry host"},
  };
  for (const auto& [in, why] : bad) {
    StatusOr<Reference> r = parseReference(in);
    ASSERT_FALSE(r.isOk()) << in;
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << in;
    EXPECT_NE(r.status().message().find(why), std::string::npos) << in << ": " << r.status().message();
  }
}

TEST(ReferenceTest, NamesAndHosts) {
  Reference r = *parseReference("nginx");
  EXPECT_EQ(r.apiHost(), "registry-1.docker.io");
  EXPECT_EQ(r.canonical(), "docker.io/library/nginx:latest");
  EXPECT_EQ(r.canonicalDigestRef(kDigest), "docker.io/library/nginx@" + kDigest);
  EXPECT_EQ(r.manifestReference(), "latest");
  Reference d = *parseReference("127.0.0.1:5000/app:v1@" + kDigest);
  EXPECT_EQ(d.apiHost(), "127.0.0.1:5000");
  EXPECT_EQ(d.manifestReference(), kDigest);
  EXPECT_EQ(d.canonical(), "127.0.0.1:5000/app@" + kDigest);
  EXPECT_EQ(writtenRepository("127.0.0.1:5000/app:v1"), "127.0.0.1:5000/app");
  EXPECT_EQ(writtenRepository("nginx"), "nginx");
  EXPECT_EQ(writtenRepository("dev.local/app:v1"), "dev.local/app");
  EXPECT_EQ(writtenRepository("host:5000/app"), "host:5000/app");
  EXPECT_EQ(writtenRepository("a/b@sha256:abc"), "a/b");
  EXPECT_EQ(writtenRepository("localhost:5000/app@" + kDigest), "localhost:5000/app");
}

}  // namespace
}  // namespace knap::oci
