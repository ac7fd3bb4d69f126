// DataPlane: wires the router and the autoscaler to the store and the pod
// runtime. It turns stored Routes into the router's RoutingTable, stored
// Revisions into router RevisionConfigs and scaler settings, and connects
// the router's request metrics and cold-request pokes to the ScalerDriver,
// whose decisions go to the runtime's ScaleTarget.
//
// Threading: store events only mark work dirty (never block the store's
// writer); one sync thread rebuilds from the store. The ScalerTicker runs on
// its own thread. setEndpoints() may be called from any thread.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/config.h"
#include "common/event_recorder.h"
#include "common/status.h"
#include "router/router.h"
#include "scaler/driver.h"
#include "store/store.h"

namespace knap::daemon {

class DataPlane {
 public:
  // pods/scale: the runtime's view of ready pods and where scale decisions go.
  // `events` (borrowed) gets the autoscaler's scaling Events. `router_fd` >= 0:
  // an already-listening socket (socket activation, common/listen_fds.h)
  // the router serves instead of binding knap.router-listen; owned from here on.
  DataPlane(const Config& config, store::Store& store, const TimeSource& clock, scaler::PodCounter& pods,
            scaler::ScaleTarget& scale, EventRecorder& events, int router_fd = -1);
  ~DataPlane();

  // Binds the router's listeners and starts the sync and ticker threads.
  // kInvalidArgument for a bad listen address, kUnavailable when a port is taken.
  Status start();
  // SIGTERM: the router stops accepting and lets in-flight requests (held
  // ones too: the scaler and runtime keep running meanwhile) finish, up to
  // knap.router-drain-timeout (Router::drain). Call before stop().
  void drain();
  void stop();  // idempotent

  router::Router& router() { return *router_; }
  scaler::ScalerDriver& scaler() { return *driver_; }

  // The ready pod endpoints of revision "ns/name" changed (from the runtime);
  // `wake` is how the revision last woke from zero (router::WakeInfo).
  // `version` > 0: a list older than the newest applied one is dropped
  // (Router::setEndpoints); 0 always applies.
  void setEndpoints(const std::string& revision, const std::vector<router::Endpoint>& endpoints,
                    const router::WakeInfo& wake = {}, uint64_t version = 0);
  // The revision's warm pool changed (from the runtime): router metrics.
  void setWarmPool(const std::string& revision, const router::WarmPoolStats& pool);

 private:
  void onStoreEvent(const store::Event& event);
  void syncLoop();
  void syncRoutes();
  void syncRevisions();

  const Config& config_;
  store::Store& store_;
  const TimeSource& clock_;
  std::unique_ptr<router::Router> router_;
  std::unique_ptr<scaler::ScalerDriver> driver_;
  std::unique_ptr<scaler::ScalerTicker> ticker_;
  Status init_status_;  // a bad listen address found in the constructor, reported by start()
  int listener_id_ = -1;
  int router_fd_ = -1;

  std::mutex mu_;
  std::condition_variable cv_;
  bool routes_dirty_ = true;
  bool revisions_dirty_ = true;
  bool stopping_ = false;
  std::thread sync_thread_;
  std::map<std::string, std::string> known_revisions_;  // "ns/name" -> fingerprint of applied settings
};

// "127.0.0.1:8080" -> {address, port}; kInvalidArgument on a malformed value.
StatusOr<std::pair<std::string, int>> splitHostPort(const std::string& listen, const std::string& what);

}  // namespace knap::daemon
