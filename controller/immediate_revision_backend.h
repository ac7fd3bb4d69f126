// ImmediateRevisionBackend: the control-plane-only RevisionBackend used when
// knapd runs with `--runtime=none` (no containerd, no pods). It runs nothing
// and reports every Revision as Ready with 0 replicas and Active=False
// (reason NoTraffic), i.e. "scaled to zero", so Services, Configurations and
// Routes converge to Ready and the API behaves like Knative's. Requests routed
// to such a revision cannot be served. Replace it with the pod runner's
// backend once that exists.
//
// Thread safety: all methods may be called from any thread. The change
// callback is invoked synchronously from ensure()/remove() on the caller's
// thread (only when the answer of health() changes), without locks held.
#pragma once

#include <functional>
#include <mutex>
#include <set>
#include <string>

#include "controller/revision_backend.h"

namespace knap::controller {

class ImmediateRevisionBackend final : public RevisionBackend {
 public:
  void ensure(const nlohmann::json& revision) override;
  void remove(const std::string& ns, const std::string& name) override;
  // Known revisions: ResourcesAvailable/ContainerHealthy True, Active False
  // "NoTraffic", 0 replicas, no image digest. Unknown ones: Unknown "Deploying".
  RevisionHealth health(const std::string& ns, const std::string& name) override;
  void setOnChange(std::function<void(const std::string& ns, const std::string& name)> fn) override;

 private:
  std::mutex mu_;
  std::set<std::string> known_;  // "ns/name"
  std::function<void(const std::string&, const std::string&)> on_change_;
};

}  // namespace knap::controller
