#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "api/admission.h"
#include "api/codec.h"

namespace knap::api {
namespace {

using nlohmann::json;

json helloService() {
  return json::parse(R"({"apiVersion":"serving.knative.dev/v1","kind":"Service",
    "metadata":{"name":"hello","namespace":"default"},
    "spec":{"template":{"spec":{"containers":[{"image":"ghcr.io/knative/helloworld-go:latest",
      "env":[{"name":"TARGET","value":"World"}]}]}}}})");
}
json helloRoute() {
  return json::parse(R"({"apiVersion":"serving.knative.dev/v1","kind":"Route","metadata":{"name":"hello"},
    "spec":{"traffic":[{"configurationName":"hello","percent":100}]}})");
}
json helloConfiguration() {
  return json::parse(
      R"({"apiVersion":"serving.knative.dev/v1","kind":"Configuration","metadata":{"name":"hello"},
    "spec":{"template":{"spec":{"containers":[{"image":"ghcr.io/knative/helloworld-go"}]}}}})");
}
json helloRevision() {
  return json::parse(
      R"({"apiVersion":"serving.knative.dev/v1","kind":"Revision","metadata":{"name":"hello-00001",
    "labels":{"serving.knative.dev/configuration":"hello"},
    "ownerReferences":[{"apiVersion":"serving.knative.dev/v1","kind":"Configuration","name":"hello","uid":"u1","controller":true}]},
    "spec":{"containers":[{"image":"ghcr.io/knative/helloworld-go"}]}})");
}

json& tspec(json& o) {
  return o["spec"]["template"]["spec"];
}
json& c0(json& o) {
  return tspec(o)["containers"][0];
}
json& tann(json& o) {
  return o["spec"]["template"]["metadata"]["annotations"];
}

Status check(const std::string& kind, json obj, const Config& config = defaultConfig()) {
  setDefaults(kind, obj, config);
  return validate(kind, obj, nullptr, Operation::kCreate, config);
}

std::string dump(const Status& s) {
  std::string out = s.message();
  for (const auto& e : s.fieldErrors()) out += "\n  " + e.field + " | " + e.message + " | " + e.reason;
  return out;
}

struct Case {
  const char* name;
  std::function<json()> base;
  std::function<void(json&)> mutate;
  std::string field;    // expected FieldError.field
  std::string message;  // substring of its message
  std::string reason = "FieldValueInvalid";
  bool apply_defaults = true;  // false: validate the object as given (e.g. a controller-made Revision)
  size_t error_count = 1;      // every case provokes exactly this many FieldErrors
};

class InvalidObjectTest : public ::testing::TestWithParam<Case> {};

TEST_P(InvalidObjectTest, IsRejectedWithFieldError) {
  const Case& c = GetParam();
  json obj = c.base();
  c.mutate(obj);
  std::string kind = obj["kind"].get<std::string>();
  Status s =
      c.apply_defaults ? check(kind, obj) : validate(kind, obj, nullptr, Operation::kCreate, defaultConfig());
  ASSERT_FALSE(s.isOk()) << "accepted: " << obj.dump();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  bool found = false;
  for (const auto& e : s.fieldErrors()) {
    if (e.field == c.field && e.message.find(c.message) != std::string::npos) {
      found = true;
      EXPECT_EQ(e.reason, c.reason) << e.field << ": " << e.message;
    }
  }
  EXPECT_EQ(s.fieldErrors().size(), c.error_count) << dump(s);
  EXPECT_TRUE(found) << "want " << c.field << " ~ \"" << c.message << "\", got: " << dump(s);
}

