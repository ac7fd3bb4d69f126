// The hand-written structural schema of the serving.knative.dev/v1 kinds
// (Service, Configuration, Revision, Route), used for strict decoding
// (admission.h unknownFields) and to publish an OpenAPI v3 schema.
//
// Every field of the Kubernetes PodSpec / Container the Knative Go types carry
// is *known* here (so `nodeName` is not "unknown"); validation then rejects the
// fields Knative disallows ("must not set the field(s)"). The schema is built
// once, immutable afterwards; all functions are thread-safe.
#pragma once

#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace knap::api {

enum class SchemaType {
  kString,
  kInteger,
  kNumber,
  kBoolean,
  kIntOrString,  // e.g. probe port, Kubernetes quantities
  kObject,       // fixed set of fields
  kArray,        // items
  kMap,          // string keys, values of `items`
  kAny,          // free-form (preserved, not checked)
};

struct SchemaNode {
  SchemaType type = SchemaType::kAny;
  std::map<std::string, std::shared_ptr<const SchemaNode>> fields;  // kObject
  std::shared_ptr<const SchemaNode> items;                          // kArray, kMap

  const SchemaNode* field(const std::string& name) const {
    auto it = fields.find(name);
    return it == fields.end() ? nullptr : it->second.get();
  }
};

// The schema of a whole object of `kind` ("Service", ...); nullptr if unknown.
const SchemaNode* schemaForKind(const std::string& kind);

// Human name of a schema type as used in error messages: "integer", "string"...
const char* schemaTypeName(SchemaType type);

// An OpenAPI v3 (structural, Kubernetes-flavoured) schema for `kind`, for the
// REST server's /openapi/v3 documents; a null JSON value for an unknown kind.
nlohmann::json openApiSchema(const std::string& kind);

}  // namespace knap::api
