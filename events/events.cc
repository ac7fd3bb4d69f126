#include "events/events.h"

#include "common/json_path.h"

namespace knap::events {

using nlohmann::json;

namespace {}  // namespace

json makeEvent(const ObjectRef& object, EventType type, const std::string& reason, const std::string& message,
               const std::string& component, WallTime now, const std::string& name_suffix) {
  std::string ts = formatRfc3339(now);
  // Kubernetes caps an Event's message at 1024 bytes; keep its start.
  std::string note =
      message.size() > kMaxMessageBytes ? message.substr(0, kMaxMessageBytes - 3) + "..." : message;
  json involved = {{"kind", object.kind}, {"namespace", object.ns}, {"name", object.name}};
  if (!object.api_version.empty()) involved["apiVersion"] = object.api_version;
  if (!object.uid.empty()) involved["uid"] = object.uid;
  return {{"apiVersion", "v1"},
          {"kind", "Event"},
          {"metadata", {{"name", object.name + "." + name_suffix}, {"namespace", object.ns}}},
          {"involvedObject", involved},
          {"reason", reason},
          {"message", note},
          {"type", eventTypeName(type)},
          {"source", {{"component", component}}},
          {"reportingComponent", component},
          {"reportingInstance", "knapd"},
          {"firstTimestamp", ts},
          {"lastTimestamp", ts},
          {"count", 1}};
}

WallTime lastSeen(const json& event) {
  WallTime t{};
  for (const char* f : {"lastTimestamp", "eventTime"}) {
    std::string s = stringAt(event, f);
    if (!s.empty() && parseRfc3339(s, &t)) return t;
  }
  if (event.is_object() && event.contains("metadata")) {
    std::string s = stringAt(event["metadata"], "creationTimestamp");
    if (!s.empty() && parseRfc3339(s, &t)) return t;
  }
  return WallTime{};
}

bool expired(const json& event, WallTime now, Duration ttl) {
  return now - lastSeen(event) > ttl;
}

json toEventsV1(const json& e) {
  json out = {{"apiVersion", "events.k8s.io/v1"}, {"kind", "Event"}};
  if (e.contains("metadata")) out["metadata"] = e["metadata"];
  if (e.contains("involvedObject")) out["regarding"] = e["involvedObject"];
  for (const char* f : {"reason", "type", "action", "reportingInstance"})
    if (e.contains(f)) out[f] = e[f];
  if (e.contains("message")) out["note"] = e["message"];
  std::string controller = stringAt(e, "reportingComponent");
  if (controller.empty() && e.contains("source")) controller = stringAt(e["source"], "component");
  if (!controller.empty()) out["reportingController"] = controller;
  // eventTime is required in events.k8s.io/v1: the first time it was seen.
  std::string first = stringAt(e, "firstTimestamp");
  out["eventTime"] = first.empty() ? json(stringAt(e, "lastTimestamp")) : json(first);
  if (e.contains("source")) out["deprecatedSource"] = e["source"];
  if (e.contains("firstTimestamp")) out["deprecatedFirstTimestamp"] = e["firstTimestamp"];
  if (e.contains("lastTimestamp")) out["deprecatedLastTimestamp"] = e["lastTimestamp"];
  if (e.contains("count")) out["deprecatedCount"] = e["count"];
  return out;
}

namespace {

const char* const kInvolvedFields[] = {"kind",       "namespace",       "name",     "uid",
                                       "apiVersion", "resourceVersion", "fieldPath"};

}  // namespace

const std::map<std::string, std::string>& coreFieldLabels() {
  static const std::map<std::string, std::string> labels = [] {
    std::map<std::string, std::string> m = {{"reason", "reason"},
                                            {"reportingComponent", "reportingComponent"},
                                            {"source", "source.component"},
                                            {"type", "type"}};
    for (const char* f : kInvolvedFields)
      m[std::string("involvedObject.") + f] = std::string("involvedObject.") + f;
    return m;
  }();
  return labels;
}

const std::map<std::string, std::string>& eventsV1FieldLabels() {
  static const std::map<std::string, std::string> labels = [] {
    std::map<std::string, std::string> m = {
        {"reason", "reason"}, {"reportingController", "reportingComponent"}, {"type", "type"}};
    for (const char* f : kInvolvedFields)
      m[std::string("regarding.") + f] = std::string("involvedObject.") + f;
    return m;
  }();
  return labels;
}

}  // namespace knap::events
