#include "images/registry_client.h"

#include <gtest/gtest.h>

#include <fstream>

#include "images/pull_credentials.h"
#include "images/test_registry.h"
#include "oci/digest.h"

namespace knap::images {
namespace {

using oci::IndexEntry;
using testing::TestImage;
using testing::TestRegistry;

TEST(WwwAuthenticateTest, ParsesBearerAndBasic) {
  auto cs = parseWwwAuthenticate(
      R"(Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/nginx:pull")");
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_EQ(cs[0].scheme, "bearer");
  EXPECT_EQ(cs[0].params["realm"], "https://auth.docker.io/token");
  EXPECT_EQ(cs[0].params["service"], "registry.docker.io");
  EXPECT_EQ(cs[0].params["scope"], "repository:library/nginx:pull");

  cs = parseWwwAuthenticate(R"(Basic realm="Registry Realm", Bearer realm="x,y", error="invalid_token")");
  ASSERT_EQ(cs.size(), 2u);
  EXPECT_EQ(cs[0].scheme, "basic");
  EXPECT_EQ(cs[0].params["realm"], "Registry Realm");
  EXPECT_EQ(cs[1].scheme, "bearer");
  EXPECT_EQ(cs[1].params["realm"], "x,y");
  EXPECT_EQ(cs[1].params["error"], "invalid_token");

  cs = parseWwwAuthenticate("Basic realm=plain");
  ASSERT_EQ(cs.size(), 1u);
  EXPECT_EQ(cs[0].params["realm"], "plain");
  EXPECT_TRUE(parseWwwAuthenticate("").empty());
}

TEST(AuthConfigTest, ParsesDockerConfig) {
  // "alice:s3cr:et" and "bob:pw"
  auto c = parseAuthConfig(R"({"auths":{
      "https://Registry.Example.com:5000/v2/":{"auth":"YWxpY2U6czNjcjpldA=="},
      "https://index.docker.io/v1/":{"auth":"Ym9iOnB3"},
      "127.0.0.1:5000":{"username":"carol","password":"pw2"},
      "empty.example":{}
    }, "credsStore":"desktop"})");
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  ASSERT_EQ(c->size(), 3u);
  EXPECT_EQ((*c)["registry.example.com:5000"].username, "alice");
  EXPECT_EQ((*c)["registry.example.com:5000"].password, "s3cr:et");
  EXPECT_EQ((*c)["docker.io"].username, "bob");
  EXPECT_EQ((*c)["docker.io"].password, "pw");
  EXPECT_EQ((*c)["127.0.0.1:5000"].username, "carol");
  EXPECT_TRUE(parseAuthConfig("{}")->empty());
  EXPECT_EQ(parseAuthConfig("{not json").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(parseAuthConfig(R"({"auths":{"x":{"auth":"bm9jb2xvbg=="}}})").status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(loadAuthConfig("/nonexistent/auth.json").status().code(), Code::kInvalidArgument);
  EXPECT_TRUE(loadAuthConfig("")->empty());
}

TEST(PlatformTest, HostAndConfig) {
  Platform p = hostPlatform();
  EXPECT_EQ(p.os, "linux");
#if defined(__x86_64__)
  EXPECT_EQ(p.architecture, "amd64");
#elif defined(__aarch64__)
  EXPECT_EQ(p.architecture, "arm64");
#endif
  EXPECT_EQ(platformFromConfig("linux/arm64/v8")->toString(), "linux/arm64/v8");
  EXPECT_EQ(platformFromConfig("")->architecture, p.architecture);
  EXPECT_FALSE(platformFromConfig("linux").isOk());
}

Platform plat(const std::string& s) {
  return *oci::parsePlatform(s);
}

TEST(ManifestTest, ChoosesPlatformFromIndexAndManifestList) {
  TestImage amd = testing::makeTestImage({"amd-layer"}, "amd64");
  TestImage arm = testing::makeTestImage({"arm-layer"}, "arm64", /*docker_media_types=*/true);
  for (bool docker : {false, true}) {
    std::string index =
        testing::makeTestIndex({{plat("linux/amd64"), &amd}, {plat("linux/arm64/v8"), &arm}}, docker);
    EXPECT_TRUE(isIndexMediaType(sniffManifestMediaType(index)));
    auto entries = oci::parseIndex(index);
    ASSERT_TRUE(entries.isOk()) << entries.status().toString();
    EXPECT_EQ(choosePlatform(*entries, plat("linux/amd64"), "img")->digest, amd.manifest.digest);
    EXPECT_EQ(choosePlatform(*entries, plat("linux/arm64"), "img")->digest, arm.manifest.digest);
    EXPECT_EQ(choosePlatform(*entries, plat("linux/arm64/v8"), "img")->digest, arm.manifest.digest);
    auto none = choosePlatform(*entries, plat("linux/s390x"), "img");
    ASSERT_FALSE(none.isOk());
    EXPECT_EQ(none.status().code(), Code::kNotFound);
    EXPECT_NE(none.status().message().find("linux/s390x"), std::string::npos) << none.status().message();
    EXPECT_NE(none.status().message().find("linux/amd64, linux/arm64/v8"), std::string::npos)
        << none.status().message();
  }
  EXPECT_EQ(sniffManifestMediaType(arm.manifest_json), oci::kMediaTypeDockerManifest);
  auto m = oci::parseManifest(arm.manifest_json);
  ASSERT_TRUE(m.isOk());
  EXPECT_EQ(m->layers.size(), 1u);
  EXPECT_EQ(m->config.digest, arm.config.digest);
}

// ---------------------------------------------------------- against a server

RegistryOptions insecure(const TestRegistry& reg) {
  RegistryOptions o;
  o.insecure_registries = {reg.host()};
  o.connect_timeout = std::chrono::seconds(2);
  return o;
}

std::string writeAuthFile(const std::string& host, const std::string& user, const std::string& pass) {
  std::string path = ::testing::TempDir() + "/auth-" + std::to_string(::getpid()) + "-" + user + ".json";
  std::ofstream(path) << R"({"auths":{"http://)" << host << R"(":{"username":")" << user
                      << R"(","password":")" << pass << R"("}}})";
  return path;
}

