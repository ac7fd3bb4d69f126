// Small helpers the reconcilers share for reading and shaping API objects held
// as nlohmann::json: metadata accessors, owner references, comma lists, and
// Knative-style conditions (sorted by type, lastTransitionTime kept while the
// status does not change).
//
// Pure functions over values; thread-safe. None of them throws: missing or
// mistyped fields read as empty.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "controller/revision_backend.h"

namespace knap::controller {

using nlohmann::json;

// metadata.<field> as a string, "" when absent or not a string.
std::string metaString(const json& obj, const char* field);
// metadata.generation, 0 when absent.
int64_t generationOf(const json& obj);
// metadata.labels / metadata.annotations as a string map (non-string values skipped).
std::map<std::string, std::string> labelsOf(const json& obj);
std::map<std::string, std::string> annotationsOf(const json& obj);
// One label / annotation, "" when absent.
std::string labelOf(const json& obj, const std::string& key);
std::string annotationOf(const json& obj, const std::string& key);
// Writes a string map as metadata.<field>; an empty map removes the field.
void setStringMap(json& obj, const char* field, const std::map<std::string, std::string>& m);

// A copy of `v` with metadata.resourceVersion removed, for "did anything change" checks.
json withoutResourceVersion(const json& v);
bool sameIgnoringResourceVersion(const json& a, const json& b);

// {apiVersion, kind, name, uid, controller: true, blockOwnerDeletion: true} for `owner`.
json controllerOwnerRef(const json& owner);
// The ownerReferences entry with controller: true, or nullptr.
const json* controllerRefOf(const json& obj);
// True when obj's controller ownerReference points at owner's uid.
bool isControlledBy(const json& obj, const json& owner);

// "a,b,c" <-> {"a","b","c"} (empty items dropped; output sorted).
std::set<std::string> splitList(const std::string& csv);
std::string joinList(const std::set<std::string>& items);

// Reading conditions from a status object.
const json* findCondition(const json& status, const std::string& type);
ConditionState conditionStateOf(const json& status, const std::string& type);  // Unknown if absent

// Builds a conditions array. Each set() keeps the previous lastTransitionTime
// of that type when its status is unchanged, so a steady state rewrites
// nothing. build() sorts by type, as Knative's ConditionSet does.
class ConditionsBuilder {
 public:
  ConditionsBuilder(const json& old_status, WallTime now);
  void set(const std::string& type, const ConditionState& state, const std::string& severity = "");
  // The summary condition from dependents, Knative's living-set rule: the first
  // False wins (its reason/message copied), else the first Unknown, else True.
  static ConditionState aggregate(const std::vector<ConditionState>& dependents);
  json build() const;

 private:
  json old_conditions_;
  std::string now_;
  std::map<std::string, json> conditions_;
};

inline ConditionState conditionTrue(std::string reason = "", std::string message = "") {
  return {"True", std::move(reason), std::move(message)};
}
inline ConditionState conditionFalse(std::string reason, std::string message) {
  return {"False", std::move(reason), std::move(message)};
}
inline ConditionState conditionUnknown(std::string reason, std::string message) {
  return {"Unknown", std::move(reason), std::move(message)};
}

}  // namespace knap::controller
