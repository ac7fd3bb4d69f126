#include "api/schema.h"

#include <initializer_list>
#include <utility>
#include <vector>

#include "api/admission.h"

namespace knap::api {
namespace {

using nlohmann::json;
using Node = std::shared_ptr<const SchemaNode>;

Node leaf(SchemaType t) {
  auto n = std::make_shared<SchemaNode>();
  n->type = t;
  return n;
}
Node str() {
  static Node n = leaf(SchemaType::kString);
  return n;
}
Node integer() {
  static Node n = leaf(SchemaType::kInteger);
  return n;
}
Node boolean() {
  static Node n = leaf(SchemaType::kBoolean);
  return n;
}
Node intOrString() {
  static Node n = leaf(SchemaType::kIntOrString);
  return n;
}
Node any() {
  static Node n = leaf(SchemaType::kAny);
  return n;
}
Node quantity() {
  return intOrString();
}

Node obj(std::initializer_list<std::pair<const std::string, Node>> fields) {
  auto n = std::make_shared<SchemaNode>();
  n->type = SchemaType::kObject;
  n->fields = fields;
  return n;
}
Node arr(Node items) {
  auto n = std::make_shared<SchemaNode>();
  n->type = SchemaType::kArray;
  n->items = std::move(items);
  return n;
}
Node mapOf(Node items) {
  auto n = std::make_shared<SchemaNode>();
  n->type = SchemaType::kMap;
  n->items = std::move(items);
  return n;
}
Node strings() {
  return arr(str());
}
Node stringMap() {
  return mapOf(str());
}

// ---- metav1 ----

Node objectMeta() {
  static Node n = obj({
      {"name", str()},
      {"generateName", str()},
      {"namespace", str()},
      {"selfLink", str()},
      {"uid", str()},
      {"resourceVersion", str()},
      {"generation", integer()},
      {"creationTimestamp", str()},
      {"deletionTimestamp", str()},
      {"deletionGracePeriodSeconds", integer()},
      {"labels", stringMap()},
      {"annotations", stringMap()},
      {"ownerReferences", arr(obj({{"apiVersion", str()},
                                   {"kind", str()},
                                   {"name", str()},
                                   {"uid", str()},
                                   {"controller", boolean()},
                                   {"blockOwnerDeletion", boolean()}}))},
      {"finalizers", strings()},
      {"managedFields", arr(obj({{"manager", str()},
                                 {"operation", str()},
                                 {"apiVersion", str()},
                                 {"time", str()},
                                 {"fieldsType", str()},
                                 {"fieldsV1", any()},
                                 {"subresource", str()}}))},
  });
  return n;
}

// ---- corev1 pieces ----

Node keyToPaths() {
  return arr(obj({{"key", str()}, {"path", str()}, {"mode", integer()}}));
}
Node localRef() {
  return obj({{"name", str()}});
}
Node keySelector() {
  return obj({{"name", str()}, {"key", str()}, {"optional", boolean()}});
}
Node fieldRef() {
  return obj({{"apiVersion", str()}, {"fieldPath", str()}});
}
Node resourceFieldRef() {
  return obj({{"containerName", str()}, {"resource", str()}, {"divisor", quantity()}});
}
Node seccompProfile() {
  return obj({{"type", str()}, {"localhostProfile", str()}});
}

Node envVar() {
  return obj({{"name", str()},
              {"value", str()},
              {"valueFrom", obj({{"fieldRef", fieldRef()},
                                 {"resourceFieldRef", resourceFieldRef()},
                                 {"configMapKeyRef", keySelector()},
                                 {"secretKeyRef", keySelector()}})}});
}

Node envFromSource() {
  Node ref = obj({{"name", str()}, {"optional", boolean()}});
  return obj({{"prefix", str()}, {"configMapRef", ref}, {"secretRef", ref}});
}

Node probe() {
  return obj({
      {"exec", obj({{"command", strings()}})},
      {"httpGet", obj({{"path", str()},
                       {"port", intOrString()},
                       {"host", str()},
                       {"scheme", str()},
                       {"httpHeaders", arr(obj({{"name", str()}, {"value", str()}}))}})},
      {"tcpSocket", obj({{"port", intOrString()}, {"host", str()}})},
      {"grpc", obj({{"port", integer()}, {"service", str()}})},
      {"initialDelaySeconds", integer()},
      {"timeoutSeconds", integer()},
      {"periodSeconds", integer()},
      {"successThreshold", integer()},
      {"failureThreshold", integer()},
      {"terminationGracePeriodSeconds", integer()},
  });
}

Node containerSecurityContext() {
  return obj({
      {"capabilities", obj({{"add", strings()}, {"drop", strings()}})},
      {"privileged", boolean()},
      {"seLinuxOptions", any()},
      {"windowsOptions", any()},
      {"runAsUser", integer()},
      {"runAsGroup", integer()},
      {"runAsNonRoot", boolean()},
      {"readOnlyRootFilesystem", boolean()},
      {"allowPrivilegeEscalation", boolean()},
      {"procMount", str()},
      {"seccompProfile", seccompProfile()},
      {"appArmorProfile", seccompProfile()},
  });
}

Node container() {
  static Node n = obj({
      {"name", str()},
      {"image", str()},
      {"command", strings()},
      {"args", strings()},
      {"workingDir", str()},
      {"ports", arr(obj({{"name", str()},
                         {"hostPort", integer()},
                         {"containerPort", integer()},
                         {"protocol", str()},
                         {"hostIP", str()}}))},
      {"envFrom", arr(envFromSource())},
      {"env", arr(envVar())},
      {"resources", obj({{"limits", mapOf(quantity())},
                         {"requests", mapOf(quantity())},
                         {"claims", arr(obj({{"name", str()}, {"request", str()}}))}})},
      {"resizePolicy", arr(any())},
      {"restartPolicy", str()},
      {"volumeMounts", arr(obj({{"name", str()},
                                {"readOnly", boolean()},
                                {"recursiveReadOnly", str()},
                                {"mountPath", str()},
                                {"subPath", str()},
                                {"mountPropagation", str()},
                                {"subPathExpr", str()}}))},
      {"volumeDevices", arr(any())},
      {"livenessProbe", probe()},
      {"readinessProbe", probe()},
      {"startupProbe", probe()},
      {"lifecycle", any()},
      {"terminationMessagePath", str()},
      {"terminationMessagePolicy", str()},
      {"imagePullPolicy", str()},
      {"securityContext", containerSecurityContext()},
      {"stdin", boolean()},
      {"stdinOnce", boolean()},
      {"tty", boolean()},
  });
  return n;
}

Node volume() {
  Node projection = obj({
      {"secret", obj({{"name", str()}, {"items", keyToPaths()}, {"optional", boolean()}})},
      {"configMap", obj({{"name", str()}, {"items", keyToPaths()}, {"optional", boolean()}})},
      {"serviceAccountToken", obj({{"audience", str()}, {"expirationSeconds", integer()}, {"path", str()}})},
      {"downwardAPI", obj({{"items", arr(obj({{"path", str()},
                                              {"fieldRef", fieldRef()},
                                              {"resourceFieldRef", resourceFieldRef()},
                                              {"mode", integer()}}))}})},
      {"clusterTrustBundle", any()},
  });
  return obj({
      {"name", str()},
      {"secret", obj({{"secretName", str()},
                      {"items", keyToPaths()},
                      {"defaultMode", integer()},
                      {"optional", boolean()}})},
      {"configMap",
       obj({{"name", str()}, {"items", keyToPaths()}, {"defaultMode", integer()}, {"optional", boolean()}})},
      {"projected", obj({{"sources", arr(projection)}, {"defaultMode", integer()}})},
      {"emptyDir", obj({{"medium", str()}, {"sizeLimit", quantity()}})},
      {"hostPath", obj({{"path", str()}, {"type", str()}})},
      {"persistentVolumeClaim", obj({{"claimName", str()}, {"readOnly", boolean()}})},
      {"image", obj({{"reference", str()}, {"pullPolicy", str()}})},
      {"csi", any()},
      {"ephemeral", any()},
      {"downwardAPI", any()},
      // Kubernetes volume sources Knative never allows; known so that they are
      // reported as disallowed rather than unknown.
      {"awsElasticBlockStore", any()},
      {"gcePersistentDisk", any()},
      {"gitRepo", any()},
      {"nfs", any()},
      {"iscsi", any()},
      {"glusterfs", any()},
      {"rbd", any()},
      {"flexVolume", any()},
      {"cinder", any()},
      {"cephfs", any()},
      {"flocker", any()},
      {"fc", any()},
      {"azureFile", any()},
      {"vsphereVolume", any()},
      {"quobyte", any()},
      {"azureDisk", any()},
      {"photonPersistentDisk", any()},
      {"portworxVolume", any()},
      {"scaleIO", any()},
      {"storageos", any()},
  });
}

Node podSecurityContext() {
  return obj({
      {"seLinuxOptions", any()},
      {"windowsOptions", any()},
      {"runAsUser", integer()},
      {"runAsGroup", integer()},
      {"runAsNonRoot", boolean()},
      {"supplementalGroups", arr(integer())},
      {"supplementalGroupsPolicy", str()},
      {"fsGroup", integer()},
      {"sysctls", arr(obj({{"name", str()}, {"value", str()}}))},
      {"fsGroupChangePolicy", str()},
      {"seccompProfile", seccompProfile()},
      {"appArmorProfile", seccompProfile()},
  });
}

// RevisionSpec: the Kubernetes PodSpec (every field known) plus Knative's four scalars.
Node revisionSpec() {
  static Node n = obj({
      {"containerConcurrency", integer()},
      {"timeoutSeconds", integer()},
      {"responseStartTimeoutSeconds", integer()},
      {"idleTimeoutSeconds", integer()},
      {"volumes", arr(volume())},
      {"initContainers", arr(container())},
      {"containers", arr(container())},
      {"ephemeralContainers", arr(any())},
      {"restartPolicy", str()},
      {"terminationGracePeriodSeconds", integer()},
      {"activeDeadlineSeconds", integer()},
      {"dnsPolicy", str()},
      {"nodeSelector", stringMap()},
      {"serviceAccountName", str()},
      {"serviceAccount", str()},
      {"automountServiceAccountToken", boolean()},
      {"nodeName", str()},
      {"hostNetwork", boolean()},
      {"hostPID", boolean()},
      {"hostIPC", boolean()},
      {"shareProcessNamespace", boolean()},
      {"securityContext", podSecurityContext()},
      {"imagePullSecrets", arr(localRef())},
      {"hostname", str()},
      {"subdomain", str()},
      {"affinity", any()},
      {"schedulerName", str()},
      {"tolerations", arr(any())},
      {"hostAliases", arr(obj({{"ip", str()}, {"hostnames", strings()}}))},
      {"priorityClassName", str()},
      {"priority", integer()},
      {"dnsConfig", any()},
      {"readinessGates", arr(any())},
      {"runtimeClassName", str()},
      {"enableServiceLinks", boolean()},
      {"preemptionPolicy", str()},
      {"overhead", mapOf(quantity())},
      {"topologySpreadConstraints", arr(any())},
      {"setHostnameAsFQDN", boolean()},
      {"os", any()},
      {"hostUsers", boolean()},
      {"schedulingGates", arr(any())},
      {"resourceClaims", arr(any())},
      {"resources", any()},
  });
  return n;
}

Node revisionTemplate() {
  return obj({{"metadata", objectMeta()}, {"spec", revisionSpec()}});
}

Node trafficTarget() {
  static Node n = obj({{"tag", str()},
                       {"revisionName", str()},
                       {"configurationName", str()},
                       {"latestRevision", boolean()},
                       {"percent", integer()},
                       {"url", str()}});
  return n;
}

Node condition() {
  return obj({{"type", str()},
              {"status", str()},
              {"severity", str()},
              {"lastTransitionTime", str()},
              {"reason", str()},
              {"message", str()}});
}

Node addressable() {
  return obj({{"name", str()}, {"url", str()}, {"CACerts", str()}, {"audience", str()}});
}

// Status fields of knative duck.Status plus the kind's own.
Node status(std::initializer_list<std::pair<const std::string, Node>> extra) {
  auto n = std::make_shared<SchemaNode>();
  n->type = SchemaType::kObject;
  n->fields = {
      {"observedGeneration", integer()}, {"conditions", arr(condition())}, {"annotations", stringMap()}};
  for (const auto& [k, v] : extra) n->fields[k] = v;
  return n;
}

Node topLevel(Node spec, Node st) {
  return obj(
      {{"apiVersion", str()}, {"kind", str()}, {"metadata", objectMeta()}, {"spec", spec}, {"status", st}});
}

const std::map<std::string, Node>& kinds() {
  static const std::map<std::string, Node> k = [] {
    Node traffic = arr(trafficTarget());
    std::map<std::string, Node> m;
    m["Service"] = topLevel(obj({{"template", revisionTemplate()}, {"traffic", traffic}}),
                            status({{"url", str()},
                                    {"address", addressable()},
                                    {"traffic", traffic},
                                    {"latestReadyRevisionName", str()},
                                    {"latestCreatedRevisionName", str()}}));
    m["Configuration"] =
        topLevel(obj({{"template", revisionTemplate()}}),
                 status({{"latestReadyRevisionName", str()}, {"latestCreatedRevisionName", str()}}));
    Node container_status = arr(obj({{"name", str()}, {"imageDigest", str()}}));
    m["Revision"] = topLevel(revisionSpec(), status({{"logUrl", str()},
                                                     {"serviceName", str()},
                                                     {"imageDigest", str()},
                                                     {"containerStatuses", container_status},
                                                     {"initContainerStatuses", container_status},
                                                     {"actualReplicas", integer()},
                                                     {"desiredReplicas", integer()}}));
    m["Route"] = topLevel(obj({{"traffic", traffic}}),
                          status({{"url", str()}, {"address", addressable()}, {"traffic", traffic}}));
    // serving.knative.dev/v1beta1 DomainMapping and its cluster-wide claim
    // (api/domain_objects.h validates them).
    Node kref = obj({{"kind", str()},
                     {"namespace", str()},
                     {"name", str()},
                     {"apiVersion", str()},
                     {"group", str()},
                     {"address", str()}});
    m["DomainMapping"] = topLevel(obj({{"ref", kref}, {"tls", obj({{"secretName", str()}})}}),
                                  status({{"url", str()}, {"address", addressable()}}));
    m["ClusterDomainClaim"] = obj({{"apiVersion", str()},
                                   {"kind", str()},
                                   {"metadata", objectMeta()},
                                   {"spec", obj({{"namespace", str()}})}});
    // core/v1 (api/core_objects.h validates them).
    Node meta_fields = objectMeta();
    m["Secret"] = obj({{"apiVersion", str()},
                       {"kind", str()},
                       {"metadata", meta_fields},
                       {"data", stringMap()},
                       {"stringData", stringMap()},
                       {"type", str()},
                       {"immutable", boolean()}});
    m["ConfigMap"] = obj({{"apiVersion", str()},
                          {"kind", str()},
                          {"metadata", meta_fields},
                          {"data", stringMap()},
                          {"binaryData", stringMap()},
                          {"immutable", boolean()}});
    m["Namespace"] = obj({{"apiVersion", str()},
                          {"kind", str()},
                          {"metadata", meta_fields},
                          {"spec", obj({{"finalizers", strings()}})},
                          {"status", obj({{"phase", str()}, {"conditions", arr(any())}})}});
    return m;
  }();
  return k;
}

const char* jsonTypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer";
    case json::value_t::number_float:
      return "number";
    case json::value_t::string:
      return "string";
    case json::value_t::array:
      return "array";
    case json::value_t::object:
      return "object";
    default:
      return "value";
  }
}