const std::vector<Case> kInvalidCases = {
    // §3.1 metadata
    {"NameMissing", helloService, [](json& o) { o["metadata"].erase("name"); }, "metadata.name",
     "name or generateName is required", "FieldValueRequired"},
    {"NameNotDns1035", helloService, [](json& o) { o["metadata"]["name"] = "1hello"; }, "metadata.name",
     "not a DNS 1035 label"},
    {"NameUpperCase", helloService, [](json& o) { o["metadata"]["name"] = "Hello"; }, "metadata.name",
     "not a DNS 1035 label"},
    {"NameTooLong", helloService, [](json& o) { o["metadata"]["name"] = std::string(64, 'a'); },
     "metadata.name", "not a DNS 1035 label"},
    {"GenerateNameInvalid", helloService,
     [](json& o) {
       o["metadata"].erase("name");
       o["metadata"]["generateName"] = "Hello-";
     },
     "metadata.generateName", "not a DNS 1035 label prefix"},
    {"AutoscalingAnnotationOnServiceMetadata", helloService,
     [](json& o) { o["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"] = "1"; },
     "metadata.annotations[autoscaling.knative.dev/min-scale]", "spec.template.metadata.annotations",
     "FieldValueForbidden"},
    {"AutoscalingAnnotationOnRouteMetadata", helloRoute,
     [](json& o) {
       o["metadata"]["annotations"]["autoscaling.knative.dev/class"] = "kpa.autoscaling.knative.dev";
     },
     "metadata.annotations[autoscaling.knative.dev/class]", "autoscaling annotations", "FieldValueForbidden"},
    {"UnknownNetworkingAnnotationOnTemplate", helloService,
     [](json& o) { tann(o)["networking.knative.dev/foo"] = "x"; },
     "spec.template.metadata.annotations[networking.knative.dev/foo]", "must be one of",
     "FieldValueNotSupported"},
    {"ServiceLabelWithoutOwnerOnConfiguration", helloConfiguration,
     [](json& o) { o["metadata"]["labels"]["serving.knative.dev/service"] = "hello"; },
     "metadata.labels[serving.knative.dev/service]", "ownerReferences"},
    {"ConfigurationLabelWithoutOwnerOnRevision", helloRevision,
     [](json& o) { o["metadata"].erase("ownerReferences"); },
     "metadata.labels[serving.knative.dev/configuration]", "ownerReferences"},
    {"RolloutDurationInvalid", helloService,
     [](json& o) { o["metadata"]["annotations"]["serving.knative.dev/rollout-duration"] = "soon"; },
     "metadata.annotations[serving.knative.dev/rollout-duration]", "rollout-duration=soon"},
    {"RolloutDurationNotWholeSeconds", helloRoute,
     [](json& o) { o["metadata"]["annotations"]["serving.knative.dev/rolloutDuration"] = "1500ms"; },
     "metadata.annotations[serving.knative.dev/rolloutDuration]", "second precision"},
    {"ProgressDeadlineNegative", helloService,
     [](json& o) { tann(o)["serving.knative.dev/progress-deadline"] = "-5s"; },
     "spec.template.metadata.annotations[serving.knative.dev/progress-deadline]", "non-negative"},
    {"VisibilityLabelValue", helloService,
     [](json& o) { o["metadata"]["labels"]["networking.knative.dev/visibility"] = "private"; },
     "metadata.labels[networking.knative.dev/visibility]", "\"cluster-local\"", "FieldValueNotSupported"},

    {"NamespaceInvalid", helloService, [](json& o) { o["metadata"]["namespace"] = "My_NS"; },
     "metadata.namespace", "DNS-1123 label"},
    {"LabelKeyInvalid", helloService, [](json& o) { o["metadata"]["labels"]["bad key"] = "x"; },
     "metadata.labels[bad key]", "invalid label key"},
    {"LabelValueInvalid", helloService, [](json& o) { o["metadata"]["labels"]["app"] = "-x-"; },
     "metadata.labels[app]", "invalid label value"},
    {"TemplateLabelValueTooLong", helloService,
     [](json& o) { o["spec"]["template"]["metadata"]["labels"]["app"] = std::string(64, 'a'); },
     "spec.template.metadata.labels[app]", "at most 63 characters"},
    {"AnnotationKeyInvalid", helloService, [](json& o) { o["metadata"]["annotations"]["a/b/c"] = "x"; },
     "metadata.annotations[a/b/c]", "invalid annotation key"},
    {"AnnotationsTooLarge", helloService,
     [](json& o) { o["metadata"]["annotations"]["big"] = std::string(300 * 1024, 'x'); },
     "metadata.annotations", "at most 262144 bytes", "FieldValueTooLong"},

    // §3.2 traffic
    {"TrafficSumNot100", helloService,
     [](json& o) { o["spec"]["traffic"] = json::parse(R"([{"latestRevision":true,"percent":60}])"); },
     "spec.traffic", "Traffic targets sum to 60, want 100"},
    {"RouteEmptyTraffic", helloRoute, [](json& o) { o["spec"]["traffic"] = json::array(); }, "spec.traffic",
     "Traffic targets sum to 0, want 100"},
    {"TrafficPercentAbove100", helloRoute,
     [](json& o) {
       o["spec"]["traffic"] = json::parse(
           R"([{"configurationName":"hello","percent":101},{"revisionName":"hello-00001","percent":-1}])");
     },
     "spec.traffic[0].percent", "expected 0 <= 101 <= 100", "FieldValueInvalid", true, 2},
    {"TrafficPercentNegative", helloRoute,
     [](json& o) {
       o["spec"]["traffic"] = json::parse(
           R"([{"configurationName":"hello","percent":101},{"revisionName":"hello-00001","percent":-1}])");
     },
     "spec.traffic[1].percent", "expected 0 <= -1 <= 100", "FieldValueInvalid", true, 2},
    {"TrafficTagNotDns1035", helloService,
     [](json& o) { o["spec"]["traffic"] = json::parse(R"([{"tag":"Current","percent":100}])"); },
     "spec.traffic[0].tag", "DNS-1035"},
    {"TrafficTagDuplicate", helloService,
     [](json& o) {
       o["spec"]["traffic"] =
           json::parse(R"([{"tag":"a","percent":50},{"tag":"a","revisionName":"hello-00001","percent":50}])");
     },
     "spec.traffic[1].tag", "Multiple definitions for \"a\"", "FieldValueDuplicate"},
    {"TrafficRevisionAndConfiguration", helloRoute,
     [](json& o) { o["spec"]["traffic"][0]["revisionName"] = "hello-00001"; }, "spec.traffic[0]",
     "expected exactly one, got both"},
    {"TrafficNeitherRevisionNorConfigurationOnRoute", helloRoute,
     [](json& o) { o["spec"]["traffic"] = json::parse(R"([{"percent":100}])"); }, "spec.traffic[0]",
     "expected exactly one, got neither", "FieldValueRequired"},
    {"TrafficConfigurationNameInService", helloService,
     [](json& o) { o["spec"]["traffic"] = json::parse(R"([{"configurationName":"hello","percent":100}])"); },
     "spec.traffic[0].configurationName", "must not set the field(s)", "FieldValueForbidden"},
    {"TrafficRevisionNameNotQualified", helloRoute,
     [](json& o) { o["spec"]["traffic"] = json::parse(R"([{"revisionName":"-bad-","percent":100}])"); },
     "spec.traffic[0].revisionName", "qualified name"},
    {"TrafficLatestRevisionTrueWithRevisionName", helloService,
     [](json& o) {
       o["spec"]["traffic"] =
           json::parse(R"([{"revisionName":"hello-00001","latestRevision":true,"percent":100}])");
     },
     "spec.traffic[0].latestRevision",
     "may not set revisionName \"hello-00001\" when latestRevision is true"},
    {"TrafficLatestRevisionFalseWithoutRevisionName", helloService,
     [](json& o) { o["spec"]["traffic"] = json::parse(R"([{"latestRevision":false,"percent":100}])"); },
     "spec.traffic[0].latestRevision", "when latestRevision is false"},
    {"TrafficUrlInSpec", helloService,
     [](json& o) { o["spec"]["traffic"] = json::parse(R"([{"tag":"x","url":"http://x","percent":100}])"); },
     "spec.traffic[0].url", "must not set the field(s)", "FieldValueForbidden"},
    {"StatusTrafficTagWithoutUrl", helloRoute,
     [](json& o) {
       o["status"]["traffic"] = json::parse(R"([{"tag":"x","revisionName":"hello-00001","percent":100}])");
     },
     "status.traffic[0].url", "missing field(s)", "FieldValueRequired"},

    // §3.3 RevisionSpec scalars
    {"ContainerConcurrencyAboveMax", helloService, [](json& o) { tspec(o)["containerConcurrency"] = 1001; },
     "spec.template.spec.containerConcurrency", "expected 0 <= 1001 <= 1000"},
    {"ContainerConcurrencyNegative", helloService, [](json& o) { tspec(o)["containerConcurrency"] = -1; },
     "spec.template.spec.containerConcurrency", "expected 0 <= -1 <= 1000"},
    {"TimeoutAboveMax", helloService, [](json& o) { tspec(o)["timeoutSeconds"] = 601; },
     "spec.template.spec.timeoutSeconds", "expected 0 <= 601 <= 600"},
    {"TimeoutNegative", helloService, [](json& o) { tspec(o)["timeoutSeconds"] = -1; },
     "spec.template.spec.timeoutSeconds", "expected 0 <= -1 <= 600"},
    {"ResponseStartTimeoutAboveMax", helloService,
     [](json& o) { tspec(o)["responseStartTimeoutSeconds"] = 700; },
     "spec.template.spec.responseStartTimeoutSeconds", "expected 0 <= 700 <= 600"},
    {"IdleTimeoutAboveTimeout", helloService,
     [](json& o) {
       tspec(o)["timeoutSeconds"] = 100;
       tspec(o)["idleTimeoutSeconds"] = 200;
     },
     "spec.template.spec.idleTimeoutSeconds", "must not exceed timeoutSeconds"},

    // §3.4 PodSpec
    {"ContainersMissing", helloService, [](json& o) { tspec(o)["containers"] = json::array(); },
     "spec.template.spec.containers", "missing field(s)", "FieldValueRequired"},
    {"TemplateMissing", helloService, [](json& o) { o["spec"].erase("template"); }, "spec.template",
     "missing field(s)", "FieldValueRequired"},
    {"FeatureGatedAffinity", helloService,
     [](json& o) {
       tspec(o)["affinity"] = json::object({{"nodeAffinity", {}}});
     },
     "spec.template.spec.affinity", "kubernetes.podspec-affinity", "FieldValueForbidden"},
    {"FeatureGatedNodeSelector", helloService,
     [](json& o) {
       tspec(o)["nodeSelector"] = {{"disk", "ssd"}};
     },
     "spec.template.spec.nodeSelector", "kubernetes.podspec-nodeselector", "FieldValueForbidden"},
    {"FeatureGatedInitContainers", helloService,
     [](json& o) { tspec(o)["initContainers"] = json::parse(R"([{"image":"busybox"}])"); },
     "spec.template.spec.initContainers", "kubernetes.podspec-init-containers", "FieldValueForbidden"},
    {"FeatureGatedHostNetwork", helloService, [](json& o) { tspec(o)["hostNetwork"] = true; },
     "spec.template.spec.hostNetwork", "kubernetes.podspec-hostnetwork", "FieldValueForbidden"},
    {"FeatureGatedPodSecurityContext", helloService,
     [](json& o) {
       tspec(o)["securityContext"] = {{"runAsUser", 1000}};
     },
     "spec.template.spec.securityContext.runAsUser", "kubernetes.podspec-securitycontext",
     "FieldValueForbidden"},
    {"NeverAllowedNodeName", helloService, [](json& o) { tspec(o)["nodeName"] = "n1"; },
     "spec.template.spec.nodeName", "must not set the field(s)", "FieldValueForbidden"},
    {"NeverAllowedRestartPolicy", helloService, [](json& o) { tspec(o)["restartPolicy"] = "Always"; },
     "spec.template.spec.restartPolicy", "must not set the field(s)", "FieldValueForbidden"},
    {"NeverAllowedTerminationGracePeriod", helloService,
     [](json& o) { tspec(o)["terminationGracePeriodSeconds"] = 5; },
     "spec.template.spec.terminationGracePeriodSeconds", "must not set the field(s)", "FieldValueForbidden"},
    {"ServiceAccountNameInvalid", helloService, [](json& o) { tspec(o)["serviceAccountName"] = "Bad_SA"; },
     "spec.template.spec.serviceAccountName",
     "invalid value: Bad_SA: spec.template.spec.serviceAccountName\na lowercase RFC 1123 subdomain"},
    {"AutomountServiceAccountTokenTrue", helloService,
     [](json& o) { tspec(o)["automountServiceAccountToken"] = true; },
     "spec.template.spec.automountServiceAccountToken", "only false", "FieldValueForbidden"},

    // §3.5 containers
    {"ImageMissing", helloService, [](json& o) { c0(o).erase("image"); },
     "spec.template.spec.containers[0].image", "missing field(s)", "FieldValueRequired"},
    {"ImageUnparseable", helloService, [](json& o) { c0(o)["image"] = "Ghcr.io/UPPER/Case::x"; },
     "spec.template.spec.containers[0].image", "Failed to parse image reference"},
    {"ContainerLifecycle", helloService,
     [](json& o) {
       c0(o)["lifecycle"] = {{"preStop", {}}};
     },
     "spec.template.spec.containers[0].lifecycle", "must not set the field(s)", "FieldValueForbidden"},
    {"ContainerTty", helloService, [](json& o) { c0(o)["tty"] = true; },
     "spec.template.spec.containers[0].tty", "must not set the field(s)", "FieldValueForbidden"},
    {"ContainerStdin", helloService, [](json& o) { c0(o)["stdin"] = true; },
     "spec.template.spec.containers[0].stdin", "must not set the field(s)", "FieldValueForbidden"},
    {"ReservedContainerName", helloService, [](json& o) { c0(o)["name"] = "queue-proxy"; },
     "spec.template.spec.containers[0].name", "reserved container name", "FieldValueForbidden"},
    {"DuplicateContainerNames", helloService,
     [](json& o) {
       tspec(o)["containers"] = json::parse(
           R"([{"name":"a","image":"x","ports":[{"containerPort":8080}]},{"name":"a","image":"y"}])");
     },
     "spec.template.spec.containers[1].name", "duplicate container name", "FieldValueDuplicate"},
    {"TooManyContainers", helloService,
     [](json& o) {
       json cs = json::array();
       cs.push_back({{"image", "x"}, {"ports", json::parse(R"([{"containerPort":8080}])")}});
       for (int i = 0; i < 4000; ++i) cs.push_back({{"name", "s" + std::to_string(i)}, {"image", "y"}});
       tspec(o)["containers"] = cs;
     },
     "spec.template.spec.containers", "Too many: 4001: must have at most 10 items", "FieldValueTooMany"},
    {"TooManyInitContainers", helloService,
     [](json& o) {
       json cs = json::array();
       for (int i = 0; i < 11; ++i) cs.push_back({{"name", "i" + std::to_string(i)}, {"image", "y"}});
       tspec(o)["initContainers"] = cs;
     },
     "spec.template.spec.initContainers", "Too many: 11: must have at most 10 items", "FieldValueTooMany",
     true, 2},  // and: the init-containers feature flag is off
    {"UnnamedSidecarNameTaken", helloRevision,
     [](json& o) {
       // Admission names unnamed containers; one validated as given (a
       // controller-made Revision) runs its sidecar at index 1 as
       // "container-1", so no container may take that name.
       o["spec"]["containers"] = json::parse(
           R"([{"name":"container-1","image":"x","ports":[{"containerPort":8080}]},{"image":"y"}])");
     },
     "spec.containers[0].name", "duplicate container name \"container-1\"", "FieldValueDuplicate", false},
    {"ReservedEnvPort", helloService,
     [](json& o) {
       c0(o)["env"].push_back({{"name", "PORT"}, {"value", "1"}});
     },
     "spec.template.spec.containers[0].env[1].name", "\"PORT\" is a reserved environment variable",
     "FieldValueForbidden"},
    {"ReservedEnvKService", helloService,
     [](json& o) {
       c0(o)["env"].push_back({{"name", "K_SERVICE"}, {"value", "x"}});
     },
     "spec.template.spec.containers[0].env[1].name", "reserved environment variable", "FieldValueForbidden"},
    {"EnvNameMissing", helloService, [](json& o) { c0(o)["env"][0].erase("name"); },
     "spec.template.spec.containers[0].env[0].name", "missing field(s)", "FieldValueRequired"},
    {"EnvValueFromFieldRefGated", helloService,
     [](json& o) {
       c0(o)["env"][0] =
           json::parse(R"({"name":"N","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}})");
     },
     "spec.template.spec.containers[0].env[0].valueFrom.fieldRef", "kubernetes.podspec-fieldref",
     "FieldValueForbidden"},
    {"EnvFromNeitherSource", helloService,
     [](json& o) { c0(o)["envFrom"] = json::parse(R"([{"prefix":"X_"}])"); },
     "spec.template.spec.containers[0].envFrom[0]", "expected exactly one, got neither",
     "FieldValueRequired"},
    {"EnvFromBothSources", helloService,
     [](json& o) {
       c0(o)["envFrom"] = json::parse(R"([{"configMapRef":{"name":"a"},"secretRef":{"name":"b"}}])");
     },
     "spec.template.spec.containers[0].envFrom[0]", "expected exactly one, got both"},
    {"TwoPortsOneContainer", helloService,
     [](json& o) { c0(o)["ports"] = json::parse(R"([{"containerPort":8080},{"containerPort":8081}])"); },
     "spec.template.spec.containers[0].ports", "more than one container port is set"},
    {"PortsAcrossContainers", helloService,
     [](json& o) {
       tspec(o)["containers"] = json::parse(
           R"([{"image":"x","ports":[{"containerPort":8080}]},{"image":"y","ports":[{"containerPort":9000}]}])");
     },
     "spec.template.spec.containers[*].ports", "more than one container port is set"},
    {"MultiContainerWithoutPort", helloService,
     [](json& o) { tspec(o)["containers"] = json::parse(R"([{"image":"x"},{"image":"y"}])"); },
     "spec.template.spec.containers.ports", "exactly one container must declare a port",
     "FieldValueRequired"},
    {"PortNameNotAllowed", helloService,
     [](json& o) { c0(o)["ports"] = json::parse(R"([{"containerPort":8080,"name":"grpc"}])"); },
     "spec.template.spec.containers[0].ports[0].name", "must be one of \"\", \"http1\", \"h2c\"",
     "FieldValueNotSupported"},
    {"PortProtocolUdp", helloService,
     [](json& o) { c0(o)["ports"] = json::parse(R"([{"containerPort":8080,"protocol":"UDP"}])"); },
     "spec.template.spec.containers[0].ports[0].protocol", "must be one of \"\", \"TCP\"",
     "FieldValueNotSupported"},
    {"PortReserved", helloService,
     [](json& o) { c0(o)["ports"] = json::parse(R"([{"containerPort":8012}])"); },
     "spec.template.spec.containers[0].ports[0].containerPort", "reserved"},
    {"PortOutOfRange", helloService,
     [](json& o) { c0(o)["ports"] = json::parse(R"([{"containerPort":70000}])"); },
     "spec.template.spec.containers[0].ports[0].containerPort", "expected 0 <= 70000 <= 65535"},
    {"PortHostPort", helloService,
     [](json& o) { c0(o)["ports"] = json::parse(R"([{"containerPort":8080,"hostPort":80}])"); },
     "spec.template.spec.containers[0].ports[0].hostPort", "must not set the field(s)",
     "FieldValueForbidden"},
    {"ResourcesClaims", helloService,
     [](json& o) { c0(o)["resources"] = json::parse(R"({"claims":[{"name":"gpu"}]})"); },
     "spec.template.spec.containers[0].resources.claims", "must not set the field(s)", "FieldValueForbidden"},
    {"ResourcesBadQuantity", helloService,
     [](json& o) { c0(o)["resources"] = json::parse(R"({"limits":{"memory":"lots"}})"); },
     "spec.template.spec.containers[0].resources.limits[memory]", "quantities must match"},
    {"ResourcesRequestAboveLimit", helloService,
     [](json& o) { c0(o)["resources"] = json::parse(R"({"limits":{"cpu":"500m"},"requests":{"cpu":"1"}})"); },
     "spec.template.spec.containers[0].resources.requests[cpu]", "less than or equal to cpu limit"},
    {"SecurityContextRunAsUserNegative", helloService,
     [](json& o) {
       c0(o)["securityContext"] = {{"runAsUser", -10}};
     },
     "spec.template.spec.containers[0].securityContext.runAsUser", "expected 0 <= -10 <= 2147483647"},
    {"SecurityContextRunAsGroupTooBig", helloService,
     [](json& o) {
       c0(o)["securityContext"] = {{"runAsGroup", 4294967296LL}};
     },
     "spec.template.spec.containers[0].securityContext.runAsGroup", "<= 2147483647"},
    {"SecurityContextPrivileged", helloService,
     [](json& o) {
       c0(o)["securityContext"] = {{"privileged", true}};
     },
     "spec.template.spec.containers[0].securityContext.privileged", "only false", "FieldValueForbidden"},
    {"SecurityContextSeLinux", helloService,
     [](json& o) {
       c0(o)["securityContext"] = {{"seLinuxOptions", {{"user", "x"}}}};
     },
     "spec.template.spec.containers[0].securityContext.seLinuxOptions", "must not set the field(s)",
     "FieldValueForbidden"},
    {"SecurityContextAddCapabilitiesGated", helloService,
     [](json& o) { c0(o)["securityContext"] = json::parse(R"({"capabilities":{"add":["NET_ADMIN"]}})"); },
     "spec.template.spec.containers[0].securityContext.capabilities.add",
     "kubernetes.containerspec-addcapabilities", "FieldValueForbidden"},
    {"TerminationMessagePolicyInvalid", helloService,
     [](json& o) { c0(o)["terminationMessagePolicy"] = "Always"; },
     "spec.template.spec.containers[0].terminationMessagePolicy", "FallbackToLogsOnError",
     "FieldValueNotSupported"},
    {"ImagePullPolicyInvalid", helloService, [](json& o) { c0(o)["imagePullPolicy"] = "Sometimes"; },
     "spec.template.spec.containers[0].imagePullPolicy", "IfNotPresent", "FieldValueNotSupported"},

    // probes
    {"ProbeTwoHandlers", helloService,
     [](json& o) { c0(o)["livenessProbe"] = json::parse(R"({"httpGet":{"path":"/"},"tcpSocket":{}})"); },
     "spec.template.spec.containers[0].livenessProbe", "expected exactly one, got both"},
    {"ProbeNoHandler", helloService,
     [](json& o) { c0(o)["livenessProbe"] = json::parse(R"({"periodSeconds":5})"); },
     "spec.template.spec.containers[0].livenessProbe", "expected exactly one, got neither",
     "FieldValueRequired"},
    {"ProbeNamedPortMismatch", helloService,
     [](json& o) {
       c0(o)["ports"] = json::parse(R"([{"containerPort":8080,"name":"h2c"}])");
       c0(o)["readinessProbe"] = json::parse(R"({"httpGet":{"port":"http"}})");
     },
     "spec.template.spec.containers[0].readinessProbe.httpGet.port", "must match the container port's name"},
    {"ReadinessZeroPeriodWithFailureThreshold", helloService,
     [](json& o) { c0(o)["readinessProbe"] = json::parse(R"({"tcpSocket":{},"failureThreshold":3})"); },
     "spec.template.spec.containers[0].readinessProbe.failureThreshold",
     "disallowed when periodSeconds is zero", "FieldValueForbidden"},
    {"ReadinessZeroPeriodWithTimeout", helloService,
     [](json& o) { c0(o)["readinessProbe"] = json::parse(R"({"tcpSocket":{},"timeoutSeconds":3})"); },
     "spec.template.spec.containers[0].readinessProbe.timeoutSeconds",
     "disallowed when periodSeconds is zero", "FieldValueForbidden"},
    {"ReadinessNegativePeriod", helloService,
     [](json& o) { c0(o)["readinessProbe"] = json::parse(R"({"tcpSocket":{},"periodSeconds":-1})"); },
     "spec.template.spec.containers[0].readinessProbe.periodSeconds", "expected 0 <= -1"},
    {"SidecarProbeGated", helloService,
     [](json& o) {
       tspec(o)["containers"] = json::parse(R"([{"image":"x","ports":[{"containerPort":8080}]},
                                                 {"image":"y","readinessProbe":{"tcpSocket":{"port":9000}}}])");
     },
     "spec.template.spec.containers[1].readinessProbe", "multi-container-probing", "FieldValueForbidden"},

    // volumes and mounts
    {"VolumeNotMounted", helloService,
     [](json& o) { tspec(o)["volumes"] = json::parse(R"([{"name":"s","secret":{"secretName":"x"}}])"); },
     "spec.template.spec.volumes[0].name", "not mounted"},
    {"VolumeNoSource", helloService,
     [](json& o) {
       tspec(o)["volumes"] = json::parse(R"([{"name":"s"}])");
       c0(o)["volumeMounts"] = json::parse(R"([{"name":"s","mountPath":"/s","readOnly":true}])");
     },
     "spec.template.spec.volumes[0]", "expected exactly one, got neither", "FieldValueRequired"},
    {"VolumeTwoSources", helloService,
     [](json& o) {
       tspec(o)["volumes"] =
           json::parse(R"([{"name":"s","secret":{"secretName":"x"},"configMap":{"name":"y"}}])");
       c0(o)["volumeMounts"] = json::parse(R"([{"name":"s","mountPath":"/s"}])");
     },
     "spec.template.spec.volumes[0]", "expected exactly one, got both"},
    {"VolumeHostPathGated", helloService,
     [](json& o) {
       tspec(o)["volumes"] = json::parse(R"([{"name":"h","hostPath":{"path":"/etc"}}])");
       c0(o)["volumeMounts"] = json::parse(R"([{"name":"h","mountPath":"/h","readOnly":true}])");
     },
     "spec.template.spec.volumes[0].hostPath", "kubernetes.podspec-hostpath", "FieldValueForbidden"},
    {"VolumeNfsNeverAllowed", helloService,
     [](json& o) {
       tspec(o)["volumes"] = json::parse(R"([{"name":"n","nfs":{"server":"s","path":"/"}}])");
       c0(o)["volumeMounts"] = json::parse(R"([{"name":"n","mountPath":"/n","readOnly":true}])");
     },
     "spec.template.spec.volumes[0].nfs", "must not set the field(s)", "FieldValueForbidden"},
    {"VolumeDuplicateName", helloService,
     [](json& o) {
       tspec(o)["volumes"] =
           json::parse(R"([{"name":"s","secret":{"secretName":"x"}},{"name":"s","configMap":{"name":"y"}}])");
       c0(o)["volumeMounts"] = json::parse(R"([{"name":"s","mountPath":"/s"}])");
     },
     "spec.template.spec.volumes[1].name", "duplicate volume name", "FieldValueDuplicate"},
    {"VolumeItemsNeedKeyAndPath", helloService,
     [](json& o) {
       tspec(o)["volumes"] =
           json::parse(R"([{"name":"s","secret":{"secretName":"x","items":[{"key":"k"}]}}])");
       c0(o)["volumeMounts"] = json::parse(R"([{"name":"s","mountPath":"/s"}])");
     },
     "spec.template.spec.volumes[0].secret.items[0].path", "missing field(s)", "FieldValueRequired"},
    {"ProjectedServiceAccountTokenNeedsPath", helloService,
     [](json& o) {
       tspec(o)["volumes"] = json::parse(
           R"([{"name":"p","projected":{"sources":[{"serviceAccountToken":{"audience":"a"}}]}}])");
       c0(o)["volumeMounts"] = json::parse(R"([{"name":"p","mountPath":"/p"}])");
     },
     "spec.template.spec.volumes[0].projected.sources[0].serviceAccountToken.path", "missing field(s)",
     "FieldValueRequired"},
    {"ProjectedServiceAccountTokenTooShort", helloService,
     [](json& o) {
       tspec(o)["volumes"] = json::parse(
           R"([{"name":"p","projected":{"sources":[{"serviceAccountToken":{"path":"t","expirationSeconds":60}}]}}])");
       c0(o)["volumeMounts"] = json::parse(R"([{"name":"p","mountPath":"/p","readOnly":true}])");
     },
     "spec.template.spec.volumes[0].projected.sources[0].serviceAccountToken.expirationSeconds",
     "less than 10 minutes"},
    {"SubPathMustNotClimb", helloService,
     [](json& o) {
       tspec(o)["volumes"] = json::parse(R"([{"name":"s","secret":{"secretName":"x"}}])");
       c0(o)["volumeMounts"] =
           json::parse(R"([{"name":"s","mountPath":"/s","readOnly":true,"subPath":"a/../.."}])");
     },
     "spec.template.spec.containers[0].volumeMounts[0].subPath", "must not contain '..'"},
    {"SubPathMustBeRelative", helloService,
     [](json& o) {
       tspec(o)["volumes"] = json::parse(R"([{"name":"s","secret":{"secretName":"x"}}])");
       c0(o)["volumeMounts"] =
           json::parse(R"([{"name":"s","mountPath":"/s","readOnly":true,"subPath":"/etc"}])");
     },
     "spec.template.spec.containers[0].volumeMounts[0].subPath", "must be a relative path"},
    {"EmptyDirBadMedium", helloService,
     [](json& o) {
       tspec(o)["volumes"] = json::parse(R"([{"name":"e","emptyDir":{"medium":"Disk"}}])");
       c0(o)["volumeMounts"] = json::parse(R"([{"name":"e","mountPath":"/e"}])");
     },
     "spec.template.spec.volumes[0].emptyDir.medium", "must be one of \"\", \"Memory\"",
     "FieldValueNotSupported"},
    {"MountWithoutVolume", helloService,
     [](json& o) {
       c0(o)["volumeMounts"] = json::parse(R"([{"name":"nope","mountPath":"/x","readOnly":true}])");
     },
     "spec.template.spec.containers[0].volumeMounts[0].name", "no matching volume"},
    {"MountPathReserved", helloService,
     [](json& o) {
       tspec(o)["volumes"] = json::parse(R"([{"name":"s","secret":{"secretName":"x"}}])");
       c0(o)["volumeMounts"] = json::parse(R"([{"name":"s","mountPath":"/dev/"}])");
     },
     "spec.template.spec.containers[0].volumeMounts[0].mountPath", "\"/dev\" is a reserved path"},
    {"MountPathRelative", helloService,
     [](json& o) {
       tspec(o)["volumes"] = json::parse(R"([{"name":"s","secret":{"secretName":"x"}}])");
       c0(o)["volumeMounts"] = json::parse(R"([{"name":"s","mountPath":"data"}])");
     },
     "spec.template.spec.containers[0].volumeMounts[0].mountPath", "absolute path"},
    {"MountPathMissing", helloService,
     [](json& o) {
       tspec(o)["volumes"] = json::parse(R"([{"name":"s","secret":{"secretName":"x"}}])");
       c0(o)["volumeMounts"] = json::parse(R"([{"name":"s"}])");
     },
     "spec.template.spec.containers[0].volumeMounts[0].mountPath", "missing field(s)", "FieldValueRequired"},
    {"MountPathDuplicate", helloService,
     [](json& o) {
       tspec(o)["volumes"] =
           json::parse(R"([{"name":"s","secret":{"secretName":"x"}},{"name":"c","configMap":{"name":"y"}}])");
       c0(o)["volumeMounts"] =
           json::parse(R"([{"name":"s","mountPath":"/data"},{"name":"c","mountPath":"/data/"}])");
     },
     "spec.template.spec.containers[0].volumeMounts[1].mountPath", "must be unique", "FieldValueDuplicate"},
    {"SecretMountExplicitlyWritable", helloRevision,
     [](json& o) {
       // Revisions come from the Configuration controller already defaulted; a writable secret mount is
       // refused.
       o["spec"]["volumes"] = json::parse(R"([{"name":"s","secret":{"secretName":"x"}}])");
       o["spec"]["containers"][0]["volumeMounts"] =
           json::parse(R"([{"name":"s","mountPath":"/s","readOnly":false}])");
     },
     "spec.containers[0].volumeMounts[0].readOnly", "must be readOnly: true", "FieldValueRequired", false},
    {"MountPropagationGated", helloService,
     [](json& o) {
       tspec(o)["volumes"] = json::parse(R"([{"name":"e","emptyDir":{}}])");
       c0(o)["volumeMounts"] =
           json::parse(R"([{"name":"e","mountPath":"/e","mountPropagation":"HostToContainer"}])");
     },
     "spec.template.spec.containers[0].volumeMounts[0].mountPropagation",
     "kubernetes.podspec-volumes-mount-propagation", "FieldValueForbidden"},

    // §3.6 autoscaling annotations (on the template)
    {"AutoscalingClassUnknownKnative", helloService,
     [](json& o) { tann(o)["autoscaling.knative.dev/class"] = "foo.autoscaling.knative.dev"; },
     "spec.template.metadata.annotations[autoscaling.knative.dev/class]", "kpa.autoscaling.knative.dev",
     "FieldValueNotSupported"},
    {"MinScaleNegative", helloService, [](json& o) { tann(o)["autoscaling.knative.dev/min-scale"] = "-1"; },
     "spec.template.metadata.annotations[autoscaling.knative.dev/min-scale]", "expected 0 <= -1"},
    {"MinScaleNotInteger", helloService,
     [](json& o) { tann(o)["autoscaling.knative.dev/min-scale"] = "one"; },
     "spec.template.metadata.annotations[autoscaling.knative.dev/min-scale]", "must be an integer"},
    {"WarmPoolNotANonNegativeInteger", helloService, [](json& o) { tann(o)["knap.dev/warm-pool"] = "-1"; },
     "spec.template.metadata.annotations[knap.dev/warm-pool]", "must be an integer from 0 to 100"},
    {"WarmPoolModeUnknown", helloService, [](json& o) { tann(o)["knap.dev/warm-pool-mode"] = "hot"; },
     "spec.template.metadata.annotations[knap.dev/warm-pool-mode]", "must be \"created\" or \"frozen\""},
    {"MaxScaleBelowMinScale", helloService,
     [](json& o) {
       tann(o)["autoscaling.knative.dev/min-scale"] = "5";
       tann(o)["autoscaling.knative.dev/max-scale"] = "2";
     },
     "spec.template.metadata.annotations[autoscaling.knative.dev/max-scale]",
     "max-scale=2 is less than min-scale=5"},
    {"LegacyMaxScaleAliasValidated", helloService,
     [](json& o) { tann(o)["autoscaling.knative.dev/maxScale"] = "-3"; },
     "spec.template.metadata.annotations[autoscaling.knative.dev/maxScale]", "expected 0 <= -3"},
    {"InitialScaleZeroNotAllowed", helloService,
     [](json& o) { tann(o)["autoscaling.knative.dev/initial-scale"] = "0"; },
     "spec.template.metadata.annotations[autoscaling.knative.dev/initial-scale]", "allow-zero-initial-scale"},
    {"ActivationScaleBelowTwo", helloService,
     [](json& o) { tann(o)["autoscaling.knative.dev/activation-scale"] = "1"; },
     "spec.template.metadata.annotations[autoscaling.knative.dev/activation-scale]", "expected 2 <= 1"},
    {"ActivationScaleAboveMaxScale", helloService,
     [](json& o) {
       tann(o)["autoscaling.knative.dev/activation-scale"] = "5";
       tann(o)["autoscaling.knative.dev/max-scale"] = "3";
     },
     "spec.template.metadata.annotations[autoscaling.knative.dev/activation-scale]",
     "must be <= max-scale=3"},
    {"TargetTooSmall", helloService, [](json& o) { tann(o)["autoscaling.knative.dev/target"] = "0.001"; },
     "spec.template.metadata.annotations[autoscaling.knative.dev/target]", "expected 0.01 <= 0.001"},
    {"TargetNotANumber", helloService, [](json& o) { tann(o)["autoscaling.knative.dev/target"] = "ten"; },
     "spec.template.metadata.annotations[autoscaling.knative.dev/target]", "must be a number"},
    {"TargetUtilizationAbove100", helloService,
     [](json& o) { tann(o)["autoscaling.knative.dev/target-utilization-percentage"] = "101"; },
     "spec.template.metadata.annotations[autoscaling.knative.dev/target-utilization-percentage]", "<= 100"},
    {"TargetBurstCapacityNegative", helloService,
     [](json& o) { tann(o)["autoscaling.knative.dev/target-burst-capacity"] = "-2"; },
     "spec.template.metadata.annotations[autoscaling.knative.dev/target-burst-capacity]", "or -1"},
    {"PanicWindowPercentageOutOfRange", helloService,
     [](json& o) { tann(o)["autoscaling.knative.dev/panic-window-percentage"] = "0.5"; },
     "spec.template.metadata.annotations[autoscaling.knative.dev/panic-window-percentage]",
     "expected 1 <= 0.5 <= 100"},
    {"PanicThresholdOutOfRange", helloService,
     [](json& o) { tann(o)["autoscaling.knative.dev/panic-threshold-percentage"] = "100"; },
     "spec.template.metadata.annotations[autoscaling.knative.dev/panic-threshold-percentage]",
     "expected 110 <= 100"},
    {"WindowTooShort", helloService, [](json& o) { tann(o)["autoscaling.knative.dev/window"] = "5s"; },
     "spec.template.metadata.annotations[autoscaling.knative.dev/window]", "expected 6s <= 5s <= 1h0m0s"},
    {"WindowNotWholeSeconds", helloService,
     [](json& o) { tann(o)["autoscaling.knative.dev/window"] = "6500ms"; },
     "spec.template.metadata.annotations[autoscaling.knative.dev/window]", "second precision"},
    {"ScaleDownDelayTooLong", helloService,
     [](json& o) { tann(o)["autoscaling.knative.dev/scale-down-delay"] = "2h"; },
     "spec.template.metadata.annotations[autoscaling.knative.dev/scale-down-delay]", "<= 1h0m0s"},
    {"ScaleToZeroRetentionInvalid", helloService,
     [](json& o) { tann(o)["autoscaling.knative.dev/scale-to-zero-pod-retention-period"] = "forever"; },
     "spec.template.metadata.annotations[autoscaling.knative.dev/scale-to-zero-pod-retention-period]",
     "invalid value"},
    {"MetricNotSupportedByKpa", helloService,
     [](json& o) { tann(o)["autoscaling.knative.dev/metric"] = "cpu"; },
     "spec.template.metadata.annotations[autoscaling.knative.dev/metric]", "\"concurrency\", \"rps\"",
     "FieldValueNotSupported"},
    {"MetricAggregationAlgorithmWithExplicitKpa", helloService,
     [](json& o) {
       tann(o)["autoscaling.knative.dev/class"] = "kpa.autoscaling.knative.dev";
       tann(o)["autoscaling.knative.dev/metric-aggregation-algorithm"] = "median";
     },
     "spec.template.metadata.annotations[autoscaling.knative.dev/metric-aggregation-algorithm]",
     "weighted-exponential", "FieldValueNotSupported"},
    {"QueueSidecarResourceNotQuantity", helloService,
     [](json& o) { tann(o)["queue.sidecar.serving.knative.dev/cpu-resource-request"] = "lots"; },
     "spec.template.metadata.annotations[queue.sidecar.serving.knative.dev/cpu-resource-request]",
     "quantity"},

    // BYO revision name
    {"ByoNameWithoutParentPrefix", helloService,
     [](json& o) { o["spec"]["template"]["metadata"]["name"] = "other-v1"; }, "spec.template.metadata.name",
     "must have prefix \"hello-\""},
    {"ByoNameNotDns1035", helloService,
     [](json& o) { o["spec"]["template"]["metadata"]["name"] = "hello-V1"; }, "spec.template.metadata.name",
     "not a DNS 1035 label"},
    {"ByoNameWithGenerateNameParent", helloService,
     [](json& o) {
       o["metadata"].erase("name");
       o["metadata"]["generateName"] = "hello-";
       o["spec"]["template"]["metadata"]["name"] = "hello-v1";
     },
     "spec.template.metadata.name", "generateName", "FieldValueForbidden"},

    // Revision created by the controller: same RevisionSpec rules at "spec".
    {"RevisionContainerConcurrency", helloRevision, [](json& o) { o["spec"]["containerConcurrency"] = 5000; },
     "spec.containerConcurrency", "expected 0 <= 5000 <= 1000"},
    {"RevisionAutoscalingAnnotationChecked", helloRevision,
     [](json& o) { o["metadata"]["annotations"]["autoscaling.knative.dev/min-scale"] = "-1"; },
     "metadata.annotations[autoscaling.knative.dev/min-scale]", "expected 0 <= -1"},
};

