// Kubernetes Events as knapd stores and serves them: the core/v1 Event shape
// (the stored form, store kind "Event", in the involved object's namespace),
// its events.k8s.io/v1 view, retention, and the field labels Kubernetes
// offers for Events (what `kubectl describe` selects by). Pure functions;
// thread-safe.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/event_recorder.h"

namespace knap::events {

inline constexpr const char* kStoreKind = "Event";
// How long an Event is kept after it was last seen (kube-apiserver's --event-ttl default).
inline constexpr Duration kDefaultTtl = std::chrono::hours(1);

inline constexpr size_t kMaxMessageBytes = 1024;

// A new core/v1 Event (count 1, first = last = now) named
// "<involved name>.<suffix>" in the involved object's namespace. A message
// longer than kMaxMessageBytes is cut (it may end inside a UTF-8 sequence:
// the JSON writer replaces that).
nlohmann::json makeEvent(const ObjectRef& object, EventType type, const std::string& reason,
                         const std::string& message, const std::string& component, WallTime now,
                         const std::string& name_suffix);

// The time an Event was last seen (lastTimestamp, else eventTime, else
// creationTimestamp); the epoch when none parses.
WallTime lastSeen(const nlohmann::json& event);

// Whether the Event is older than `ttl` at `now`.
bool expired(const nlohmann::json& event, WallTime now, Duration ttl);

// The events.k8s.io/v1 form of a stored core/v1 Event (regarding, note,
// reportingController, deprecatedCount, ...).
nlohmann::json toEventsV1(const nlohmann::json& core_event);

// The field labels Kubernetes offers for Events besides metadata.name and
// metadata.namespace, each mapped to the path in the stored core/v1 Event it
// selects on. core/v1: involvedObject.{kind,namespace,name,uid,apiVersion,
// resourceVersion,fieldPath}, reason, reportingComponent, source, type.
const std::map<std::string, std::string>& coreFieldLabels();
// events.k8s.io/v1: regarding.*, reason, reportingController, type.
const std::map<std::string, std::string>& eventsV1FieldLabels();

}  // namespace knap::events
