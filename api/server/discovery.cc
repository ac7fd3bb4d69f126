#include "api/server/discovery.h"

#include <cstdio>
#include <functional>
#include <map>

#include "api/resources.h"
#include "api/schema.h"
#include "api/server/placeholder_kinds.h"

namespace knap::api {

using nlohmann::json;

namespace {

// The verbs the REST handler accepts on a collection and its items: no create
// where the handler answers 405 (Revisions come from their Configuration).
std::vector<std::string> verbsOf(const ResourceInfo& r) {
  std::vector<std::string> v;
  if (r.user_creatable) v.push_back("create");
  for (const char* verb : {"delete", "deletecollection", "get", "list", "patch", "update", "watch"}) {
    if (!r.namespaced && std::string(verb) == "deletecollection") continue;  // as Kubernetes' namespaces
    v.push_back(verb);
  }
  return v;
}
const std::vector<std::string> kStatusVerbs = {"get", "patch", "update"};

json groupVersionEntry() {
  return {{"groupVersion", std::string(kApiVersion)}, {"version", std::string(kVersion)}};
}

json gvk(const ResourceInfo& r) {
  return {{"group", r.group}, {"version", r.version}, {"kind", r.kind}};
}

// The OpenAPI schema name prefix of a kind's group.
std::string schemaPrefix(const ResourceInfo& r) {
  if (r.core()) return "io.k8s.api.core.v1.";
  if (r.group == kNetworkingGroup) return "dev.knative.internal.networking." + r.version + ".";
  return "dev.knative.serving." + r.version + ".";
}

json queryParam(const std::string& name, const std::string& description) {
  return {{"name", name},
          {"in", "query"},
          {"description", description},
          {"schema", {{"type", "string"}, {"uniqueItems", true}}}};
}

json pathParam(const std::string& name) {
  return {{"name", name}, {"in", "path"}, {"required", true}, {"schema", {{"type", "string"}}}};
}

json okResponse(const ResourceInfo& r, const std::string& suffix = "") {
  json schemaRef = {{"$ref", "#/components/schemas/" + schemaPrefix(r) + r.kind + suffix}};
  return {{"200", {{"description", "OK"}, {"content", {{"application/json", {{"schema", schemaRef}}}}}}}};
}

// The kind's structural schema from the one schema model (api/schema.cc), as
// deep as decoding checks it, so `kubectl explain ksvc.spec.template.spec.containers`
// works.
json resourceSchema(const ResourceInfo& r) {
  const std::string& kind = r.kind;
  json full = openApiSchema(kind);
  if (!full.is_null()) {
    full["description"] = r.core() ? kind + " is a Kubernetes core/v1 resource."
                                   : kind + " is a Knative " + r.apiVersion() + " resource.";
    return full;
  }
  json s = {{"type", "object"},
            {"description", kind + " is a Knative serving.knative.dev/v1 resource."},
            {"properties",
             {{"apiVersion", {{"type", "string"}}},
              {"kind", {{"type", "string"}}},
              {"metadata", {{"type", "object"}}},
              {"spec", {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}}},
              {"status", {{"type", "object"}, {"x-kubernetes-preserve-unknown-fields", true}}}}},
            {"x-kubernetes-group-version-kind", json::array({gvk(r)})}};
  return s;
}

// A PUT (replace) or POST (create) of the whole object: its body is the kind.
json writeOperation(const ResourceInfo& r, const std::string& operation_id, const std::string& action) {
  return {
      {"operationId", operation_id},
      {"parameters",
       json::array({queryParam("dryRun", "When present, do not persist."),
                    queryParam("fieldManager", "Name of the actor."),
                    queryParam("fieldValidation", "Ignore, Warn or Strict handling of unknown fields.")})},
      {"requestBody",
       {{"content",
         {{"application/json",
           {{"schema", {{"$ref", "#/components/schemas/" + schemaPrefix(r) + r.kind}}}}}}}}},
      {"responses", okResponse(r)},
      {"x-kubernetes-action", action},
      {"x-kubernetes-group-version-kind", gvk(r)}};
}

json itemOperations(const ResourceInfo& r, bool status) {
  std::string suffix = status ? "Status" : "";
  std::string base = (r.namespaced ? "Namespaced" : "") + r.kind + suffix;
  json params = r.namespaced ? json::array({pathParam("name"), pathParam("namespace")})
                             : json::array({pathParam("name")});
  json ops;
  ops["parameters"] = params;
  ops["get"] = {{"operationId", "read" + base},
                {"responses", okResponse(r)},
                {"x-kubernetes-action", "get"},
                {"x-kubernetes-group-version-kind", gvk(r)}};
  ops["put"] = writeOperation(r, "replace" + base, "put");
  json patchSchema = {{"schema", {{"type", "object"}}}};
  // No application/strategic-merge-patch+json here: kubectl would then try to
  // compute strategic patches from the schema (KUBECTL-WIRE §5).
  ops["patch"] = {
      {"operationId", "patch" + base},
      {"parameters",
       json::array({queryParam("dryRun", "When present, do not persist."),
                    queryParam("fieldManager", "Name of the actor."),
                    queryParam("fieldValidation", "Ignore, Warn or Strict handling of unknown fields."),
                    queryParam("force", "Force apply requests (server-side apply).")})},
      {"requestBody",
       {{"content",
         {{"application/json-patch+json", patchSchema},
          {"application/merge-patch+json", patchSchema},
          {"application/apply-patch+yaml", patchSchema}}}}},
      {"responses", okResponse(r)},
      {"x-kubernetes-action", "patch"},
      {"x-kubernetes-group-version-kind", gvk(r)}};
  if (!status) {
    ops["delete"] = {
        {"operationId", "delete" + base},
        {"parameters", json::array({queryParam("dryRun", "When present, do not persist."),
                                    queryParam("propagationPolicy", "Orphan, Background or Foreground.")})},
        {"responses", {{"200", {{"description", "OK"}}}}},
        {"x-kubernetes-action", "delete"},
        {"x-kubernetes-group-version-kind", gvk(r)}};
  }
  return ops;
}

json collectionOperations(const ResourceInfo& r) {
  json ops;
  ops["parameters"] = r.namespaced ? json::array({pathParam("namespace")}) : json::array();
  ops["get"] = {{"operationId", "list" + r.kind},
                {"parameters", json::array({queryParam("labelSelector", "Label selector."),
                                            queryParam("fieldSelector", "Field selector."),
                                            queryParam("watch", "Watch for changes."),
                                            queryParam("resourceVersion", "Resource version.")})},
                {"responses", okResponse(r, "List")},
                {"x-kubernetes-action", "list"},
                {"x-kubernetes-group-version-kind", gvk(r)}};
  if (!r.user_creatable) return ops;
  ops["post"] = writeOperation(r, "create" + r.kind, "post");
  return ops;
}

}  // namespace

