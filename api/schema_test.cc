#include "api/schema.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "api/admission.h"
#include "api/codec.h"

namespace knap::api {
namespace {

using nlohmann::json;

std::vector<json> readDocs(const std::string& name) {
  std::ifstream in(std::string(KNAP_TEST_DATA_DIR) + "/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  auto docs = parseYamlDocuments(ss.str());
  EXPECT_TRUE(docs.isOk()) << docs.status().toString();
  return docs.isOk() ? *docs : std::vector<json>{};
}

json service(const std::string& container_json) {
  json s = json::parse(R"({"apiVersion":"serving.knative.dev/v1","kind":"Service","metadata":{"name":"hello"},
                           "spec":{"template":{"spec":{"containers":[]}}}})");
  s["spec"]["template"]["spec"]["containers"].push_back(json::parse(container_json));
  return s;
}

TEST(SchemaTest, KnativeExamplesHaveNoUnknownFields) {
  for (const char* file : {"helloworld-go.yaml", "traffic-split-tags.yaml", "blue-green-route.yaml",
                           "autoscaling.yaml", "cluster-local.yaml", "probes-volumes.yaml"}) {
    for (const json& doc : readDocs(file)) {
      auto unknown = unknownFields(doc["kind"].get<std::string>(), doc);
      ASSERT_TRUE(unknown.isOk()) << file << ": " << unknown.status().toString();
      EXPECT_TRUE(unknown->empty()) << file << ": " << unknown->front();
    }
  }
}

TEST(SchemaTest, UnknownContainerFieldPath) {
  auto unknown =
      unknownFields("Service", service(R"({"image":"x","foo":1,"ports":[{"containerPort":1,"bar":2}]})"));
  ASSERT_TRUE(unknown.isOk());
  EXPECT_EQ(*unknown, (std::vector<std::string>{"spec.template.spec.containers[0].foo",
                                                "spec.template.spec.containers[0].ports[0].bar"}));
}

TEST(SchemaTest, UnknownTopLevelAndMetadataFields) {
  json s = service(R"({"image":"x"})");
  s["spec"]["templates"] = json::object();
  s["metadata"]["lables"] = json::object();
  s["extra"] = 1;
  auto unknown = unknownFields("Service", s);
  ASSERT_TRUE(unknown.isOk());
  EXPECT_EQ(*unknown, (std::vector<std::string>{"extra", "metadata.lables", "spec.templates"}));
}

TEST(SchemaTest, DisallowedButRealKubernetesFieldsAreKnown) {
  json s = service(R"({"image":"x","lifecycle":{"preStop":{}},"tty":true})");
  s["spec"]["template"]["spec"]["nodeName"] = "n1";
  s["spec"]["template"]["spec"]["affinity"] = json::object();
  s["spec"]["template"]["spec"]["volumes"] = json::parse(R"([{"name":"v","nfs":{"server":"x"}}])");
  auto unknown = unknownFields("Service", s);
  ASSERT_TRUE(unknown.isOk());
  EXPECT_TRUE(unknown->empty());
}

TEST(SchemaTest, WrongTypesAreFieldErrors) {
  json s = service(R"({"image":"x","ports":[{"containerPort":"8080"}]})");
  s["spec"]["template"]["spec"]["containerConcurrency"] = "10";
  s["spec"]["template"]["metadata"]["annotations"] = json::parse(R"({"autoscaling.knative.dev/target": 10})");
  auto r = unknownFields("Service", s);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
  const auto& errs = r.status().fieldErrors();
  ASSERT_EQ(errs.size(), 3u);
  EXPECT_EQ(errs[0].field, "spec.template.metadata.annotations[autoscaling.knative.dev/target]");
  EXPECT_EQ(errs[0].message, "expected string, got integer");
  EXPECT_EQ(errs[1].field, "spec.template.spec.containerConcurrency");
  EXPECT_EQ(errs[1].message, "expected integer, got string");
  EXPECT_EQ(errs[2].field, "spec.template.spec.containers[0].ports[0].containerPort");
}

TEST(SchemaTest, FloatIsNotAnInteger) {
  json s = service(R"({"image":"x"})");
  s["spec"]["template"]["spec"]["timeoutSeconds"] = 1.5;
  auto r = unknownFields("Service", s);
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().fieldErrors()[0].message, "expected integer, got number");
}

TEST(SchemaTest, IntOrStringAndQuantities) {
  json s = service(R"({"image":"x","readinessProbe":{"httpGet":{"port":"http"}},
                      "resources":{"limits":{"cpu":1,"memory":"128Mi"}}})");
  auto r = unknownFields("Service", s);
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  s["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["port"] = true;
  EXPECT_FALSE(unknownFields("Service", s).isOk());
}

TEST(SchemaTest, NullMeansUnset) {
  json s = service(R"({"image":"x","env":null})");
  s["spec"]["traffic"] = nullptr;
  auto r = unknownFields("Service", s);
  ASSERT_TRUE(r.isOk());
  EXPECT_TRUE(r->empty());
}

TEST(SchemaTest, KindSpecificSpecAndStatus) {
  json route = json::parse(
      R"({"kind":"Route","metadata":{"name":"r"},"spec":{"traffic":[{"revisionName":"a","percent":100}],
      "template":{}},"status":{"url":"http://r","traffic":[{"revisionName":"a","percent":100,"url":"http://x"}],
      "latestReadyRevisionName":"x"}})");
  auto r = unknownFields("Route", route);
  ASSERT_TRUE(r.isOk());
  EXPECT_EQ(*r, (std::vector<std::string>{"spec.template", "status.latestReadyRevisionName"}));
  json rev =
      json::parse(R"({"kind":"Revision","metadata":{"name":"r-00001"},"spec":{"containers":[{"image":"x"}],
      "timeoutSeconds":300},"status":{"containerStatuses":[{"name":"user-container","imageDigest":"x@sha256:00"}],
      "actualReplicas":1}})");
  r = unknownFields("Revision", rev);
  ASSERT_TRUE(r.isOk());
  EXPECT_TRUE(r->empty());
}

TEST(SchemaTest, UnknownKind) {
  EXPECT_FALSE(unknownFields("Pod", json::object()).isOk());
  EXPECT_EQ(schemaForKind("Pod"), nullptr);
}

TEST(SchemaTest, OpenApiSchema) {
  json s = openApiSchema("Service");
  EXPECT_EQ(s["type"], "object");
  EXPECT_EQ(s["properties"]["spec"]["properties"]["template"]["properties"]["spec"]["properties"]
             ["containers"]["type"],
            "array");
  EXPECT_EQ(s["properties"]["metadata"]["properties"]["labels"]["additionalProperties"]["type"], "string");
  EXPECT_EQ(s["x-kubernetes-group-version-kind"][0]["kind"], "Service");
  EXPECT_TRUE(openApiSchema("Nope").is_null());
}

}  // namespace
}  // namespace knap::api
