#include "controller/immediate_revision_backend.h"

namespace knap::controller {

void ImmediateRevisionBackend::ensure(const nlohmann::json& revision) {
  std::string ns, name;
  if (revision.is_object() && revision.contains("metadata") && revision["metadata"].is_object()) {
    ns = revision["metadata"].value("namespace", "");
    name = revision["metadata"].value("name", "");
  }
  if (name.empty()) return;
  std::function<void(const std::string&, const std::string&)> cb;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!known_.insert(ns + "/" + name).second) return;
    cb = on_change_;
  }
  if (cb) cb(ns, name);
}

void ImmediateRevisionBackend::remove(const std::string& ns, const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  known_.erase(ns + "/" + name);
}

RevisionHealth ImmediateRevisionBackend::health(const std::string& ns, const std::string& name) {
  RevisionHealth h;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (known_.count(ns + "/" + name) == 0) {
      h.resources_available = {"Unknown", "Deploying", ""};
      h.container_healthy = {"Unknown", "Deploying", ""};
      h.active = {"Unknown", "Deploying", ""};
      return h;
    }
  }
  h.resources_available = {"True", "", ""};
  h.container_healthy = {"True", "", ""};
  h.active = {"False", "NoTraffic", "knapd runs without a runtime (--runtime=none): no pods are started."};
  return h;
}

void ImmediateRevisionBackend::setOnChange(std::function<void(const std::string&, const std::string&)> fn) {
  std::lock_guard<std::mutex> l(mu_);
  on_change_ = std::move(fn);
}

}  // namespace knap::controller