const json& versionDocument() {
  static const json doc = {{"major", "1"},
                           {"minor", kServerMinorVersion},
                           {"gitVersion", kServerGitVersion},
                           {"gitCommit", "knap"},
                           {"gitTreeState", "clean"},
                           {"buildDate", "2026-01-01T00:00:00Z"},
                           {"goVersion", "none"},
                           {"compiler", "g++"},
                           {"platform", "linux/amd64"}};
  return doc;
}

const json& apiGroupDocument() {
  static const json doc = {
      {"kind", "APIGroup"},
      {"apiVersion", "v1"},
      {"name", std::string(kGroup)},
      {"versions",
       json::array({groupVersionEntry(),
                    {{"groupVersion", std::string(kGroup) + "/" + std::string(kDomainMappingVersion)},
                     {"version", std::string(kDomainMappingVersion)}}})},
      {"preferredVersion", groupVersionEntry()}};
  return doc;
}

json singleVersionGroupDocument(const std::string& group, const std::string& version) {
  json v = {{"groupVersion", group + "/" + version}, {"version", version}};
  return json{{"kind", "APIGroup"},
              {"apiVersion", "v1"},
              {"name", group},
              {"versions", json::array({v})},
              {"preferredVersion", v}};
}

const json& networkingGroupDocument() {
  static const json doc =
      singleVersionGroupDocument(std::string(kNetworkingGroup), std::string(kNetworkingVersion));
  return doc;
}

const json& apiGroupListDocument() {
  static const json doc = [] {
    json g = apiGroupDocument();
    g.erase("kind");
    g.erase("apiVersion");
    json e = eventsGroupDocument();
    e.erase("kind");
    e.erase("apiVersion");
    json n = networkingGroupDocument();
    n.erase("kind");
    n.erase("apiVersion");
    json groups = json::array({g, n, e});
    for (const char* name : {"authentication.k8s.io", "authorization.k8s.io"}) {
      json r = *reviewGroupDocument(name);
      r.erase("kind");
      r.erase("apiVersion");
      groups.push_back(r);
    }
    for (const std::string& name : placeholderGroups()) {
      json r = *placeholderGroupDocument(name);
      r.erase("kind");
      r.erase("apiVersion");
      groups.push_back(r);
    }
    return json{{"kind", "APIGroupList"}, {"apiVersion", "v1"}, {"groups", groups}};
  }();
  return doc;
}

