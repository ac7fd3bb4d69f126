// Chooses and builds the runtime behind the controllers' RevisionBackend:
// the containerd pod runner, or the control-plane-only backend.
// Single-threaded use from main().
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/config.h"
#include "common/event_recorder.h"
#include "common/status.h"
#include "controller/revision_backend.h"
#include "router/router.h"
#include "scaler/driver.h"
#include "store/store.h"

namespace knap::daemon {

// What a restart of a revision's pods replaces (runner::RestartResult).
struct RestartedPods {
  std::vector<std::string> pods;  // serving pods, replaced one by one; empty: none runs
  int warm_pods = 0;              // warm pods stopped (the pool refills)
};

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual const char* name() const = 0;
  virtual controller::RevisionBackend& backend() = 0;
  // What the autoscaler reads (ready pods) and drives (desired pods).
  virtual scaler::PodCounter& podCounter() = 0;
  virtual scaler::ScaleTarget& scaleTarget() = 0;
  // Called (from any thread) with a revision's ready endpoints whenever they
  // change, and how the revision last woke from zero (its path is "" when
  // the runtime cannot tell). Calls may race and arrive out of order:
  // `version` grows with the time the list was read (0: unversioned), and a
  // receiver must drop a list older than one it already applied.
  using EndpointsListener =
      std::function<void(const std::string& revision, const std::vector<router::Endpoint>& endpoints,
                         const router::WakeInfo& wake, uint64_t version)>;
  virtual void setEndpointsListener(EndpointsListener fn) = 0;
  // Called (from any thread) whenever a revision's warm pool changes.
  using WarmPoolListener =
      std::function<void(const std::string& revision, const router::WarmPoolStats& pool)>;
  virtual void setWarmPoolListener(WarmPoolListener) {}
  // Rolling restart of a revision's pods (runner::PodRunner::restart).
  // kFailedPrecondition for a runtime that runs no pods.
  virtual StatusOr<RestartedPods> restartPods(const std::string& ns, const std::string& name) {
    (void)ns;
    (void)name;
    return failedPrecondition("knapd runs no pods (--runtime none): there is nothing to restart");
  }
  virtual Status start() = 0;  // after the API server is up
  virtual void stop() = 0;
};

// mode: "none", "containerd" or "auto" (containerd when its socket answers).
// `events` (borrowed, outlives the runtime) gets the runtime's Events.
StatusOr<std::unique_ptr<Runtime>> makeRuntime(const std::string& mode, const Config& config,
                                               store::Store& store, TimeSource& clock, EventRecorder& events);

}  // namespace knap::daemon
