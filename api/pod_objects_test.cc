#include "api/pod_objects.h"

#include <gtest/gtest.h>

namespace knap::api {
namespace {

using nlohmann::json;

class PodObjectsTest : public ::testing::Test {
 protected:
  ObjectLookup lookup() {
    return [this](const std::string& kind, const std::string& name) -> std::optional<json> {
      auto it = objects_.find(kind + "/" + name);
      if (it == objects_.end()) return std::nullopt;
      return it->second;
    };
  }
  std::optional<PodObjects> resolve(const json& spec) {
    return resolvePodObjects(spec, "default", lookup(), &error_);
  }

  std::map<std::string, json> objects_ = {
      {"Secret/db", {{"data", {{"password", "czNjcjN0"}, {"user", "YWRtaW4="}}}}},
      {"ConfigMap/app",
       {{"data", {{"GREETING", "hello"}, {"1bad", "x"}, {"app.yaml", "a: 1\n"}}},
        {"binaryData", {{"logo.bin", "AAEC"}}}}},
  };
  PodObjectsError error_;
};

json container(json env, json env_from = json::array()) {
  return {{"name", "user-container"}, {"image", "x"}, {"env", env}, {"envFrom", env_from}};
}

TEST_F(PodObjectsTest, EnvFromKeyRefsAndOptional) {
  json spec = {
      {"containers",
       json::array({container(
           json::array(
               {{{"name", "PASSWORD"},
                 {"valueFrom", {{"secretKeyRef", {{"name", "db"}, {"key", "password"}}}}}},
                {{"name", "G"}, {"valueFrom", {{"configMapKeyRef", {{"name", "app"}, {"key", "GREETING"}}}}}},
                {{"name", "OPT"},
                 {"valueFrom", {{"secretKeyRef", {{"name", "nope"}, {"key", "k"}, {"optional", true}}}}}}}),
           json::array({{{"configMapRef", {{"name", "app"}}}, {"prefix", "CM_"}},
                        {{"secretRef", {{"name", "db"}}}},
                        {{"secretRef", {{"name", "gone"}, {"optional", true}}}}}))})}};
  auto r = resolve(spec);
  ASSERT_TRUE(r) << error_.message;
  const auto& env = r->env.at("user-container");
  EXPECT_EQ(env.from_refs.at("PASSWORD"), "s3cr3t");
  EXPECT_EQ(env.from_refs.at("G"), "hello");
  EXPECT_FALSE(env.from_refs.count("OPT"));
  std::vector<std::pair<std::string, std::string>> want = {{"CM_1bad", "x"},
                                                           {"CM_GREETING", "hello"},
                                                           {"CM_app.yaml", "a: 1\n"},
                                                           {"password", "s3cr3t"},
                                                           {"user", "admin"}};
  EXPECT_EQ(env.from_env_from, want);
}

TEST_F(PodObjectsTest, EnvFromSkipsInvalidNames) {
  json spec = {{"containers", json::array({container(
                                  json::array(), json::array({{{"configMapRef", {{"name", "app"}}}}}))})}};
  auto r = resolve(spec);
  ASSERT_TRUE(r);
  for (const auto& [k, v] : r->env.at("user-container").from_env_from) EXPECT_NE(k, "1bad");
}

TEST_F(PodObjectsTest, MissingObjectsAndKeysNameThem) {
  auto fails = [&](json env, json env_from, const std::string& message) {
    json spec = {{"containers", json::array({container(env, env_from)})}};
    EXPECT_FALSE(resolve(spec)) << message;
    EXPECT_EQ(error_.reason, "CreateContainerConfigError");
    EXPECT_EQ(error_.message, message);
  };
  fails(
      json::array({{{"name", "P"}, {"valueFrom", {{"secretKeyRef", {{"name", "missing"}, {"key", "k"}}}}}}}),
      json::array(), "secret \"missing\" not found");
  fails(json::array({{{"name", "P"}, {"valueFrom", {{"secretKeyRef", {{"name", "db"}, {"key", "nokey"}}}}}}}),
        json::array(), "couldn't find key nokey in Secret default/db");
  fails(json::array(
            {{{"name", "P"}, {"valueFrom", {{"configMapKeyRef", {{"name", "app"}, {"key", "nokey"}}}}}}}),
        json::array(), "couldn't find key nokey in ConfigMap default/app");
  fails(json::array(), json::array({{{"configMapRef", {{"name", "nocm"}}}}}), "configmap \"nocm\" not found");
}

TEST_F(PodObjectsTest, VolumesItemsModesAndProjected) {
  json spec = {
      {"containers", json::array({container(json::array())})},
      {"volumes",
       json::array({
           {{"name", "all"}, {"secret", {{"secretName", "db"}, {"defaultMode", 0400}}}},
           {{"name", "some"},
            {"configMap",
             {{"name", "app"},
              {"items", json::array({{{"key", "app.yaml"}, {"path", "conf/app.yaml"}, {"mode", 0600}}})}}}},
           {{"name", "proj"},
            {"projected",
             {{"defaultMode", 0440},
              {"sources",
               json::array(
                   {{{"secret",
                      {{"name", "db"}, {"items", json::array({{{"key", "user"}, {"path", "u"}}})}}}},
                    {{"configMap",
                      {{"name", "app"}, {"items", json::array({{{"key", "logo.bin"}, {"path", "logo"}}})}}}},
                    {{"configMap", {{"name", "absent"}, {"optional", true}}}}})}}}},
           {{"name", "scratch"}, {"emptyDir", json::object()}},
       })}};
  auto r = resolve(spec);
  ASSERT_TRUE(r) << error_.message;
  std::vector<ProjectedFile> all = {{"password", "s3cr3t", 0400}, {"user", "admin", 0400}};
  EXPECT_EQ(r->volumes.at("all"), all);
  std::vector<ProjectedFile> some = {{"conf/app.yaml", "a: 1\n", 0600}};
  EXPECT_EQ(r->volumes.at("some"), some);
  std::vector<ProjectedFile> proj = {{"u", "admin", 0440}, {"logo", std::string("\0\1\2", 3), 0440}};
  EXPECT_EQ(r->volumes.at("proj"), proj);
  EXPECT_FALSE(r->volumes.count("scratch"));
  EXPECT_TRUE(readsObjects(spec));
  EXPECT_FALSE(readsObjects({{"containers", json::array({container(json::array())})}}));
}

TEST_F(PodObjectsTest, VolumeFailuresAndHostilePaths) {
  auto fails = [&](json volume, const std::string& message) {
    json spec = {{"containers", json::array({container(json::array())})}, {"volumes", json::array({volume})}};
    EXPECT_FALSE(resolve(spec)) << message;
    EXPECT_EQ(error_.reason, "FailedMount");
    EXPECT_EQ(error_.message, message);
  };
  fails({{"name", "v"}, {"secret", {{"secretName", "nope"}}}},
        "MountVolume.SetUp failed for volume \"v\" : secret \"nope\" not found");
  fails({{"name", "v"},
         {"configMap", {{"name", "app"}, {"items", json::array({{{"key", "k"}, {"path", "k"}}})}}}},
        "MountVolume.SetUp failed for volume \"v\" : configmap references non-existent config key: k");
  for (const char* bad : {"../etc/passwd", "/abs", "a/../../b", "..data", "a//b", ""}) {
    fails({{"name", "v"},
           {"configMap", {{"name", "app"}, {"items", json::array({{{"key", "GREETING"}, {"path", bad}}})}}}},
          std::string("MountVolume.SetUp failed for volume \"v\" : invalid path \"") + bad +
              "\" for key GREETING");
  }
}

TEST_F(PodObjectsTest, ProjectedServiceAccountToken) {
  json spec = {
      {"serviceAccountName", "builder"},
      {"containers", json::array({container(json::array())})},
      {"volumes", json::array({{{"name", "t"},
                                {"projected",
                                 {{"defaultMode", 0444},
                                  {"sources", json::array({{{"serviceAccountToken",
                                                             {{"audience", "api"},
                                                              {"path", "token"},
                                                              {"expirationSeconds", 7200}}}}})}}}}})}};
  std::vector<std::string> calls;
  TokenIssuer issuer = [&](const std::string& ns, const std::string& sa, const std::string& aud,
                           int64_t seconds) -> StatusOr<std::string> {
    calls.push_back(ns + "|" + sa + "|" + aud + "|" + std::to_string(seconds));
    return std::string("a.b.c");
  };
  auto r = resolvePodObjects(spec, "team", lookup(), &error_, issuer);
  ASSERT_TRUE(r) << error_.message;
  ASSERT_EQ(r->volumes.at("t").size(), 1u);
  EXPECT_EQ(r->volumes.at("t")[0], (ProjectedFile{"token", "a.b.c", 0444}));
  EXPECT_EQ(calls, std::vector<std::string>({"team|builder|api|7200"}));
  // Defaults: the "default" service account, one hour.
  spec.erase("serviceAccountName");
  spec["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"].erase("expirationSeconds");
  calls.clear();
  ASSERT_TRUE(resolvePodObjects(spec, "team", lookup(), &error_, issuer));
  EXPECT_EQ(calls, std::vector<std::string>({"team|default|api|3600"}));
  // No issuer, or one that fails: FailedMount naming the volume.
  EXPECT_FALSE(resolvePodObjects(spec, "team", lookup(), &error_));
  EXPECT_EQ(error_.reason, "FailedMount");
  EXPECT_NE(error_.message.find("volume \"t\""), std::string::npos) << error_.message;
  TokenIssuer broken = [](const std::string&, const std::string&, const std::string&,
                          int64_t) -> StatusOr<std::string> { return internalError("no key"); };
  EXPECT_FALSE(resolvePodObjects(spec, "team", lookup(), &error_, broken));
  EXPECT_NE(error_.message.find("no key"), std::string::npos) << error_.message;
  spec["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]["path"] = "../escape";
  EXPECT_FALSE(resolvePodObjects(spec, "team", lookup(), &error_, issuer));
}

}  // namespace
}  // namespace knap::api