std::string caseName(const ::testing::TestParamInfo<Case>& info) {
  return info.param.name;
}

INSTANTIATE_TEST_SUITE_P(Rules, InvalidObjectTest, ::testing::ValuesIn(kInvalidCases), caseName);

// ---- objects that must be accepted ----

std::string readData(const std::string& name) {
  std::ifstream in(std::string(KNAP_TEST_DATA_DIR) + "/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(ValidationTest, KnativeExamplesAreValid) {
  for (const char* file : {"helloworld-go.yaml", "traffic-split-tags.yaml", "blue-green-route.yaml",
                           "autoscaling.yaml", "cluster-local.yaml", "probes-volumes.yaml"}) {
    auto docs = parseYamlDocuments(readData(file));
    ASSERT_TRUE(docs.isOk()) << file;
    for (json doc : *docs) {
      Status s = check(doc["kind"].get<std::string>(), doc);
      EXPECT_TRUE(s.isOk()) << file << ": " << dump(s);
    }
  }
}

TEST(ValidationTest, BaseObjectsAreValid) {
  EXPECT_TRUE(check("Service", helloService()).isOk()) << dump(check("Service", helloService()));
  EXPECT_TRUE(check("Route", helloRoute()).isOk());
  EXPECT_TRUE(check("Configuration", helloConfiguration()).isOk());
  EXPECT_TRUE(check("Revision", helloRevision()).isOk()) << dump(check("Revision", helloRevision()));
}

TEST(ValidationTest, AcceptedVariations) {
  struct Ok {
    const char* name;
    std::function<void(json&)> mutate;
  };
  const std::vector<Ok> oks = {
      {"generateName only",
       [](json& o) {
         o["metadata"].erase("name");
         o["metadata"]["generateName"] = "hello-";
       }},
      {"port http1 8080",
       [](json& o) { c0(o)["ports"] = json::parse(R"([{"containerPort":8080,"name":"http1"}])"); }},
      {"port 0", [](json& o) { c0(o)["ports"] = json::parse(R"([{"containerPort":0,"protocol":"TCP"}])"); }},
      {"cc 1000", [](json& o) { tspec(o)["containerConcurrency"] = 1000; }},
      {"timeout 600", [](json& o) { tspec(o)["timeoutSeconds"] = 600; }},
      {"byo name", [](json& o) { o["spec"]["template"]["metadata"]["name"] = "hello-v1"; }},
      {"emptyDir writable",
       [](json& o) {
         tspec(o)["volumes"] =
             json::parse(R"([{"name":"cache","emptyDir":{"medium":"Memory","sizeLimit":"64Mi"}}])");
         c0(o)["volumeMounts"] = json::parse(R"([{"name":"cache","mountPath":"/cache"}])");
       }},
      {"multi-container with one port",
       [](json& o) {
         tspec(o)["containers"] = json::parse(
             R"([{"image":"x","ports":[{"containerPort":8080}]},{"image":"y","env":[{"name":"PORT","value":"9"}]}])");
       }},
      {"ten containers, unnamed sidecars",
       [](json& o) {
         json cs = json::array();
         cs.push_back({{"name", "container-0"},
                       {"image", "x"},
                       {"ports", json::parse(R"([{"containerPort":8080}])")}});
         for (int i = 1; i < 10; ++i) cs.push_back({{"image", "y"}});
         tspec(o)["containers"] = cs;
       }},
      {"autoscaling annotations",
       [](json& o) {
         tann(o) =
             json::parse(R"({"autoscaling.knative.dev/min-scale":"1","autoscaling.knative.dev/maxScale":"10",
           "autoscaling.knative.dev/target":"0.5","autoscaling.knative.dev/window":"1m","autoscaling.knative.dev/metric":"rps",
           "autoscaling.knative.dev/target-burst-capacity":"-1","autoscaling.knative.dev/activation-scale":"3",
           "autoscaling.knative.dev/scale-to-zero-pod-retention-period":"1m5s","networking.knative.dev/ingress.class":"x",
           "autoscaling.knative.dev/class":"custom.example.com","serving.knative.dev/progress-deadline":"30s"})");
         tann(o)["autoscaling.knative.dev/class"] = "hpa.autoscaling.knative.dev";
         tann(o)["autoscaling.knative.dev/metric"] = "memory";
       }},
      {"traffic split",
       [](json& o) {
         o["spec"]["traffic"] = json::parse(R"([{"tag":"current","revisionName":"hello-00001","percent":90},
           {"tag":"candidate","latestRevision":true,"percent":10},{"tag":"latest","percent":0}])");
       }},
      {"security context",
       [](json& o) {
         c0(o)["securityContext"] =
             json::parse(R"({"runAsUser":2020,"runAsNonRoot":true,"readOnlyRootFilesystem":true,
           "privileged":false,"capabilities":{"drop":["ALL"]},"seccompProfile":{"type":"RuntimeDefault"}})");
       }},
      {"probes",
       [](json& o) {
         c0(o)["ports"] = json::parse(R"([{"containerPort":8080,"name":"h2c"}])");
         c0(o)["readinessProbe"] =
             json::parse(R"({"httpGet":{"port":"h2c","path":"/ready"},"periodSeconds":2})");
         c0(o)["livenessProbe"] = json::parse(R"({"grpc":{"port":8080}})");
         c0(o)["startupProbe"] = json::parse(R"({"exec":{"command":["true"]}})");
       }},
      {"rollout duration",
       [](json& o) { o["metadata"]["annotations"]["serving.knative.dev/rollout-duration"] = "380s"; }},
  };
  for (const auto& ok : oks) {
    json s = helloService();
    ok.mutate(s);
    Status st = check("Service", s);
    EXPECT_TRUE(st.isOk()) << ok.name << ": " << dump(st);
  }
}

