#include "api/server/request_guard.h"

#include <gtest/gtest.h>

namespace knap::api {
namespace {

TEST(RequestGuardTest, HostAllowList) {
  std::vector<std::string> names = {"knap.example"};
  for (const char* ok :
       {"", "localhost", "LOCALHOST:6443", "localhost.", "demo.default.localhost:8080", "127.0.0.1",
        "127.0.0.1:6443", "10.1.2.3:1", "[::1]:6443", "::1", "knap.example", "KNAP.example:443"}) {
    EXPECT_TRUE(hostAllowed(ok, names)) << ok;
  }
  for (const char* bad : {"evil.example", "evil.example:6443", "localhost.evil.example", "knap.example.evil",
                          "127.0.0.1.nip.io", "[::1", "[::1]x", "xlocalhost"}) {
    EXPECT_FALSE(hostAllowed(bad, names)) << bad;
  }
}

TEST(RequestGuardTest, BodiesMustBeJsonYamlOrPatches) {
  auto check = [](const char* method, const char* ctype, bool body) {
    return guardRequest({method, "127.0.0.1:6443", "", ctype, body}, {});
  };
  EXPECT_FALSE(check("POST", "application/json", true));
  EXPECT_FALSE(check("POST", "application/json; charset=utf-8", true));
  EXPECT_FALSE(check("PATCH", "application/merge-patch+json", true));
  EXPECT_FALSE(check("PATCH", "application/apply-patch+yaml", true));
  EXPECT_FALSE(check("POST", "text/plain", false));  // no body: nothing to refuse
  for (const char* bad : {"text/plain", "", "application/x-www-form-urlencoded",
                          "multipart/form-data; boundary=x", "text/yaml"}) {
    auto err = check("POST", bad, true);
    ASSERT_TRUE(err) << bad;
    EXPECT_EQ(err->code, 415) << bad;
  }
}

TEST(RequestGuardTest, CrossOriginWritesAreRefused) {
  auto check = [](const char* method, const char* origin) {
    return guardRequest({method, "127.0.0.1:6443", origin, "application/json", true}, {});
  };
  EXPECT_FALSE(check("POST", ""));
  EXPECT_FALSE(check("POST", "http://127.0.0.1:6443"));
  EXPECT_FALSE(check("GET", "http://evil.example"));
  for (const char* m : {"POST", "PUT", "PATCH", "DELETE"}) {
    auto err = check(m, "http://evil.example");
    ASSERT_TRUE(err) << m;
    EXPECT_EQ(err->code, 403);
  }
  EXPECT_TRUE(check("POST", "null"));
  EXPECT_TRUE(check("POST", "http://127.0.0.1:6444"));
  auto foreign = guardRequest({"GET", "evil.example", "", "", false}, {});
  ASSERT_TRUE(foreign);
  EXPECT_EQ(foreign->code, 403);
}

}  // namespace
}  // namespace knap::api