const json& eventsGroupDocument() {
  static const json doc = singleVersionGroupDocument("events.k8s.io", "v1");
  return doc;
}

const json* reviewGroupDocument(const std::string& group) {
  static const json authn = singleVersionGroupDocument("authentication.k8s.io", "v1");
  static const json authz = singleVersionGroupDocument("authorization.k8s.io", "v1");
  if (group == "authentication.k8s.io") return &authn;
  if (group == "authorization.k8s.io") return &authz;
  return nullptr;
}

const json* reviewResourceListDocument(const std::string& group) {
  auto list = [](const std::string& gv, const std::string& plural, const std::string& kind) {
    json r = {{"name", plural},
              {"singularName", ""},
              {"namespaced", false},
              {"kind", kind},
              {"verbs", json::array({"create"})}};
    return json{{"kind", "APIResourceList"},
                {"apiVersion", "v1"},
                {"groupVersion", gv},
                {"resources", json::array({r})}};
  };
  static const json authn = list("authentication.k8s.io/v1", "selfsubjectreviews", "SelfSubjectReview");
  static const json authz =
      list("authorization.k8s.io/v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview");
  if (group == "authentication.k8s.io") return &authn;
  if (group == "authorization.k8s.io") return &authz;
  return nullptr;
}

const json& apiResourceListDocument() {
  static const json doc = [] {
    json list = json::array();
    for (const ResourceInfo& r : resources()) {
      list.push_back({{"name", r.plural},
                      {"singularName", r.singular},
                      {"namespaced", true},
                      {"kind", r.kind},
                      {"verbs", verbsOf(r)},
                      {"shortNames", r.short_names},
                      {"categories", json::array({"all", "knative", "serving"})}});
      list.push_back({{"name", r.plural + "/status"},
                      {"singularName", ""},
                      {"namespaced", true},
                      {"kind", r.kind},
                      {"verbs", kStatusVerbs}});
    }
    return json{{"kind", "APIResourceList"},
                {"apiVersion", "v1"},
                {"groupVersion", std::string(kApiVersion)},
                {"resources", list}};
  }();
  return doc;
}

namespace {

json openApiDocument(const std::vector<ResourceInfo>& kinds, const std::string& prefix) {
  json paths = json::object();
  json schemas = json::object();
  for (const ResourceInfo& r : kinds) {
    std::string base =
        r.namespaced ? prefix + "/namespaces/{namespace}/" + r.plural : prefix + "/" + r.plural;
    paths[base] = collectionOperations(r);
    paths[base + "/{name}"] = itemOperations(r, false);
    if (r.has_status) paths[base + "/{name}/status"] = itemOperations(r, true);
    std::string name = schemaPrefix(r) + r.kind;
    schemas[name] = resourceSchema(r);
    json item_ref = {{"$ref", "#/components/schemas/" + name}};
    json items = {{"type", "array"}, {"items", item_ref}};
    schemas[name + "List"] = {{"type", "object"}, {"properties", {{"items", items}}}};
  }
  return json{{"openapi", "3.0.0"},
              {"info", {{"title", "knap"}, {"version", kServerGitVersion}}},
              {"paths", paths},
              {"components", {{"schemas", schemas}}}};
}

std::string hashOf(const json& doc) {
  size_t h = std::hash<std::string>{}(doc.dump());
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016zX", h);
  return std::string(buf);
}

}  // namespace

const json& openApiV3GroupVersionDocument() {
  static const json doc = openApiDocument(resources(), "/apis/" + std::string(kApiVersion));
  return doc;
}

const json& openApiV3CoreDocument() {
  static const json doc = openApiDocument(coreResources(), "/api/v1");
  return doc;
}

const std::string& openApiV3CoreHash() {
  static const std::string hash = hashOf(openApiV3CoreDocument());
  return hash;
}

json coreApiResources() {
  json list = json::array();
  for (const ResourceInfo& r : coreResources()) {
    json e = {{"name", r.plural},
              {"singularName", r.singular},
              {"namespaced", r.namespaced},
              {"kind", r.kind},
              {"verbs", verbsOf(r)}};
    if (!r.short_names.empty()) e["shortNames"] = r.short_names;
    list.push_back(e);
    if (r.has_status) {
      list.push_back({{"name", r.plural + "/status"},
                      {"singularName", ""},
                      {"namespaced", r.namespaced},
                      {"kind", r.kind},
                      {"verbs", kStatusVerbs}});
    }
  }
  return list;
}