TEST(ValidationTest, MaxScaleLimitFromConfig) {
  Config c = defaultConfig();
  c.autoscaler.max_scale_limit = 10;
  json s = helloService();
  tann(s)["autoscaling.knative.dev/max-scale"] = "20";
  Status st = check("Service", s, c);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.fieldErrors()[0].message.find("expected 1 <= 20 <= 10"), std::string::npos) << dump(st);
  tann(s)["autoscaling.knative.dev/max-scale"] = "0";
  st = check("Service", s, c);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.fieldErrors()[0].message.find("unlimited"), std::string::npos) << dump(st);
  tann(s).erase("autoscaling.knative.dev/max-scale");
  EXPECT_TRUE(check("Service", s, c).isOk());
}

TEST(ValidationTest, ContainerConcurrencyZeroDisallowedByConfig) {
  Config c = defaultConfig();
  c.defaults.allow_container_concurrency_zero = false;
  c.defaults.container_concurrency = 1;
  json s = helloService();
  tspec(s)["containerConcurrency"] = 0;
  Status st = check("Service", s, c);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.fieldErrors()[0].message.find("expected 1 <= 0 <= 1000"), std::string::npos) << dump(st);
}

TEST(ValidationTest, AllowZeroInitialScale) {
  Config c = defaultConfig();
  c.autoscaler.allow_zero_initial_scale = true;
  json s = helloService();
  tann(s)["autoscaling.knative.dev/initial-scale"] = "0";
  EXPECT_TRUE(check("Service", s, c).isOk());
}

