// YAML <-> JSON codecs for API objects (yaml-cpp and nlohmann::json).
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace knap::api {

// Parses one or more YAML documents ("---" separated) into JSON values.
// Scalars keep their YAML type: unquoted ints/floats/bools become JSON numbers
// and booleans, quoted ones stay strings. Errors give line and column.
StatusOr<std::vector<nlohmann::json>> parseYamlDocuments(const std::string& text);
// Parses JSON text; errors give the byte offset and what was expected.
StatusOr<nlohmann::json> parseJson(const std::string& text);
// Emits block-style YAML with keys in the JSON object's order.
std::string toYaml(const nlohmann::json& value);

}  // namespace knap::api