TEST(RegistryClientTest, ResolvesTagAndFetchesManifestAndBlob) {
  TestRegistry reg;
  TestImage img = testing::makeTestImage({"layer-one", "layer-two"});
  reg.push("team/app", "v1", img);
  RegistryClient client(insecure(reg), {}, RealTimeSource::instance());
  Reference ref = *parseReference(reg.host() + "/team/app:v1");
  auto d = client.resolve(ref);
  ASSERT_TRUE(d.isOk()) << d.status().toString();
  EXPECT_EQ(d->digest, img.manifest.digest);
  EXPECT_EQ(d->media_type, oci::kMediaTypeOciManifest);
  EXPECT_EQ(reg.count("HEAD", "/manifests/v1"), 1);
  EXPECT_EQ(reg.count("GET", "/manifests/"), 0);

  auto m = client.getManifest(ref, img.manifest.digest);
  ASSERT_TRUE(m.isOk()) << m.status().toString();
  EXPECT_EQ(m->body, img.manifest_json);
  auto blob = client.getBlob(ref, img.layers[1].digest);
  ASSERT_TRUE(blob.isOk()) << blob.status().toString();
  EXPECT_EQ(*blob, "layer-two");
  // The Accept header lists every manifest type.
  bool saw_accept = false;
  for (auto r : reg.requests()) {
    if (r.path.find("/manifests/") != std::string::npos) {
      saw_accept = r.headers["accept"].find("application/vnd.docker.distribution.manifest.list.v2+json") !=
                       std::string::npos &&
                   r.headers["accept"].find("application/vnd.oci.image.index.v1+json") != std::string::npos;
    }
  }
  EXPECT_TRUE(saw_accept);
}

TEST(RegistryClientTest, ResolveFallsBackToGetWithoutDigestHeader) {
  TestRegistry reg;
  TestImage img = testing::makeTestImage({"l"});
  reg.push("app", "v1", img);
  reg.setOmitDigestHeader(true);
  RegistryClient client(insecure(reg), {}, RealTimeSource::instance());
  auto d = client.resolve(*parseReference(reg.host() + "/app:v1"));
  ASSERT_TRUE(d.isOk()) << d.status().toString();
  EXPECT_EQ(d->digest, img.manifest.digest);
  EXPECT_EQ(reg.count("GET", "/manifests/v1"), 1);
}

