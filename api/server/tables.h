// meta.k8s.io/v1 Table rendering for `kubectl get` (Accept `as=Table`), with
// kn-like columns per kind. Pure functions; thread-safe.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "api/resources.h"

namespace knap::api {

enum class IncludeObject { kNone, kMetadata, kObject };

// Parses the includeObject query value ("None", "Object", default Metadata).
IncludeObject parseIncludeObject(const std::string& value);

// True when an Accept header asks for a Table (contains "as=Table").
bool acceptsTable(const std::string& accept);

// The column definitions for `info`'s kind.
nlohmann::json tableColumns(const ResourceInfo& info);
// One row: {"cells":[...],"object":...}.
nlohmann::json tableRow(const ResourceInfo& info, const nlohmann::json& obj, IncludeObject include);
// A complete Table over `objects`. `resource_version` empty = omitted.
// `with_columns` false leaves columnDefinitions null (watch events after the first).
nlohmann::json makeTable(const ResourceInfo& info, const std::vector<nlohmann::json>& objects,
                         IncludeObject include, const std::string& resource_version,
                         bool with_columns = true);

}  // namespace knap::api
