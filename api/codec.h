// YAML/JSON -> JSON decoding with budgets, and JSON -> YAML emitting, for API
// objects. YAML is read with libfyaml's event parser and JSON with nlohmann's
// SAX parser; both feed one builder that enforces DecodeLimits (see
// docs/decisions.md, "Untrusted YAML and JSON"). Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/status.h"

namespace knap::api {

// What one decode may cost. A violation is kInvalidArgument naming the field
// path ("field \"spec.template\": nests deeper than 64 levels").
struct DecodeLimits {
  size_t max_depth = 64;                // nested mappings/sequences/objects/arrays
  size_t max_scalar_bytes = 1 << 20;    // one string, key or scalar
  size_t max_nodes = 200000;            // values built, alias expansions included
  size_t max_aliases = 10000;           // YAML alias references
  size_t max_document_bytes = 3 << 20;  // checkDocumentSize: Kubernetes' 3 MiB request limit
};

// Parses one or more YAML documents ("---" separated) into JSON values.
// Scalars keep their YAML type: unquoted ints/floats/bools become JSON numbers
// and booleans, quoted ones stay strings. Errors give line and column.
StatusOr<std::vector<nlohmann::json>> parseYamlDocuments(const std::string& text,
                                                         const DecodeLimits& limits = {});
// Parses JSON text; errors give the byte offset and what was expected.
StatusOr<nlohmann::json> parseJson(const std::string& text, const DecodeLimits& limits = {});
// One request body: JSON, or when `yaml` one YAML document (JSON text is YAML too).
StatusOr<nlohmann::json> parseDocument(const std::string& text, bool yaml, const DecodeLimits& limits = {});
// kResourceExhausted when `doc` (e.g. a patch result) has more than max_nodes
// values or more than max_document_bytes of strings and keys.
Status checkDocumentSize(const nlohmann::json& doc, const DecodeLimits& limits = {});
// Emits block-style YAML with keys in the JSON object's order.
std::string toYaml(const nlohmann::json& value);

}  // namespace knap::api