TEST(RegistryClientTest, NotFoundAndDigestMismatch) {
  TestRegistry reg;
  TestImage img = testing::makeTestImage({"l"});
  reg.push("app", "v1", img);
  RegistryClient client(insecure(reg), {}, RealTimeSource::instance());
  Reference ref = *parseReference(reg.host() + "/app:v1");
  auto missing = client.resolve(*parseReference(reg.host() + "/app:nope"));
  EXPECT_EQ(missing.status().code(), Code::kNotFound) << missing.status().toString();
  auto m = client.getManifest(*parseReference(reg.host() + "/other:v1"), "v1");
  EXPECT_EQ(m.status().code(), Code::kNotFound);
  EXPECT_NE(m.status().message().find("MANIFEST_UNKNOWN"), std::string::npos) << m.status().message();
  reg.corruptBlob(img.layers[0].digest);
  auto blob = client.getBlob(ref, img.layers[0].digest);
  EXPECT_EQ(blob.status().code(), Code::kDataLoss);
  EXPECT_NE(blob.status().message().find(img.layers[0].digest), std::string::npos);
}

TEST(RegistryClientTest, BearerTokenFlow) {
  TestRegistry reg(TestRegistry::Auth::kBearer, "alice", "pw");
  TestImage img = testing::makeTestImage({"l"});
  reg.push("team/app", "v1", img);
  RegistryOptions o = insecure(reg);
  o.auth_file = writeAuthFile(reg.host(), "alice", "pw");
  auto client = RegistryClient::create(o, RealTimeSource::instance());
  ASSERT_TRUE(client.isOk()) << client.status().toString();
  Reference ref = *parseReference(reg.host() + "/team/app:v1");
  auto d = (*client)->resolve(ref);
  ASSERT_TRUE(d.isOk()) << d.status().toString();
  EXPECT_EQ(d->digest, img.manifest.digest);
  EXPECT_EQ(reg.tokenRequests(), 1);
  // The token request carried the service, the scope and the credentials.
  for (const auto& r : reg.requests()) {
    if (r.path == "/token") {
      EXPECT_NE(r.query.find("service=test-registry"), std::string::npos) << r.query;
      EXPECT_NE(r.query.find("scope=repository%3Ateam%2Fapp%3Apull"), std::string::npos) << r.query;
      EXPECT_EQ(r.headers.count("authorization"), 1u);
    }
  }
  // The cached token is reused: no new 401 round, no new token.
  ASSERT_TRUE((*client)->getBlob(ref, img.layers[0].digest).isOk());
  ASSERT_TRUE((*client)->getManifest(ref, "v1").isOk());
  EXPECT_EQ(reg.tokenRequests(), 1);
}

TEST(RegistryClientTest, AnonymousBearerWithoutCredentials) {
  TestRegistry reg(TestRegistry::Auth::kBearer);  // token service needs no credentials
  TestImage img = testing::makeTestImage({"l"});
  reg.push("app", "v1", img);
  RegistryClient client(insecure(reg), {}, RealTimeSource::instance());
  auto d = client.resolve(*parseReference(reg.host() + "/app:v1"));
  ASSERT_TRUE(d.isOk()) << d.status().toString();
  EXPECT_EQ(reg.tokenRequests(), 1);
}

TEST(RegistryClientTest, BasicAuth) {
  TestRegistry reg(TestRegistry::Auth::kBasic, "bob", "secret");
  TestImage img = testing::makeTestImage({"l"});
  reg.push("app", "v1", img);
  RegistryOptions o = insecure(reg);
  o.auth_file = writeAuthFile(reg.host(), "bob", "secret");
  auto client = RegistryClient::create(o, RealTimeSource::instance());
  ASSERT_TRUE(client.isOk());
  Reference ref = *parseReference(reg.host() + "/app:v1");
  ASSERT_TRUE((*client)->resolve(ref).isOk());
  const int before = static_cast<int>(reg.requests().size());
  ASSERT_TRUE((*client)->getBlob(ref, img.layers[0].digest).isOk());
  EXPECT_EQ(static_cast<int>(reg.requests().size()), before + 1) << "basic header should be sent up front";
}

TEST(RegistryClientTest, WrongOrMissingCredentialsAreUnauthenticated) {
  for (auto mode : {TestRegistry::Auth::kBasic, TestRegistry::Auth::kBearer}) {
    TestRegistry reg(mode, "bob", "secret");
    reg.push("app", "v1", testing::makeTestImage({"l"}));
    RegistryOptions o = insecure(reg);
    o.auth_file = writeAuthFile(reg.host(), "bob", "WRONG");
    auto client = RegistryClient::create(o, RealTimeSource::instance());
    ASSERT_TRUE(client.isOk());
    auto d = (*client)->resolve(*parseReference(reg.host() + "/app:v1"));
    ASSERT_FALSE(d.isOk());
    EXPECT_EQ(d.status().code(), Code::kUnauthenticated) << d.status().toString();
    EXPECT_NE(d.status().message().find("check the credentials for " + reg.host() + " in " + o.auth_file),
              std::string::npos)
        << d.status().message();
    // No auth file at all.
    RegistryClient anon(insecure(reg), {}, RealTimeSource::instance());
    auto a = anon.resolve(*parseReference(reg.host() + "/app:v1"));
    EXPECT_EQ(a.status().code(), Code::kUnauthenticated) << a.status().toString();
  }
}

