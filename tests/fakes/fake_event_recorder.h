// FakeEventRecorder: keeps every Event it is given, for unit tests of the
// components that report Events (pod runner, image gate, scaler driver).
// Thread-safe.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "common/event_recorder.h"

namespace knap::testing {

class FakeEventRecorder final : public EventRecorder {
 public:
  struct Recorded {
    ObjectRef object;
    EventType type;
    std::string reason, message, component;
  };
  void record(const ObjectRef& object, EventType type, const std::string& reason, const std::string& message,
              const std::string& component) override {
    std::lock_guard<std::mutex> l(mu_);
    recorded_.push_back({object, type, reason, message, component});
  }
  std::vector<Recorded> all() {
    std::lock_guard<std::mutex> l(mu_);
    return recorded_;
  }
  std::vector<Recorded> byReason(const std::string& reason) {
    std::vector<Recorded> out;
    for (Recorded& r : all())
      if (r.reason == reason) out.push_back(std::move(r));
    return out;
  }
  std::vector<std::string> reasons() {
    std::vector<std::string> out;
    for (const Recorded& r : all()) out.push_back(r.reason);
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<Recorded> recorded_;
};

}  // namespace knap::testing
