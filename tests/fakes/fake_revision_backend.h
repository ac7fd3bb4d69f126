// FakeRevisionBackend: a RevisionBackend for controller tests. Records every
// ensure()/remove() call and answers health() from values the test sets;
// setHealth() fires the change callback like a real pod runner would.
//
// Thread safety: all methods may be called from any thread; the change
// callback is invoked on the thread calling setHealth(), without locks held.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "controller/revision_backend.h"

namespace knap::testing {

class FakeRevisionBackend final : public controller::RevisionBackend {
 public:
  void ensure(const nlohmann::json& revision) override;
  void remove(const std::string& ns, const std::string& name) override;
  // The health set for ns/name, else `defaultHealth()` (Unknown "Deploying").
  controller::RevisionHealth health(const std::string& ns, const std::string& name) override;
  void setOnChange(std::function<void(const std::string& ns, const std::string& name)> fn) override;

  // Sets what health(ns, name) reports and notifies the controller.
  void setHealth(const std::string& ns, const std::string& name, const controller::RevisionHealth& h);
  // Convenience: RA and CH True, Active True, 1 replica, the given digest.
  void setReady(const std::string& ns, const std::string& name, const std::string& digest = "");
  // Convenience: ContainerHealthy False with reason/message (e.g. "ExitCode1").
  void setFailed(const std::string& ns, const std::string& name, const std::string& reason,
                 const std::string& message);

  static controller::RevisionHealth defaultHealth();
  static controller::RevisionHealth readyHealth(const std::string& digest = "");

  // Calls seen so far.
  std::vector<std::string> ensured() const;  // "ns/name" per ensure() call, in order
  std::vector<std::string> removed() const;  // "ns/name" per remove() call, in order
  nlohmann::json lastEnsured(const std::string& ns, const std::string& name) const;  // null if never

 private:
  mutable std::mutex mu_;
  std::map<std::string, controller::RevisionHealth> health_;
  std::map<std::string, nlohmann::json> last_ensured_;
  std::vector<std::string> ensured_;
  std::vector<std::string> removed_;
  std::function<void(const std::string&, const std::string&)> on_change_;
};

}  // namespace knap::testing
