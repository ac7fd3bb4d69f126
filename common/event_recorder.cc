#include "common/event_recorder.h"

#include "common/json_path.h"

namespace knap {

namespace {

class NullEventRecorder final : public EventRecorder {
 public:
  void record(const ObjectRef&, EventType, const std::string&, const std::string&,
              const std::string&) override {}
};

}  // namespace

ObjectRef objectRefOf(const nlohmann::json& object) {
  ObjectRef r;
  if (!object.is_object()) return r;
  r.api_version = stringAt(object, "apiVersion");
  r.kind = stringAt(object, "kind");
  auto md = object.find("metadata");
  if (md != object.end() && md->is_object()) {
    r.ns = stringAt(*md, "namespace");
    r.name = stringAt(*md, "name");
    r.uid = stringAt(*md, "uid");
  }
  return r;
}

const char* eventTypeName(EventType t) {
  return t == EventType::kWarning ? "Warning" : "Normal";
}

EventRecorder& nullEventRecorder() {
  static NullEventRecorder recorder;
  return recorder;
}

}  // namespace knap
