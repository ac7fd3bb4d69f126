#include "controller/object_util.h"

#include <sstream>

#include "common/json_path.h"

namespace knap::controller {

namespace {
const json& metadataOf(const json& obj) {
  static const json kEmpty = json::object();
  if (!obj.is_object()) return kEmpty;
  auto it = obj.find("metadata");
  if (it == obj.end() || !it->is_object()) return kEmpty;
  return *it;
}

std::map<std::string, std::string> stringMapAt(const json& obj, const char* field) {
  std::map<std::string, std::string> out;
  const json& md = metadataOf(obj);
  auto it = md.find(field);
  if (it == md.end() || !it->is_object()) return out;
  for (auto& [k, v] : it->items()) {
    if (v.is_string()) out[k] = v.get<std::string>();
  }
  return out;
}

// obj[field] as a string, "" when absent or not a string.
std::string stringOf(const json& obj, const char* field) {
  auto it = obj.find(field);
  return it != obj.end() && it->is_string() ? it->get<std::string>() : "";
}
}  // namespace

std::string metaString(const json& obj, const char* field) {
  return stringAt(obj, {"metadata", field});
}

int64_t generationOf(const json& obj) {
  const json& md = metadataOf(obj);
  auto it = md.find("generation");
  if (it == md.end() || !it->is_number_integer()) return 0;
  return it->get<int64_t>();
}

std::map<std::string, std::string> labelsOf(const json& obj) {
  return stringMapAt(obj, "labels");
}
std::map<std::string, std::string> annotationsOf(const json& obj) {
  return stringMapAt(obj, "annotations");
}

std::string labelOf(const json& obj, const std::string& key) {
  auto m = labelsOf(obj);
  auto it = m.find(key);
  return it == m.end() ? "" : it->second;
}

std::string annotationOf(const json& obj, const std::string& key) {
  auto m = annotationsOf(obj);
  auto it = m.find(key);
  return it == m.end() ? "" : it->second;
}

void setStringMap(json& obj, const char* field, const std::map<std::string, std::string>& m) {
  json& md = obj["metadata"];
  if (m.empty()) {
    if (md.is_object()) md.erase(field);
    return;
  }
  json out = json::object();
  for (auto& [k, v] : m) out[k] = v;
  md[field] = std::move(out);
}

json withoutResourceVersion(const json& v) {
  json out = v;
  if (out.is_object() && out.contains("metadata") && out["metadata"].is_object()) {
    out["metadata"].erase("resourceVersion");
  }
  return out;
}

bool sameIgnoringResourceVersion(const json& a, const json& b) {
  // Field by field, without copying either side (a reconcile compares every object it looks at).
  if (!a.is_object() || !b.is_object()) return a == b;
  auto metadataSame = [](const json& ma, const json& mb) {
    if (!ma.is_object() || !mb.is_object()) return ma == mb;
    auto counted = [](const json& m) { return m.size() - (m.contains("resourceVersion") ? 1 : 0); };
    if (counted(ma) != counted(mb)) return false;
    for (auto it = ma.begin(); it != ma.end(); ++it) {
      if (it.key() == "resourceVersion") continue;
      auto other = mb.find(it.key());
      if (other == mb.end() || *other != it.value()) return false;
    }
    return true;
  };
  if (a.size() != b.size()) return false;
  for (auto it = a.begin(); it != a.end(); ++it) {
    auto other = b.find(it.key());
    if (other == b.end()) return false;
    if (it.key() == "metadata" ? !metadataSame(it.value(), *other) : *other != it.value()) return false;
  }
  return true;
}

json controllerOwnerRef(const json& owner) {
  return json{{"apiVersion", owner.value("apiVersion", "serving.knative.dev/v1")},
              {"kind", owner.value("kind", "")},
              {"name", metaString(owner, "name")},
              {"uid", metaString(owner, "uid")},
              {"controller", true},
              {"blockOwnerDeletion", true}};
}

const json* controllerRefOf(const json& obj) {
  const json& md = metadataOf(obj);
  auto it = md.find("ownerReferences");
  if (it == md.end() || !it->is_array()) return nullptr;
  for (const json& ref : *it) {
    if (!ref.is_object()) continue;
    auto controller = ref.find("controller");
    if (controller != ref.end() && controller->is_boolean() && controller->get<bool>()) return &ref;
  }
  return nullptr;
}

bool isControlledBy(const json& obj, const json& owner) {
  const json* ref = controllerRefOf(obj);
  if (ref == nullptr) return false;
  std::string uid = metaString(owner, "uid");
  return !uid.empty() && stringOf(*ref, "uid") == uid;
}

std::set<std::string> splitList(const std::string& csv) {
  std::set<std::string> out;
  std::stringstream ss(csv);
  std::string item;
  while (std::getline(ss, item, ',')) {
    size_t b = item.find_first_not_of(' ');
    size_t e = item.find_last_not_of(' ');
    if (b == std::string::npos) continue;
    out.insert(item.substr(b, e - b + 1));
  }
  return out;
}

std::string joinList(const std::set<std::string>& items) {
  std::string out;
  for (const auto& s : items) {
    if (!out.empty()) out += ",";
    out += s;
  }
  return out;
}

const json* findCondition(const json& status, const std::string& type) {
  if (!status.is_object()) return nullptr;
  auto it = status.find("conditions");
  if (it == status.end() || !it->is_array()) return nullptr;
  for (const json& c : *it) {
    if (c.is_object() && c.value("type", "") == type) return &c;
  }
  return nullptr;
}

ConditionState conditionStateOf(const json& status, const std::string& type) {
  const json* c = findCondition(status, type);
  if (c == nullptr) return {};
  ConditionState s;
  s.status = c->value("status", "Unknown");
  s.reason = c->value("reason", "");
  s.message = c->value("message", "");
  return s;
}

ConditionsBuilder::ConditionsBuilder(const json& old_status, WallTime now) : now_(formatRfc3339(now)) {
  if (old_status.is_object() && old_status.contains("conditions") && old_status["conditions"].is_array()) {
    old_conditions_ = old_status["conditions"];
  } else {
    old_conditions_ = json::array();
  }
}

void ConditionsBuilder::set(const std::string& type, const ConditionState& state,
                            const std::string& severity) {
  json c = {{"type", type}, {"status", state.status}};
  if (!state.reason.empty()) c["reason"] = state.reason;
  if (!state.message.empty()) c["message"] = state.message;
  if (!severity.empty()) c["severity"] = severity;
  std::string ltt = now_;
  for (const json& old : old_conditions_) {
    if (old.is_object() && old.value("type", "") == type && old.value("status", "") == state.status &&
        old.contains("lastTransitionTime") && old["lastTransitionTime"].is_string()) {
      ltt = old["lastTransitionTime"].get<std::string>();
    }
  }
  c["lastTransitionTime"] = ltt;
  conditions_[type] = std::move(c);
}

ConditionState ConditionsBuilder::aggregate(const std::vector<ConditionState>& dependents) {
  for (const auto& d : dependents) {
    if (d.status == "False") return d;
  }
  for (const auto& d : dependents) {
    if (d.status != "True") return {"Unknown", d.reason, d.message};
  }
  return conditionTrue();
}

json ConditionsBuilder::build() const {
  json out = json::array();
  for (const auto& [type, c] : conditions_) out.push_back(c);  // std::map: sorted by type
  return out;
}

}  // namespace knap::controller