bool isIntegral(const json& v) {
  return v.is_number_integer() || v.is_number_unsigned();
}

bool typeMatches(SchemaType t, const json& v) {
  switch (t) {
    case SchemaType::kString:
      return v.is_string();
    case SchemaType::kInteger:
      return isIntegral(v);
    case SchemaType::kNumber:
      return v.is_number();
    case SchemaType::kBoolean:
      return v.is_boolean();
    case SchemaType::kIntOrString:
      return isIntegral(v) || v.is_string();
    case SchemaType::kObject:
    case SchemaType::kMap:
      return v.is_object();
    case SchemaType::kArray:
      return v.is_array();
    case SchemaType::kAny:
      return true;
  }
  return false;
}

void walk(const SchemaNode& node, const json& v, const std::string& path, std::vector<std::string>& unknown,
          std::vector<FieldError>& errors) {
  if (v.is_null()) return;  // null means "unset" for every field
  if (!typeMatches(node.type, v)) {
    errors.push_back({path, std::string("expected ") + schemaTypeName(node.type) + ", got " + jsonTypeName(v),
                      "FieldValueTypeInvalid"});
    return;
  }
  switch (node.type) {
    case SchemaType::kObject:
      for (auto it = v.begin(); it != v.end(); ++it) {
        std::string child = path.empty() ? it.key() : path + "." + it.key();
        const SchemaNode* f = node.field(it.key());
        if (f == nullptr) {
          unknown.push_back(child);
        } else {
          walk(*f, it.value(), child, unknown, errors);
        }
      }
      break;
    case SchemaType::kArray:
      for (size_t i = 0; i < v.size(); ++i)
        walk(*node.items, v[i], path + "[" + std::to_string(i) + "]", unknown, errors);
      break;
    case SchemaType::kMap:
      for (auto it = v.begin(); it != v.end(); ++it)
        walk(*node.items, it.value(), path + "[" + it.key() + "]", unknown, errors);
      break;
    default:
      break;
  }
}