namespace {

// The served kinds of one of the custom-domain group versions.
std::vector<ResourceInfo> domainKindsOf(const std::string& group, const std::string& version) {
  std::vector<ResourceInfo> out;
  for (const ResourceInfo& r : domainResources())
    if (r.group == group && r.version == version) out.push_back(r);
  return out;
}

struct DomainDocs {
  json resource_list, openapi;
  std::string hash;
};

const DomainDocs* domainDocs(const std::string& group, const std::string& version) {
  static const std::map<std::string, DomainDocs> docs = [] {
    std::map<std::string, DomainDocs> m;
    for (const ResourceInfo& r : domainResources()) {
      std::string gv = r.apiVersion();
      if (m.count(gv)) continue;
      std::vector<ResourceInfo> kinds = domainKindsOf(r.group, r.version);
      json list = json::array();
      for (const ResourceInfo& k : kinds) {
        json e = {{"name", k.plural},
                  {"singularName", k.singular},
                  {"namespaced", k.namespaced},
                  {"kind", k.kind},
                  {"verbs", verbsOf(k)},
                  {"shortNames", k.short_names},
                  {"categories", k.group == kGroup ? json::array({"all", "knative", "serving"})
                                                   : json::array({"knative-internal", "networking"})}};
        list.push_back(e);
        if (k.has_status) {
          list.push_back({{"name", k.plural + "/status"},
                          {"singularName", ""},
                          {"namespaced", k.namespaced},
                          {"kind", k.kind},
                          {"verbs", kStatusVerbs}});
        }
      }
      DomainDocs d;
      d.resource_list = {
          {"kind", "APIResourceList"}, {"apiVersion", "v1"}, {"groupVersion", gv}, {"resources", list}};
      d.openapi = openApiDocument(kinds, "/apis/" + gv);
      d.hash = hashOf(d.openapi);
      m.emplace(gv, std::move(d));
    }
    return m;
  }();
  auto it = docs.find(group + "/" + version);
  return it == docs.end() ? nullptr : &it->second;
}

}  // namespace

const json* domainResourceListDocument(const std::string& group, const std::string& version) {
  const DomainDocs* d = domainDocs(group, version);
  return d ? &d->resource_list : nullptr;
}

const json* openApiV3DomainDocument(const std::string& group, const std::string& version) {
  const DomainDocs* d = domainDocs(group, version);
  return d ? &d->openapi : nullptr;
}

const std::string* openApiV3DomainHash(const std::string& group, const std::string& version) {
  const DomainDocs* d = domainDocs(group, version);
  return d ? &d->hash : nullptr;
}

namespace {

// Protocol buffers wire format: a length-delimited field (wire type 2).
void protoVarint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void protoBytes(std::string& out, int field, const std::string& bytes) {
  protoVarint(out, (static_cast<uint64_t>(field) << 3) | 2);
  protoVarint(out, bytes.size());
  out += bytes;
}

}  // namespace

const json& openApiV2Document() {
  static const json doc = {{"swagger", "2.0"},
                           {"info", {{"title", "knap"}, {"version", kServerGitVersion}}},
                           {"paths", json::object()}};
  return doc;
}

const std::string& openApiV2Protobuf() {
  // openapi.v2.Document{swagger = 1, info = 2}; Info{title = 1, version = 2}.
  static const std::string bytes = [] {
    std::string info, doc;
    protoBytes(info, 1, "knap");
    protoBytes(info, 2, kServerGitVersion);
    protoBytes(doc, 1, "2.0");
    protoBytes(doc, 2, info);
    return doc;
  }();
  return bytes;
}

const std::string& openApiV3Hash() {
  static const std::string hash = [] {
    size_t h = std::hash<std::string>{}(openApiV3GroupVersionDocument().dump());
    char buf[32];
    std::snprintf(buf, sizeof buf, "%016zX", h);
    return std::string(buf);
  }();
  return hash;
}

const json& openApiV3RootDocument() {
  static const json doc = [] {
    json paths = {{"apis/" + std::string(kApiVersion),
                   {{"serverRelativeURL",
                     "/openapi/v3/apis/" + std::string(kApiVersion) + "?hash=" + openApiV3Hash()}}},
                  {"api/v1", {{"serverRelativeURL", "/openapi/v3/api/v1?hash=" + openApiV3CoreHash()}}}};
    for (const ResourceInfo& r : domainResources()) {
      std::string gv = r.apiVersion();
      paths["apis/" + gv] = {{"serverRelativeURL", "/openapi/v3/apis/" + gv +
                                                       "?hash=" + *openApiV3DomainHash(r.group, r.version)}};
    }
    return json{{"paths", paths}};
  }();
  return doc;
}

}  // namespace knap::api
