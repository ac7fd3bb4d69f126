#include "tests/fakes/fake_revision_backend.h"

namespace knap::testing {

using controller::RevisionHealth;

void FakeRevisionBackend::ensure(const nlohmann::json& revision) {
  std::string id = revision["metadata"].value("namespace", "") + "/" + revision["metadata"].value("name", "");
  std::lock_guard<std::mutex> l(mu_);
  ensured_.push_back(id);
  last_ensured_[id] = revision;
}

void FakeRevisionBackend::remove(const std::string& ns, const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  removed_.push_back(ns + "/" + name);
  health_.erase(ns + "/" + name);
}

RevisionHealth FakeRevisionBackend::health(const std::string& ns, const std::string& name) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = health_.find(ns + "/" + name);
  return it == health_.end() ? defaultHealth() : it->second;
}

void FakeRevisionBackend::setOnChange(std::function<void(const std::string&, const std::string&)> fn) {
  std::lock_guard<std::mutex> l(mu_);
  on_change_ = std::move(fn);
}

void FakeRevisionBackend::setHealth(const std::string& ns, const std::string& name, const RevisionHealth& h) {
  std::function<void(const std::string&, const std::string&)> cb;
  {
    std::lock_guard<std::mutex> l(mu_);
    health_[ns + "/" + name] = h;
    cb = on_change_;
  }
  if (cb) cb(ns, name);
}

void FakeRevisionBackend::setReady(const std::string& ns, const std::string& name,
                                   const std::string& digest) {
  setHealth(ns, name, readyHealth(digest));
}

void FakeRevisionBackend::setFailed(const std::string& ns, const std::string& name, const std::string& reason,
                                    const std::string& message) {
  RevisionHealth h;
  h.resources_available = {"Unknown", "Deploying", ""};
  h.container_healthy = {"False", reason, message};
  h.active = {"Unknown", "Queued", ""};
  setHealth(ns, name, h);
}

RevisionHealth FakeRevisionBackend::defaultHealth() {
  RevisionHealth h;
  h.resources_available = {"Unknown", "Deploying", ""};
  h.container_healthy = {"Unknown", "Deploying", ""};
  h.active = {"Unknown", "Deploying", ""};
  return h;
}

RevisionHealth FakeRevisionBackend::readyHealth(const std::string& digest) {
  RevisionHealth h;
  h.resources_available = {"True", "", ""};
  h.container_healthy = {"True", "", ""};
  h.active = {"True", "", ""};
  h.actual_replicas = 1;
  h.desired_replicas = 1;
  h.image_digest = digest;
  return h;
}

std::vector<std::string> FakeRevisionBackend::ensured() const {
  std::lock_guard<std::mutex> l(mu_);
  return ensured_;
}

std::vector<std::string> FakeRevisionBackend::removed() const {
  std::lock_guard<std::mutex> l(mu_);
  return removed_;
}

nlohmann::json FakeRevisionBackend::lastEnsured(const std::string& ns, const std::string& name) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = last_ensured_.find(ns + "/" + name);
  return it == last_ensured_.end() ? nlohmann::json() : it->second;
}

}  // namespace knap::testing
