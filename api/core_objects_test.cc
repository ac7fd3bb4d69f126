#include "api/core_objects.h"

#include <gtest/gtest.h>

#include "common/base64.h"

namespace knap::api {
namespace {

using nlohmann::json;

json secret(json data, std::string type = "") {
  json s = {
      {"apiVersion", "v1"}, {"kind", "Secret"}, {"metadata", {{"name", "db"}, {"namespace", "default"}}}};
  if (!data.is_null()) s["data"] = data;
  if (!type.empty()) s["type"] = type;
  return s;
}

std::string fields(const Status& st) {
  std::string out;
  for (const FieldError& fe : st.fieldErrors()) out += fe.field + ": " + fe.message + "\n";
  return out;
}

TEST(CoreObjects, SecretDefaultsToOpaqueAndMergesStringData) {
  json s = secret({{"a", base64Encode("1")}, {"b", base64Encode("2")}});
  s["stringData"] = {{"b", "two"}, {"c", "three"}};
  ASSERT_TRUE(setCoreDefaults("Secret", s).isOk());
  EXPECT_EQ(s["type"], "Opaque");
  EXPECT_FALSE(s.contains("stringData"));
  EXPECT_EQ(s["data"]["a"], base64Encode("1"));
  EXPECT_EQ(s["data"]["b"], base64Encode("two"));  // stringData wins
  EXPECT_EQ(s["data"]["c"], base64Encode("three"));
  EXPECT_TRUE(validateCore("Secret", s, nullptr).isOk());
  // Idempotent.
  json again = s;
  ASSERT_TRUE(setCoreDefaults("Secret", again).isOk());
  EXPECT_EQ(again, s);
}

TEST(CoreObjects, SecretKeysAndValues) {
  json s = secret({{"bad key", base64Encode("x")}, {"ok", "not base64!"}, {"..x", base64Encode("y")}});
  ASSERT_TRUE(setCoreDefaults("Secret", s).isOk());
  Status st = validateCore("Secret", s, nullptr);
  ASSERT_FALSE(st.isOk());
  std::string f = fields(st);
  EXPECT_NE(
      f.find("data[bad key]: Invalid value: \"bad key\": a valid config key must consist of alphanumeric"),
      std::string::npos)
      << f;
  EXPECT_NE(f.find("data[ok]: Invalid value: \"<value omitted>\": illegal base64 data"), std::string::npos)
      << f;
  EXPECT_NE(f.find("data[..x]"), std::string::npos) << f;
  EXPECT_EQ(f.find("not base64!"), std::string::npos) << "a secret value must not be echoed";
}

TEST(CoreObjects, TlsNeedsCertAndKey) {
  json s = secret({{"tls.crt", base64Encode("c")}}, kSecretTypeTls);
  ASSERT_TRUE(setCoreDefaults("Secret", s).isOk());
  Status st = validateCore("Secret", s, nullptr);
  ASSERT_FALSE(st.isOk());
  EXPECT_EQ(fields(st), "data[tls.key]: Required value\n");
  s["data"]["tls.key"] = base64Encode("k");
  EXPECT_TRUE(validateCore("Secret", s, nullptr).isOk());
}

TEST(CoreObjects, DockerConfigJsonMustBeJson) {
  json s = secret(json::object(), kSecretTypeDockerConfigJson);
  ASSERT_TRUE(setCoreDefaults("Secret", s).isOk());
  EXPECT_EQ(fields(validateCore("Secret", s, nullptr)), "data[.dockerconfigjson]: Required value\n");
  s["data"] = {{".dockerconfigjson", base64Encode("{not json")}};
  EXPECT_NE(fields(validateCore("Secret", s, nullptr)).find("<secret contents redacted>"), std::string::npos);
  s["data"][".dockerconfigjson"] = base64Encode(R"({"auths":{"r.example":{"auth":"dTpw"}}})");
  EXPECT_TRUE(validateCore("Secret", s, nullptr).isOk());
}

TEST(CoreObjects, TypeIsImmutableAndImmutableFreezesData) {
  json old = secret({{"a", base64Encode("1")}});
  ASSERT_TRUE(setCoreDefaults("Secret", old).isOk());
  json changed = old;
  changed["type"] = "kubernetes.io/basic-auth";
  changed["data"]["username"] = base64Encode("u");
  EXPECT_EQ(fields(validateCore("Secret", changed, &old)),
            "type: Invalid value: \"kubernetes.io/basic-auth\": field is immutable\n");
  old["immutable"] = true;
  json edit = old;
  edit["data"]["a"] = base64Encode("2");
  EXPECT_EQ(fields(validateCore("Secret", edit, &old)),
            "data: Forbidden: field is immutable when `immutable` is set\n");
  json unfreeze = old;
  unfreeze["immutable"] = false;
  EXPECT_EQ(fields(validateCore("Secret", unfreeze, &old)),
            "immutable: Forbidden: field is immutable when `immutable` is set\n");
  EXPECT_TRUE(validateCore("Secret", old, &old).isOk());
}

TEST(CoreObjects, ConfigMapDataAndBinaryData) {
  json cm = {{"metadata", {{"name", "app"}}},
             {"data", {{"a", "x"}, {"both", "y"}}},
             {"binaryData", {{"both", base64Encode("z")}, {"bin", "%%"}}}};
  ASSERT_TRUE(setCoreDefaults("ConfigMap", cm).isOk());
  std::string f = fields(validateCore("ConfigMap", cm, nullptr));
  EXPECT_NE(f.find("data[both]: Invalid value: \"both\": duplicate of key present in binaryData"),
            std::string::npos)
      << f;
  EXPECT_NE(f.find("binaryData[bin]"), std::string::npos) << f;
  cm["binaryData"].erase("both");
  cm["binaryData"]["bin"] = base64Encode(std::string("\x00\x01", 2));
  EXPECT_TRUE(validateCore("ConfigMap", cm, nullptr).isOk());
  json big = {{"metadata", {{"name", "big"}}}, {"data", {{"a", std::string(1024 * 1024 + 1, 'x')}}}};
  EXPECT_NE(fields(validateCore("ConfigMap", big, nullptr)).find("Too long: must have at most 1048576 bytes"),
            std::string::npos);
}

TEST(CoreObjects, NamespaceNameAndStatus) {
  json ns = {{"metadata", {{"name", "team-a"}}}};
  ASSERT_TRUE(setCoreDefaults("Namespace", ns).isOk());
  EXPECT_EQ(ns["status"]["phase"], "Active");
  EXPECT_TRUE(validateCore("Namespace", ns, nullptr).isOk());
  json bad = {{"metadata", {{"name", "Team.A"}}}};
  EXPECT_NE(fields(validateCore("Namespace", bad, nullptr)).find("metadata.name: Invalid value: \"Team.A\""),
            std::string::npos);
  EXPECT_TRUE(isSystemNamespace("kube-system"));
  EXPECT_FALSE(isSystemNamespace("team-a"));
}

TEST(CoreObjects, ConfigKeys) {
  EXPECT_EQ(configKeyError("app.yaml"), "");
  EXPECT_EQ(configKeyError("KEY_1-x"), "");
  EXPECT_NE(configKeyError(""), "");
  EXPECT_NE(configKeyError("."), "");
  EXPECT_NE(configKeyError("a/b"), "");
  EXPECT_NE(configKeyError(std::string(254, 'a')), "");
}

}  // namespace
}  // namespace knap::api