json toOpenApi(const SchemaNode& node) {
  switch (node.type) {
    case SchemaType::kString:
      return {{"type", "string"}};
    case SchemaType::kInteger:
      return {{"type", "integer"}, {"format", "int64"}};
    case SchemaType::kNumber:
      return {{"type", "number"}};
    case SchemaType::kBoolean:
      return {{"type", "boolean"}};
    case SchemaType::kIntOrString:
      return {{"x-kubernetes-int-or-string", true}};
    case SchemaType::kAny:
      return {{"x-kubernetes-preserve-unknown-fields", true}};
    case SchemaType::kArray:
      return {{"type", "array"}, {"items", toOpenApi(*node.items)}};
    case SchemaType::kMap:
      return {{"type", "object"}, {"additionalProperties", toOpenApi(*node.items)}};
    case SchemaType::kObject: {
      json props = json::object();
      for (const auto& [name, child] : node.fields) props[name] = toOpenApi(*child);
      return {{"type", "object"}, {"properties", props}};
    }
  }
  return json::object();
}

}  // namespace

const char* schemaTypeName(SchemaType type) {
  switch (type) {
    case SchemaType::kString:
      return "string";
    case SchemaType::kInteger:
      return "integer";
    case SchemaType::kNumber:
      return "number";
    case SchemaType::kBoolean:
      return "boolean";
    case SchemaType::kIntOrString:
      return "integer or string";
    case SchemaType::kObject:
    case SchemaType::kMap:
      return "object";
    case SchemaType::kArray:
      return "array";
    case SchemaType::kAny:
      return "any";
  }
  return "?";
}

