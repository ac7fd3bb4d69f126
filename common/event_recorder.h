// EventRecorder: how the runtime, the image puller, the scaler driver and the
// controllers report what happened to an object (an image pull, a pod start, a
// crash, a probe failure, a scaling decision), as Kubernetes Events. Only
// daemon/ names the concrete recorder (events/store_event_recorder.h); others
// receive this interface, and tests can pass nullEventRecorder() or a fake.
//
// record() must not block on I/O: callers may hold their own locks.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace knap {

// The object an Event is about (core/v1 ObjectReference).
struct ObjectRef {
  std::string api_version;  // "serving.knative.dev/v1"
  std::string kind;         // "Revision"
  std::string ns;
  std::string name;
  std::string uid;
  bool operator==(const ObjectRef&) const = default;
};

// The reference to a stored object (its apiVersion, kind, metadata.namespace/name/uid).
ObjectRef objectRefOf(const nlohmann::json& object);

enum class EventType { kNormal, kWarning };
const char* eventTypeName(EventType t);  // "Normal" / "Warning"

class EventRecorder {
 public:
  virtual ~EventRecorder() = default;
  // `reason` is a short UpperCamelCase word ("Pulled", "BackOff", "Unhealthy");
  // `component` names the reporter ("kubelet"-like: "knap-runtime", "knap-autoscaler").
  virtual void record(const ObjectRef& object, EventType type, const std::string& reason,
                      const std::string& message, const std::string& component) = 0;
};

// Drops every event.
EventRecorder& nullEventRecorder();

}  // namespace knap
