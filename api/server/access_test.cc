#include "api/server/access.h"

#include <gtest/gtest.h>

namespace knap::api {
namespace {

ApiRoleBinding bind(const std::string& role, bool group, const std::string& subject,
                    const std::string& ns = "") {
  return {role, group, subject, ns};
}

RequestAttributes res(const std::string& verb, const std::string& ns,
                      const std::string& resource = "services",
                      const std::string& group = "serving.knative.dev", const std::string& sub = "") {
  RequestAttributes a;
  a.verb = verb;
  a.ns = ns;
  a.resource = resource;
  a.api_group = group;
  a.subresource = sub;
  return a;
}

TEST(TokenFile, ParsesKubernetesCsvWithQuotedGroups) {
  auto f = TokenFile::parse(
      "# comment\n"
      "\n"
      "s3cret,alice,1001,\"devs,ops\"\n"
      "t2, bob ,1002\r\n"
      "t3,carol,1003,viewers\n",
      "tokens.csv");
  ASSERT_TRUE(f.isOk()) << f.status().message();
  EXPECT_EQ(f->size(), 3u);
  auto alice = f->lookup("s3cret");
  ASSERT_TRUE(alice);
  EXPECT_EQ(alice->name, "alice");
  EXPECT_EQ(alice->uid, "1001");
  EXPECT_EQ(alice->groups, (std::vector<std::string>{"devs", "ops", "system:authenticated"}));
  auto bob = f->lookup("t2");
  ASSERT_TRUE(bob);
  EXPECT_EQ(bob->name, "bob");
  EXPECT_EQ(f->lookup("t3")->groups, (std::vector<std::string>{"viewers", "system:authenticated"}));
  EXPECT_FALSE(f->lookup("s3cre"));
  EXPECT_FALSE(f->lookup("s3cret "));
  EXPECT_FALSE(f->lookup(""));
}

TEST(TokenFile, HostileLinesAreReportedWithTheirLineNumbers) {
  std::string text = std::string(
                         "good,alice,1\n"                  // 1
                         "onlytwo,cols\n"                  // 2
                         ",nobody,3\n"                     // 3
                         "tok,\"unterminated,4\n") +       // 4
                     std::string("nul\0byte,x,5\n", 13) +  // 5
                     "a,b,c,d,e\n"                         // 6
                     "good,dup,7\n"                        // 7
                     "to ken,x,8\n"                        // 8
                     "t9,  ,9\n"                           // 9
                     "t10,x\"y,10\n";                      // 10
  auto f = TokenFile::parse(text, "/etc/knap/tokens.csv");
  ASSERT_FALSE(f.isOk());
  const std::string& m = f.status().message();
  for (int line : {2, 3, 4, 5, 6, 7, 8, 9, 10}) {
    EXPECT_NE(m.find("/etc/knap/tokens.csv line " + std::to_string(line) + ":"), std::string::npos)
        << line << ": " << m;
  }
  EXPECT_EQ(m.find("line 1:"), std::string::npos) << m;
  EXPECT_NE(m.find("at least 3 columns"), std::string::npos) << m;
  EXPECT_NE(m.find("earlier line"), std::string::npos) << m;
}

TEST(TokenFile, BinaryGarbageAndHugeInputAreRefusedNotCrashed) {
  std::string garbage;
  for (int i = 0; i < 5000; ++i) garbage += static_cast<char>((i * 131) % 256);
  EXPECT_FALSE(TokenFile::parse(garbage, "g").isOk());
  std::string long_line(100 * 1024, 'a');
  auto f = TokenFile::parse(long_line + ",u,1\n", "l");
  ASSERT_FALSE(f.isOk());
  EXPECT_NE(f.status().message().find("longer than"), std::string::npos);
  std::string many;
  for (int i = 0; i < 1000; ++i) many += "x\n";
  auto g = TokenFile::parse(many, "m");
  ASSERT_FALSE(g.isOk());
  EXPECT_NE(g.status().message().find("more bad lines"), std::string::npos);  // bounded message
  EXPECT_LT(g.status().message().size(), 4000u);
  EXPECT_FALSE(TokenFile::parse(std::string(17 * 1024 * 1024, '#'), "big").isOk());
  EXPECT_FALSE(TokenFile::load("/nonexistent/tokens.csv").isOk());
}

TEST(Authorize, MastersAreAdminEverywhere) {
  UserInfo admin{"root", "", {kMastersGroup}};
  EXPECT_TRUE(authorize(admin, res("create", "default"), {}));
  EXPECT_TRUE(authorize(admin, res("update", "x", "services", "serving.knative.dev", "status"), {}));
  EXPECT_TRUE(authorize(admin, res("list", ""), {}));
}

TEST(Authorize, ViewReadsOnlyInItsNamespace) {
  UserInfo bob{"bob", "", {"system:authenticated"}};
  std::vector<ApiRoleBinding> b = {bind("view", false, "bob", "team-a")};
  for (const char* verb : {"get", "list", "watch"})
    EXPECT_TRUE(authorize(bob, res(verb, "team-a"), b)) << verb;
  for (const char* verb : {"create", "update", "patch", "delete", "deletecollection"})
    EXPECT_FALSE(authorize(bob, res(verb, "team-a"), b)) << verb;
  EXPECT_FALSE(authorize(bob, res("get", "team-b"), b));
  EXPECT_FALSE(authorize(bob, res("list", ""), b));  // all namespaces needs a cluster-wide binding
  EXPECT_TRUE(authorize(bob, res("list", "team-a", "events", ""), b));
}

TEST(Authorize, EditWritesKnativeObjectsButNotStatus) {
  UserInfo dev{"dev", "", {"devs", "system:authenticated"}};
  std::vector<ApiRoleBinding> b = {bind("edit", true, "devs")};  // cluster-wide, by group
  EXPECT_TRUE(authorize(dev, res("create", "default"), b));
  EXPECT_TRUE(authorize(dev, res("delete", "other", "routes"), b));
  EXPECT_TRUE(authorize(dev, res("list", ""), b));
  EXPECT_FALSE(authorize(dev, res("update", "default", "services", "serving.knative.dev", "status"), b));
  EXPECT_FALSE(authorize(dev, res("create", "default", "events", ""), b));
  UserInfo other{"dev2", "", {"ops"}};
  EXPECT_FALSE(authorize(other, res("get", "default"), b));
}

TEST(Authorize, AdminBindingIsScopedToItsNamespace) {
  UserInfo a{"ann", "", {}};
  std::vector<ApiRoleBinding> b = {bind("admin", false, "ann", "prod")};
  EXPECT_TRUE(authorize(a, res("update", "prod", "services", "serving.knative.dev", "status"), b));
  EXPECT_FALSE(authorize(a, res("get", "dev"), b));
}

TEST(Authorize, EveryoneAuthenticatedMayDiscoverAndAskAboutThemselves) {
  UserInfo nobody{"nobody", "", {"system:authenticated"}};
  RequestAttributes d;
  d.resource_request = false;
  d.verb = "get";
  d.path = "/apis";
  EXPECT_TRUE(authorize(nobody, d, {}));
  d.verb = "post";
  EXPECT_FALSE(authorize(nobody, d, {}));
  EXPECT_TRUE(authorize(nobody, res("create", "", "selfsubjectaccessreviews", "authorization.k8s.io"), {}));
  EXPECT_TRUE(authorize(nobody, res("create", "", "selfsubjectreviews", "authentication.k8s.io"), {}));
  EXPECT_FALSE(authorize(nobody, res("get", "default"), {}));
}

TEST(RequestAttributes, LikeKubeApiserverRequestInfo) {
  auto a =
      requestAttributes("POST", "/apis/serving.knative.dev/v1/namespaces/default/services",
                        {"apis", "serving.knative.dev", "v1", "namespaces", "default", "services"}, false);
  EXPECT_TRUE(a.resource_request);
  EXPECT_EQ(a.verb, "create");
  EXPECT_EQ(a.api_group, "serving.knative.dev");
  EXPECT_EQ(a.resource, "services");
  EXPECT_EQ(a.ns, "default");
  EXPECT_EQ(a.name, "");
  a = requestAttributes(
      "PUT", "", {"apis", "serving.knative.dev", "v1", "namespaces", "d", "services", "x", "status"}, false);
  EXPECT_EQ(a.verb, "update");
  EXPECT_EQ(a.name, "x");
  EXPECT_EQ(a.subresource, "status");
  a = requestAttributes("GET", "", {"apis", "serving.knative.dev", "v1", "services"}, true);
  EXPECT_EQ(a.verb, "watch");
  EXPECT_EQ(a.ns, "");
  a = requestAttributes("DELETE", "", {"apis", "serving.knative.dev", "v1", "namespaces", "d", "routes"},
                        false);
  EXPECT_EQ(a.verb, "deletecollection");
  a = requestAttributes("GET", "", {"api", "v1", "namespaces", "d", "events"}, false);
  EXPECT_EQ(a.api_group, "");
  EXPECT_EQ(a.resource, "events");
  EXPECT_EQ(a.verb, "list");
  a = requestAttributes("GET", "/apis/serving.knative.dev/v1", {"apis", "serving.knative.dev", "v1"}, false);
  EXPECT_FALSE(a.resource_request);
  EXPECT_EQ(a.path, "/apis/serving.knative.dev/v1");
  a = requestAttributes("HEAD", "/version", {"version"}, false);
  EXPECT_FALSE(a.resource_request);
  EXPECT_EQ(a.verb, "get");
}

TEST(ForbiddenMessage, KubeApiserverShape) {
  UserInfo bob{"bob", "", {}};
  EXPECT_EQ(forbiddenMessage(bob, res("create", "default")),
            "services.serving.knative.dev is forbidden: User \"bob\" cannot create resource \"services\" in "
            "API group "
            "\"serving.knative.dev\" in the namespace \"default\"");
  RequestAttributes g = res("get", "default");
  g.name = "hello";
  EXPECT_EQ(forbiddenMessage(bob, g),
            "services.serving.knative.dev \"hello\" is forbidden: User \"bob\" cannot get resource "
            "\"services\" in API "
            "group \"serving.knative.dev\" in the namespace \"default\"");
  EXPECT_EQ(forbiddenMessage(bob, res("list", "", "events", "")),
            "events is forbidden: User \"bob\" cannot list resource \"events\" in API group \"\" at the "
            "cluster scope");
}

}  // namespace
}  // namespace knap::api