TEST(RegistryClientTest, RevisionPullSecretsGiveCredentialsTheAuthFileLacks) {
  for (auto mode : {TestRegistry::Auth::kBasic, TestRegistry::Auth::kBearer}) {
    TestRegistry reg(mode, "carol", "pw");
    reg.push("app", "v1", testing::makeTestImage({"l"}));
    PullCredentials creds;
    RegistryOptions o = insecure(reg);
    o.extra_credentials = [&creds](const std::string& host) { return creds.lookup(host); };
    RegistryClient client(o, {}, RealTimeSource::instance());
    Reference ref = *parseReference(reg.host() + "/app:v1");
    // No requester has credentials yet: refused, and the hint names imagePullSecrets.
    auto refused = client.resolve(ref);
    ASSERT_EQ(refused.status().code(), Code::kUnauthenticated) << refused.status().toString();
    EXPECT_NE(refused.status().message().find("imagePullSecrets"), std::string::npos)
        << refused.status().message();
    // A Revision's Secret for another registry does not help; one for this one does.
    creds.set("default/other", {{"elsewhere.example.com", {"x", "y"}}});
    EXPECT_FALSE(client.resolve(ref).isOk());
    creds.set("default/app-00001", {{reg.host(), {"carol", "pw"}}});
    auto d = client.resolve(ref);
    EXPECT_TRUE(d.isOk()) << d.status().toString();
    creds.release("default/app-00001");
    EXPECT_FALSE(creds.lookup(reg.host()).has_value());
    EXPECT_TRUE(creds.lookup("elsewhere.example.com").has_value());
    creds.set("default/other", {});  // an empty set releases
    EXPECT_FALSE(creds.lookup("elsewhere.example.com").has_value());
  }
}

TEST(RegistryClientTest, UnreachableAndTlsAreUnavailable) {
  int port;
  {
    TestRegistry reg;
    port = std::stoi(reg.host().substr(reg.host().find(':') + 1));
  }  // stopped: nothing listens on the port any more
  RegistryOptions o;
  o.insecure_registries = {"127.0.0.1:" + std::to_string(port)};
  RegistryClient client(o, {}, RealTimeSource::instance());
  auto d = client.resolve(*parseReference("127.0.0.1:" + std::to_string(port) + "/app:v1"));
  EXPECT_EQ(d.status().code(), Code::kUnavailable) << d.status().toString();
  EXPECT_NE(d.status().message().find("onnect"), std::string::npos) << d.status().message();

  // A plain-HTTP server reached over https (not listed as insecure): TLS fails.
  TestRegistry plain;
  RegistryOptions tls_options;
  tls_options.connect_timeout = std::chrono::seconds(1);  // includes the handshake the server never answers
  RegistryClient tls(tls_options, {}, RealTimeSource::instance());
  EXPECT_EQ(tls.schemeFor(plain.host()), "https");
  auto t = tls.resolve(*parseReference(plain.host() + "/app:v1"));
  EXPECT_EQ(t.status().code(), Code::kUnavailable) << t.status().toString();
  EXPECT_NE(t.status().message().find("https://" + plain.host()), std::string::npos) << t.status().message();
}

TEST(RegistryClientTest, RangeRequestsResumeBlob) {
  TestRegistry reg;
  TestImage img = testing::makeTestImage({std::string(100000, 'x') + "end"});
  reg.push("app", "v1", img);
  RegistryClient client(insecure(reg), {}, RealTimeSource::instance());
  Reference ref = *parseReference(reg.host() + "/app:v1");
  std::string got;
  int64_t first_at = -1;
  ASSERT_TRUE(client
                  .fetchBlob(ref, img.layers[0].digest, 99990,
                             [&](std::string_view c, int64_t at) {
                               if (first_at < 0) first_at = at;
                               got.append(c);
                               return Status::ok();
                             })
                  .isOk());
  EXPECT_EQ(first_at, 99990);
  EXPECT_EQ(got, "xxxxxxxxxxend");
  EXPECT_EQ(reg.rangeGets(img.layers[0].digest), 1);
}

}  // namespace
}  // namespace knap::images