const SchemaNode* schemaForKind(const std::string& kind) {
  auto it = kinds().find(kind);
  return it == kinds().end() ? nullptr : it->second.get();
}

json openApiSchema(const std::string& kind) {
  const SchemaNode* node = schemaForKind(kind);
  if (node == nullptr) return json();
  json schema = toOpenApi(*node);
  bool core = kind == "Secret" || kind == "ConfigMap" || kind == "Namespace";
  std::string group = core ? "" : "serving.knative.dev", version = "v1";
  if (kind == "DomainMapping") version = "v1beta1";
  if (kind == "ClusterDomainClaim") group = "networking.internal.knative.dev", version = "v1alpha1";
  schema["x-kubernetes-group-version-kind"] =
      json::array({{{"group", group}, {"version", version}, {"kind", kind}}});
  return schema;
}

StatusOr<std::vector<std::string>> unknownFields(const std::string& kind, const json& obj) {
  const SchemaNode* node = schemaForKind(kind);
  if (node == nullptr) return invalidArgument("unknown kind \"" + kind + "\"");
  std::vector<std::string> unknown;
  std::vector<FieldError> errors;
  walk(*node, obj, "", unknown, errors);
  if (!errors.empty()) {
    std::string msg = kind + " is invalid: ";
    for (size_t i = 0; i < errors.size(); ++i) {
      if (i > 0) msg += ", ";
      msg += errors[i].field + ": " + errors[i].message;
    }
    return invalidArgument(msg).withFieldErrors(std::move(errors));
  }
  return unknown;
}

}  // namespace knap::api