TEST(ValidationTest, OneFieldErrorPerProblem) {
  json s = helloService();
  tspec(s)["containerConcurrency"] = -1;
  tspec(s)["timeoutSeconds"] = 9999;
  c0(s)["ports"] = json::parse(R"([{"containerPort":8013,"name":"grpc"}])");
  Status st = check("Service", s);
  ASSERT_FALSE(st.isOk());
  EXPECT_EQ(st.fieldErrors().size(), 4u) << dump(st);
  EXPECT_NE(st.message().find("Service.serving.knative.dev \"hello\" is invalid"), std::string::npos);
}

// ---- update rules (§3.7) ----

json defaulted(const std::string& kind, json o) {
  setDefaults(kind, o, defaultConfig());
  return o;
}

TEST(UpdateValidationTest, RevisionSpecIsImmutable) {
  json old = defaulted("Revision", helloRevision());
  json now = old;
  now["spec"]["containers"][0]["image"] = "ghcr.io/knative/other";
  Status st = validate("Revision", now, &old, Operation::kUpdate, defaultConfig());
  ASSERT_FALSE(st.isOk());
  EXPECT_EQ(st.fieldErrors()[0].field, "spec");
  EXPECT_NE(st.fieldErrors()[0].message.find("Immutable fields changed"), std::string::npos);
  // Metadata-only change is fine.
  now = old;
  now["metadata"]["labels"]["serving.knative.dev/routingState"] = "active";
  EXPECT_TRUE(validate("Revision", now, &old, Operation::kUpdate, defaultConfig()).isOk());
}

