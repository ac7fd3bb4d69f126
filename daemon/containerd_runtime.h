// The containerd Runtime of knapd: PodRunner + ContainerdPodDriver +
// CniNetwork + ContainerdClient, built from knapd's config. Used by
// makeRuntime() for `--runtime containerd` and for `auto` when containerd
// answers. Single-threaded use from main(); the runtime's own threads start
// in start().
#pragma once

#include <memory>
#include <string>

#include "common/clock.h"
#include "common/config.h"
#include "common/status.h"
#include "daemon/runtime_wiring.h"
#include "store/store.h"

namespace knap::daemon {

// True when the pod runner is compiled in (the containerd client was built).
bool containerdRuntimeBuilt();

// Whether containerd answers Version on config.knap.containerd_socket within
// a short timeout (on `clock`) and knapd runs as root (CNI needs it). `why`
// says why not.
bool containerdAvailable(const Config& config, const TimeSource& clock, std::string* why);

// kUnsupported when not built; kInvalidArgument when the registry settings
// are unusable (platform, registry-auth-file, registry-ca-file); otherwise
// never fails (connections are lazy; start() reports containerd errors).
// `events` (borrowed) gets the pod runner's and the image gate's Events.
StatusOr<std::unique_ptr<Runtime>> makeContainerdRuntime(const Config& config, store::Store& store,
                                                         TimeSource& clock, EventRecorder& events);

}  // namespace knap::daemon
