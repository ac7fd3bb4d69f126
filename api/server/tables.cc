#include "api/server/tables.h"

#include "api/server/event_handler.h"
#include "common/clock.h"
#include "common/json_path.h"

namespace knap::api {

using nlohmann::json;

IncludeObject parseIncludeObject(const std::string& value) {
  if (value == "None") return IncludeObject::kNone;
  if (value == "Object") return IncludeObject::kObject;
  return IncludeObject::kMetadata;
}

bool acceptsTable(const std::string& accept) {
  return accept.find("as=Table") != std::string::npos;
}

namespace {

json column(const std::string& name, const std::string& type, const std::string& description,
            const std::string& format = "") {
  json c = {
      {"name", name}, {"type", type}, {"format", format}, {"description", description}, {"priority", 0}};
  return c;
}

// The string at a path of object keys, "" when absent or not a string/number.
std::string str(const json& obj, std::initializer_list<const char*> path) {
  const json* cur = jsonAt(obj, path);
  if (cur == nullptr) return "";
  if (cur->is_string()) return cur->get<std::string>();
  if (cur->is_number_integer()) return std::to_string(cur->get<int64_t>());
  if (cur->is_number()) return cur->dump();
  if (cur->is_boolean()) return cur->get<bool>() ? "true" : "false";
  return "";
}

const json* readyCondition(const json& obj) {
  if (!obj.contains("status") || !obj["status"].is_object()) return nullptr;
  const json& st = obj["status"];
  if (!st.contains("conditions") || !st["conditions"].is_array()) return nullptr;
  for (const json& c : st["conditions"]) {
    if (c.is_object() && c.value("type", "") == "Ready") return &c;
  }
  return nullptr;
}

std::string condField(const json& obj, const char* field) {
  const json* c = readyCondition(obj);
  if (!c || !c->contains(field) || !(*c)[field].is_string()) return "";
  return (*c)[field].get<std::string>();
}

json cell(const json& obj, std::initializer_list<const char*> path) {
  return str(obj, path);
}

// Number-valued cell; null when unset so kubectl prints <none>... printed blank instead.
json intCell(const json& obj, std::initializer_list<const char*> path) {
  const json* cur = &obj;
  for (const char* k : path) {
    if (!cur->is_object() || !cur->contains(k)) return "";
    cur = &(*cur)[k];
  }
  if (cur->is_number_integer()) return cur->get<int64_t>();
  return "";
}

// kubectl's AGE: the time since metadata.creationTimestamp ("<unknown>" without one).
std::string age(const json& obj) {
  WallTime created;
  if (!parseRfc3339(str(obj, {"metadata", "creationTimestamp"}), &created)) return "<unknown>";
  return humanDuration(std::chrono::system_clock::now() - created);
}

size_t mapSize(const json& obj, const char* field) {
  if (!obj.is_object() || !obj.contains(field) || !obj[field].is_object()) return 0;
  return obj[field].size();
}

// The columns kube-apiserver prints for the core kinds.
json coreColumns(const std::string& k) {
  json cols = json::array();
  cols.push_back(column("Name", "string", "Name must be unique within a namespace.", "name"));
  if (k == "Namespace") cols.push_back(column("Status", "string", "The status of the namespace"));
  if (k == "Secret") cols.push_back(column("Type", "string", "The type of the secret"));
  if (k != "Namespace") cols.push_back(column("Data", "string", "The number of keys in the data"));
  cols.push_back(column("Age", "string", "Time since the object was created"));
  return cols;
}

json coreCells(const std::string& k, const json& obj) {
  json cells = json::array();
  cells.push_back(str(obj, {"metadata", "name"}));
  if (k == "Namespace") cells.push_back(str(obj, {"status", "phase"}));
  if (k == "Secret") cells.push_back(str(obj, {"type"}));
  if (k != "Namespace")
    cells.push_back(static_cast<int64_t>(mapSize(obj, "data") + mapSize(obj, "binaryData")));
  cells.push_back(age(obj));
  return cells;
}

}  // namespace

json tableColumns(const ResourceInfo& info) {
  if (info.core()) return coreColumns(info.kind);
  json cols = json::array();
  cols.push_back(column("Name", "string", "Name must be unique within a namespace.", "name"));
  const std::string& k = info.kind;
  if (k == "ClusterDomainClaim") {
    cols.push_back(column("Namespace", "string", "The namespace whose DomainMappings may use the domain."));
    cols.push_back(column("Age", "string", "Time since the object was created"));
    return cols;
  }
  if (k == "Service" || k == "Route" || k == "DomainMapping")
    cols.push_back(column("URL", "string", "The URL where the service is reachable."));
  if (k == "Service" || k == "Configuration") {
    cols.push_back(column("LatestCreated", "string", "The latest created revision."));
    cols.push_back(column("LatestReady", "string", "The latest ready revision."));
  }
  if (k == "Revision") {
    cols.push_back(column("Config Name", "string", "The configuration that created this revision."));
    cols.push_back(column("Generation", "string", "The configuration generation of this revision."));
  }
  cols.push_back(column("Ready", "string", "Status of the Ready condition."));
  cols.push_back(column("Reason", "string", "Reason of the Ready condition."));
  if (k == "Revision") {
    cols.push_back(column("Actual Replicas", "integer", "Number of running pods."));
    cols.push_back(column("Desired Replicas", "integer", "Number of pods the autoscaler wants."));
  }
  return cols;
}

json tableRow(const ResourceInfo& info, const json& obj, IncludeObject include) {
  json cells = json::array();
  const std::string& k = info.kind;
  if (info.core()) {
    cells = coreCells(k, obj);
  } else if (k == "ClusterDomainClaim") {
    cells.push_back(str(obj, {"metadata", "name"}));
    cells.push_back(str(obj, {"spec", "namespace"}));
    cells.push_back(age(obj));
  } else {
    cells.push_back(str(obj, {"metadata", "name"}));
    if (k == "Service" || k == "Route" || k == "DomainMapping") cells.push_back(cell(obj, {"status", "url"}));
    if (k == "Service" || k == "Configuration") {
      cells.push_back(cell(obj, {"status", "latestCreatedRevisionName"}));
      cells.push_back(cell(obj, {"status", "latestReadyRevisionName"}));
    }
    if (k == "Revision") {
      cells.push_back(str(obj, {"metadata", "labels", labels::kConfiguration}));
      cells.push_back(str(obj, {"metadata", "labels", labels::kConfigurationGeneration}));
    }
    cells.push_back(condField(obj, "status"));
    cells.push_back(condField(obj, "reason"));
    if (k == "Revision") {
      cells.push_back(intCell(obj, {"status", "actualReplicas"}));
      cells.push_back(intCell(obj, {"status", "desiredReplicas"}));
    }
  }
  json row = {{"cells", std::move(cells)}};
  switch (include) {
    case IncludeObject::kNone:
      break;
    case IncludeObject::kMetadata:
      row["object"] = {{"kind", "PartialObjectMetadata"},
                       {"apiVersion", "meta.k8s.io/v1"},
                       {"metadata", obj.contains("metadata") ? obj["metadata"] : json::object()}};
      break;
    case IncludeObject::kObject:
      row["object"] = obj;
      break;
  }
  return row;
}

json makeTable(const ResourceInfo& info, const std::vector<json>& objects, IncludeObject include,
               const std::string& resource_version, bool with_columns) {
  json table = {{"kind", "Table"}, {"apiVersion", "meta.k8s.io/v1"}, {"metadata", json::object()}};
  if (!resource_version.empty()) table["metadata"]["resourceVersion"] = resource_version;
  table["columnDefinitions"] = with_columns ? tableColumns(info) : json(nullptr);
  json rows = json::array();
  for (const json& o : objects) rows.push_back(tableRow(info, o, include));
  table["rows"] = std::move(rows);
  return table;
}

}  // namespace knap::api