TEST(UpdateValidationTest, ByoNameMustChangeWithTemplate) {
  json old = helloService();
  old["spec"]["template"]["metadata"]["name"] = "hello-v1";
  old = defaulted("Service", old);
  json now = old;
  c0(now)["image"] = "ghcr.io/knative/helloworld-go:v2";
  Status st = validate("Service", now, &old, Operation::kUpdate, defaultConfig());
  ASSERT_FALSE(st.isOk());
  EXPECT_EQ(st.fieldErrors()[0].field, "spec.template.metadata.name");
  EXPECT_NE(st.fieldErrors()[0].message.find("without a name change"), std::string::npos);
  now["spec"]["template"]["metadata"]["name"] = "hello-v2";
  EXPECT_TRUE(validate("Service", now, &old, Operation::kUpdate, defaultConfig()).isOk());
  // Traffic-only change keeps the name.
  now = old;
  now["spec"]["traffic"] =
      json::parse(R"([{"revisionName":"hello-v1","percent":100,"latestRevision":false}])");
  EXPECT_TRUE(validate("Service", now, &old, Operation::kUpdate, defaultConfig()).isOk());
}

TEST(UpdateValidationTest, CreatorAnnotationImmutable) {
  json old = helloService();
  old["metadata"]["annotations"]["serving.knative.dev/creator"] = "alice";
  old["metadata"]["annotations"]["serving.knative.dev/lastModifier"] = "alice";
  old = defaulted("Service", old);
  json now = old;
  now["metadata"]["annotations"]["serving.knative.dev/creator"] = "bob";
  Status st = validate("Service", now, &old, Operation::kUpdate, defaultConfig());
  ASSERT_FALSE(st.isOk());
  EXPECT_EQ(st.fieldErrors()[0].field, "metadata.annotations[serving.knative.dev/creator]");
  EXPECT_EQ(st.fieldErrors()[0].reason, "FieldValueForbidden");
  // lastModifier may change only with the spec.
  now = old;
  now["metadata"]["annotations"]["serving.knative.dev/lastModifier"] = "bob";
  st = validate("Service", now, &old, Operation::kUpdate, defaultConfig());
  ASSERT_FALSE(st.isOk());
  EXPECT_EQ(st.fieldErrors()[0].field, "metadata.annotations[serving.knative.dev/lastModifier]");
  c0(now)["image"] = "ghcr.io/knative/helloworld-go:v2";
  EXPECT_TRUE(validate("Service", now, &old, Operation::kUpdate, defaultConfig()).isOk());
}

