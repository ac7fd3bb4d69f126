// Chooses and builds the runtime behind the controllers' RevisionBackend:
// the containerd pod runner, or the control-plane-only backend.
// Single-threaded use from main().
#pragma once

#include <memory>
#include <string>

#include "common/clock.h"
#include "common/config.h"
#include "common/status.h"
#include "controller/revision_backend.h"
#include "store/store.h"

namespace knap::daemon {

class Runtime {
 public:
  virtual ~Runtime() = default;
  virtual const char* name() const = 0;
  virtual controller::RevisionBackend& backend() = 0;
  virtual Status start() = 0;  // after the API server is up
  virtual void stop() = 0;
};

// mode: "none", "containerd" or "auto" (containerd when its socket answers).
StatusOr<std::unique_ptr<Runtime>> makeRuntime(const std::string& mode, const Config& config, store::Store& store,
                                               TimeSource& clock);

}  // namespace knap::daemon
