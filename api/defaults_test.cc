#include <gtest/gtest.h>

#include "api/admission.h"

namespace knap::api {
namespace {

using nlohmann::json;

json svc(const std::string& template_spec) {
  json s = json::parse(
      R"({"apiVersion":"serving.knative.dev/v1","kind":"Service","metadata":{"name":"hello"},"spec":{"template":{}}})");
  s["spec"]["template"]["spec"] = json::parse(template_spec);
  return s;
}

json defaulted(const std::string& kind, json obj, const Config& config = defaultConfig()) {
  setDefaults(kind, obj, config);
  return obj;
}

TEST(DefaultsTest, HelloWorldServiceGetsKnativeDefaults) {
  json s = defaulted("Service", svc(R"({"containers":[{"image":"ghcr.io/knative/helloworld-go"}]})"));
  EXPECT_EQ(s["spec"], json::parse(R"({
    "template": {"spec": {
      "containerConcurrency": 0,
      "timeoutSeconds": 300,
      "enableServiceLinks": false,
      "containers": [{
        "name": "user-container",
        "image": "ghcr.io/knative/helloworld-go",
        "readinessProbe": {"tcpSocket": {"port": 0}, "successThreshold": 1}
      }]}},
    "traffic": [{"percent": 100, "latestRevision": true}]
  })"));
}

TEST(DefaultsTest, Idempotent) {
  json once = defaulted("Service",
                        svc(R"({"containers":[{"image":"x","readinessProbe":{"periodSeconds":5,"httpGet":{}}},
                                                      {"image":"y"}],"volumes":[{"name":"s","secret":{"secretName":"s"}}]})"));
  json twice = defaulted("Service", once);
  EXPECT_EQ(once, twice);
}

TEST(DefaultsTest, ExplicitValuesAreKept) {
  json s =
      defaulted("Service", svc(R"({"containerConcurrency":10,"timeoutSeconds":60,"enableServiceLinks":true,
                                       "containers":[{"name":"app","image":"x"}]})"));
  const json& spec = s["spec"]["template"]["spec"];
  EXPECT_EQ(spec["containerConcurrency"], 10);
  EXPECT_EQ(spec["timeoutSeconds"], 60);
  EXPECT_EQ(spec["enableServiceLinks"], true);
  EXPECT_EQ(spec["containers"][0]["name"], "app");
}

TEST(DefaultsTest, ZeroTimeoutMeansDefault) {
  json s = defaulted("Service", svc(R"({"timeoutSeconds":0,"containers":[{"image":"x"}]})"));
  EXPECT_EQ(s["spec"]["template"]["spec"]["timeoutSeconds"], 300);
}

TEST(DefaultsTest, ConfigDefaultsApply) {
  Config c = defaultConfig();
  c.defaults.revision_timeout_seconds = 100;
  c.defaults.container_concurrency = 5;
  c.defaults.revision_response_start_timeout_seconds = 30;
  c.defaults.revision_idle_timeout_seconds = 20;
  c.defaults.resource_defaults["revision-cpu-request"] = "100m";
  c.defaults.resource_defaults["revision-memory-limit"] = "200M";
  json s =
      defaulted("Service", svc(R"({"containers":[{"image":"x","resources":{"requests":{"cpu":"1"}}}]})"), c);
  const json& spec = s["spec"]["template"]["spec"];
  EXPECT_EQ(spec["timeoutSeconds"], 100);
  EXPECT_EQ(spec["containerConcurrency"], 5);
  EXPECT_EQ(spec["responseStartTimeoutSeconds"], 30);
  EXPECT_EQ(spec["idleTimeoutSeconds"], 20);
  EXPECT_EQ(spec["containers"][0]["resources"]["requests"]["cpu"], "1");  // user value wins
  EXPECT_EQ(spec["containers"][0]["resources"]["limits"]["memory"], "200M");
}

TEST(DefaultsTest, ResponseStartAndIdleNotDefaultedWhenNotBelowTimeout) {
  // Stock defaults: response-start = revision-timeout (300) is not < 300, so it stays unset.
  json s = defaulted("Service", svc(R"({"containers":[{"image":"x"}]})"));
  EXPECT_FALSE(s["spec"]["template"]["spec"].contains("responseStartTimeoutSeconds"));
  EXPECT_FALSE(s["spec"]["template"]["spec"].contains("idleTimeoutSeconds"));
  Config c = defaultConfig();
  c.defaults.revision_response_start_timeout_seconds = 100;
  s = defaulted("Service", svc(R"({"timeoutSeconds":50,"containers":[{"image":"x"}]})"), c);
  EXPECT_FALSE(s["spec"]["template"]["spec"].contains("responseStartTimeoutSeconds"));
}

TEST(DefaultsTest, SeveralContainersGetNumberedNames) {
  json s =
      defaulted("Service", svc(R"({"containers":[{"image":"a","ports":[{"containerPort":8080}]},{"image":"b"},
                                                      {"name":"user-container-1","image":"c"}]})"));
  const json& cs = s["spec"]["template"]["spec"]["containers"];
  EXPECT_EQ(cs[0]["name"], "user-container-0");
  EXPECT_EQ(cs[1]["name"], "user-container-2");  // -1 is taken by the user
  EXPECT_EQ(cs[2]["name"], "user-container-1");
  // Only the serving container (the one with the port) gets the default probe.
  EXPECT_TRUE(cs[0].contains("readinessProbe"));
  EXPECT_FALSE(cs[1].contains("readinessProbe"));
}