TEST(ValidationTest, UnknownKind) {
  EXPECT_FALSE(validate("Pod", json::object(), nullptr, Operation::kCreate, defaultConfig()).isOk());
}

TEST(ValidationTest, MalformedTypesDoNotThrow) {
  for (const char* spec :
       {R"({"containers":"x"})", R"({"containers":[1]})", R"({"containers":[{"env":"x","ports":[1]}]})",
        R"({"volumes":[{"name":3}],"containers":[{"image":"x","volumeMounts":[5]}]})"}) {
    json s = helloService();
    s["spec"]["template"]["spec"] = json::parse(spec);
    EXPECT_NO_THROW({
      Status st = check("Service", s);
      (void)st;
    }) << spec;
  }
}

}  // namespace
}  // namespace knap::api

namespace knap::api {
namespace {

// Robustness: replacing any field of the example objects (and its parents) with a value of
// any JSON type never makes the admission functions throw; they report errors instead.
TEST(AdmissionRobustnessTest, AnyFieldWithAnyTypeNeverThrows) {
  const std::vector<nlohmann::json> replacements = {
      "text", 7, -1, 1.5, true, nullptr, nlohmann::json::array({1, "a"}), nlohmann::json::object({{"x", 1}})};
  size_t runs = 0;
  for (const char* file : {"helloworld-go.yaml", "traffic-split-tags.yaml", "blue-green-route.yaml",
                           "autoscaling.yaml", "cluster-local.yaml", "probes-volumes.yaml"}) {
    std::ifstream in(std::string(KNAP_TEST_DATA_DIR) + "/" + file);
    std::stringstream ss;
    ss << in.rdbuf();
    auto docs = parseYamlDocuments(ss.str());
    ASSERT_TRUE(docs.isOk());
    for (const auto& doc : *docs) {
      std::string kind = doc["kind"].get<std::string>();
      std::set<std::string> pointers;
      const nlohmann::json flat = doc.flatten();
      for (const auto& [ptr, leaf] : flat.items()) {
        // The leaf and every ancestor below the root.
        for (std::string p = ptr; !p.empty(); p = p.substr(0, p.rfind('/'))) pointers.insert(p);
      }
      for (const auto& ptr : pointers) {
        for (const auto& r : replacements) {
          nlohmann::json obj = doc;
          obj[nlohmann::json::json_pointer(ptr)] = r;
          nlohmann::json old = obj;
          EXPECT_NO_THROW({
            auto unknown = unknownFields(kind, obj);
            (void)unknown;
            setDefaults(kind, obj, defaultConfig());
            Status s = validate(kind, obj, nullptr, Operation::kCreate, defaultConfig());
            Status u = validate(kind, obj, &old, Operation::kUpdate, defaultConfig());
            (void)s;
            (void)u;
          }) << file
             << " " << ptr << " = " << r.dump();
          ++runs;
        }
      }
    }
  }
  EXPECT_GT(runs, 1000u);
}

}  // namespace
}  // namespace knap::api
