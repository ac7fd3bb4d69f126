// IngressStatus: where the Route reconciler learns whether the data plane
// (the router's routing table) serves a Route's current traffic, for the
// Route's IngressReady condition, as Knative's Route waits for its
// KIngress. Without it a Route (and its Service) could say Ready while the
// router still answers "no route for host". Implemented by the daemon's
// DataPlane, which re-queues the Route when it has programmed a new table;
// absent (nullptr) in tests and tools: IngressReady follows the traffic.
//
// Thread safety: called from the controller's worker thread; the
// implementation must be safe against its own writer.
#pragma once

#include <string>

namespace knap::controller {

class IngressStatus {
 public:
  virtual ~IngressStatus() = default;
  // True when the router's table was built from Route ns/name with this
  // programFingerprint() (controller/route_urls.h).
  virtual bool programmed(const std::string& ns, const std::string& name, const std::string& fingerprint) const = 0;
};

}  // namespace knap::controller
