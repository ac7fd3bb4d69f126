// RevisionBackend: what the controllers learn about, and ask of, the pods of
// a Revision. The pod runner (runtime/) implements it; tests use
// tests/fakes/fake_revision_backend.h.
//
// Thread safety: implementations must accept calls from the controller's
// worker thread while their own threads report changes; the change callback
// may be invoked from any thread and must not block.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace knap::controller {

struct ConditionState {
  std::string status = "Unknown";  // "True", "False", "Unknown"
  std::string reason;              // CamelCase, e.g. "Deploying", "ExitCode1", "ContainerMissing"
  std::string message;             // what a person can act on
};

// The observed state of a Revision's pods, mapped to Knative's conditions.
struct RevisionHealth {
  ConditionState resources_available;  // ResourcesAvailable
  ConditionState container_healthy;    // ContainerHealthy
  ConditionState active;               // Active (not part of Ready)
  int actual_replicas = 0;
  int desired_replicas = 0;
  std::string image_digest;  // "<repo>@sha256:..." once resolved, else empty
  // Multi-container Revisions: every container's digest ref, in spec order,
  // once all are resolved (else empty: image_digest is containers[0]'s).
  std::vector<std::string> image_digests;
};

class RevisionBackend {
 public:
  virtual ~RevisionBackend() = default;
  // The Revision (full defaulted object) exists or changed: make sure its pods
  // are wanted (initial scale) and tracked. Idempotent; never blocks on I/O.
  virtual void ensure(const nlohmann::json& revision) = 0;
  // The Revision was deleted: stop and clean up its pods. Idempotent.
  virtual void remove(const std::string& ns, const std::string& name) = 0;
  // The latest observed state; a Revision the backend has not seen yet gives
  // Unknown/"Deploying" conditions.
  virtual RevisionHealth health(const std::string& ns, const std::string& name) = 0;
  // Called (from any thread) when health(ns, name) may have changed.
  virtual void setOnChange(std::function<void(const std::string& ns, const std::string& name)> fn) = 0;
};

}  // namespace knap::controller