TEST(DefaultsTest, SingleContainerNameClashWithTemplate) {
  Config c = defaultConfig();
  c.defaults.container_name_template = "{{.Name}}";
  json s = defaulted("Service", svc(R"({"containers":[{"image":"a"}]})"), c);
  EXPECT_EQ(s["spec"]["template"]["spec"]["containers"][0]["name"], "hello");
}

TEST(DefaultsTest, InitContainersNamed) {
  json s = defaulted("Service", svc(R"({"containers":[{"image":"a"}],"initContainers":[{"image":"i"}]})"));
  EXPECT_EQ(s["spec"]["template"]["spec"]["initContainers"][0]["name"], "init-container");
}

TEST(DefaultsTest, ReadinessProbeWithPeriodGetsKubernetesDefaults) {
  json s = defaulted(
      "Service",
      svc(R"({"containers":[{"image":"a","readinessProbe":{"httpGet":{"path":"/h"},"periodSeconds":5}}]})"));
  EXPECT_EQ(
      s["spec"]["template"]["spec"]["containers"][0]["readinessProbe"],
      json::parse(
          R"({"httpGet":{"path":"/h"},"periodSeconds":5,"successThreshold":1,"failureThreshold":3,"timeoutSeconds":1})"));
}

TEST(DefaultsTest, GrpcProbeServiceDefaultsToEmpty) {
  json s =
      defaulted("Service", svc(R"({"containers":[{"image":"a","livenessProbe":{"grpc":{"port":8080}}}]})"));
  EXPECT_EQ(s["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["grpc"]["service"], "");
}

TEST(DefaultsTest, SecretAndConfigMapMountsAreReadOnly) {
  json s = defaulted("Service", svc(R"({"containers":[{"image":"a","volumeMounts":[
      {"name":"sec","mountPath":"/s"},{"name":"cm","mountPath":"/c","readOnly":false},{"name":"tmp","mountPath":"/t"}]}],
      "volumes":[{"name":"sec","secret":{"secretName":"x"}},{"name":"cm","configMap":{"name":"y"}},{"name":"tmp","emptyDir":{}}]})"));
  const json& mounts = s["spec"]["template"]["spec"]["containers"][0]["volumeMounts"];
  EXPECT_EQ(mounts[0]["readOnly"], true);
  EXPECT_EQ(mounts[1]["readOnly"], true);
  EXPECT_FALSE(mounts[2].contains("readOnly"));
}

TEST(DefaultsTest, TrafficLatestRevisionFollowsRevisionName) {
  json s = svc(R"({"containers":[{"image":"a"}]})");
  s["spec"]["traffic"] = json::parse(R"([{"tag":"current","revisionName":"hello-00001","percent":50},
                                         {"tag":"latest","percent":50},{"revisionName":"x","latestRevision":false,"percent":0}])");
  s = defaulted("Service", s);
  EXPECT_EQ(s["spec"]["traffic"][0]["latestRevision"], false);
  EXPECT_EQ(s["spec"]["traffic"][1]["latestRevision"], true);
  EXPECT_EQ(s["spec"]["traffic"].size(), 3u);
}

TEST(DefaultsTest, StandaloneRouteGetsNoDefaultTraffic) {
  json r = json::parse(R"({"kind":"Route","metadata":{"name":"r"},"spec":{}})");
  r = defaulted("Route", r);
  EXPECT_FALSE(r["spec"].contains("traffic"));
  r["spec"]["traffic"] = json::parse(R"([{"configurationName":"c","percent":100}])");
  r = defaulted("Route", r);
  EXPECT_EQ(r["spec"]["traffic"][0]["latestRevision"], true);
}

TEST(DefaultsTest, ConfigurationAndRevision) {
  json c = json::parse(
      R"({"kind":"Configuration","metadata":{"name":"c"},"spec":{"template":{"spec":{"containers":[{"image":"a"}]}}}})");
  c = defaulted("Configuration", c);
  EXPECT_EQ(c["spec"]["template"]["spec"]["containers"][0]["name"], "user-container");
  EXPECT_FALSE(c["spec"].contains("traffic"));
  json r = json::parse(
      R"({"kind":"Revision","metadata":{"name":"c-00001"},"spec":{"containers":[{"image":"a"}]}})");
  r = defaulted("Revision", r);
  EXPECT_EQ(r["spec"]["timeoutSeconds"], 300);
}

TEST(DefaultsTest, MalformedInputDoesNotThrow) {
  for (const char* spec :
       {R"({"containers":"x"})", R"({"containers":[1,2]})", R"({"timeoutSeconds":"x","containers":[]})",
        R"({"containers":[{"readinessProbe":"x","volumeMounts":[{"name":5}]}],"volumes":"v"})"}) {
    json s = svc(spec);
    EXPECT_NO_THROW(setDefaults("Service", s, defaultConfig())) << spec;
  }
  json weird = json::parse(R"({"spec":{"template":"x","traffic":"y"}})");
  EXPECT_NO_THROW(setDefaults("Service", weird, defaultConfig()));
}

}  // namespace
}  // namespace knap::api
