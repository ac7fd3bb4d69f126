// DataPlane: wires the router and the autoscaler to the store and the pod
// runtime. It turns stored Routes (and DomainMappings, controller/
// domain_mappings.h) into the router's RoutingTable, stored
// Revisions into router RevisionConfigs and scaler settings, and connects
// the router's request metrics and cold-request pokes to the ScalerDriver,
// whose decisions go to the runtime's ScaleTarget.
//
// HTTPS (knap.router-tls-listen): the router's CertTable is rebuilt from
// the certificate files (knap.router-tls-certificates-dir, looked at every
// two seconds, reloaded when a file's size or mtime changed) and from
// kubernetes.io/tls Secrets (on every Secret or Route change). Files are the
// operator's and serve every name they carry, wildcards included; a
// Secret's certificate serves only the external hosts routed in the
// Secret's own namespace that it covers (a tenant cannot take another
// namespace's host). Files come first when both name a host. With the
// built-in ACME client (setAcme), the routed external hosts are its host
// list and its directory <data-dir>/acme/certs is read exactly like the
// certificates directory (after it: an operator's file wins).
//
// Threading: store events only note which objects changed (never block the
// store's writer) and wake the sync loop (a common/loop.h Loop on the
// daemon's TimeSource), which brings the router up to date from the store;
// with certificate files or ACME it also runs every two seconds to look at
// the files. The first sync lists every Route, Revision and DomainMapping; after
// that a sync reads and parses only the objects that changed (each Route is
// kept reduced to its hosts and splits, each Revision to a fingerprint of
// what the data plane applied), so a change costs O(changed objects), not
// O(all objects), in the store and in JSON parsing; the routing table is
// then re-assembled from the kept parts. The ScalerTicker is a Loop of its
// own. setEndpoints() may be called from any thread.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "acme/manager.h"
#include "api/revision_settings.h"
#include "common/clock.h"
#include "common/config.h"
#include "common/event_recorder.h"
#include "common/loop.h"
#include "common/status.h"
#include "common/tls.h"
#include "controller/route_urls.h"
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
  // `router_tls_fd`: the same for knap.router-tls-listen.
  DataPlane(const Config& config, store::Store& store, const TimeSource& clock, scaler::PodCounter& pods,
            scaler::ScaleTarget& scale, EventRecorder& events, int router_fd = -1, int router_tls_fd = -1);
  ~DataPlane();

  // Binds the router's listeners and starts the sync and ticker loops.
  // kInvalidArgument for a bad listen address, kUnavailable when a port is taken.
  Status start();
  // SIGTERM: the router stops accepting and lets in-flight requests (held
  // ones too: the scaler and runtime keep running meanwhile) finish, up to
  // knap.router-drain-timeout (Router::drain). Call before stop().
  void drain();
  void stop();  // idempotent
  // The ACME certificate keeper (borrowed), before start(); its hosts are
  // the routed external hosts and the served DomainMappings' hosts (those
  // without spec.tls) when network.external-domain-tls is Enabled.
  void setAcme(acme::CertificateManager* acme) { acme_ = acme; }
  // The Route or DomainMapping serving external host `host` (a Route's own
  // host wins over a mapping of the same name), for ACME state changes;
  // nullopt when none does. Any thread.
  std::optional<store::Key> ownerOfHost(const std::string& host) const;

  // Whether the router's table was last built from the Route or
  // DomainMapping `key` with this fingerprint (controller::programFingerprint,
  // controller::domainFingerprint; controller/ingress_status.h). Any thread.
  bool programmed(const store::Key& key, const std::string& fingerprint) const;
  // Called (on the sync loop) for each Route and DomainMapping whose
  // fingerprint the router now serves for the first time (not for a Route
  // whose stored status already says IngressReady); the daemon re-queues
  // it. Before start().
  void setOnProgrammed(std::function<void(const store::Key&)> fn) { on_programmed_ = std::move(fn); }

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

  // One loaded certificate source (a file pair or a Secret) and what it
  // was loaded from, so an unchanged source is not parsed again.
  struct LoadedCert {
    std::string fingerprint;
    std::string error;  // non-empty: unusable (logged once per change)
    tls::ServerCertificate cert;
  };

 private:
  void onStoreEvent(const store::Event& event);
  // One pass of the sync loop; returns when it is next due (file polls).
  MonoTime syncStep();
  // `changed`: "ns/name" of the objects whose store events arrived since the last sync.
  void syncRoutes(const std::set<std::string>& changed_routes, const std::set<std::string>& changed_mappings);
  void syncRevisions(const std::set<std::string>& changed);
  void applyRevision(const std::string& key, const nlohmann::json& rev);
  void forgetRevision(const std::string& key);
  void syncCertificates();
  bool tls_ = false;
  acme::CertificateManager* acme_ = nullptr;
  mutable std::mutex hosts_mu_;
  std::map<std::string, store::Key> host_owners_;  // external host -> Route or DomainMapping
  mutable std::mutex programmed_mu_;
  std::map<std::string, std::string> programmed_;  // Route "ns/name" -> programFingerprint the router serves
  std::map<std::string, std::string> dm_programmed_;  // DomainMapping "ns/name" -> domainFingerprint
  std::function<void(const store::Key&)> on_programmed_;

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
  bool routes_dirty_ = true;
  bool revisions_dirty_ = true;
  bool certs_dirty_ = true;  // a Secret changed
  bool stopping_ = false;
  std::set<std::string> changed_routes_, changed_revisions_, changed_mappings_;  // "ns/name", under mu_
  Loop sync_loop_;
  bool poll_files_ = false;  // certificate files or ACME: look at the files every kCertFilePoll
  std::map<std::string, std::string> known_revisions_;  // "ns/name" -> fingerprint of applied settings
  // Sync loop only:
  MonoTime next_file_poll_{};
  MonoTime next_sync_{};          // the next sync waits until then (syncStep's hold-off)
  bool routes_listed_ = false;    // routes_ holds every Route (false: the next sync lists)
  bool mappings_listed_ = false;  // mappings_ holds every DomainMapping
  // Routes changed since the router last got a table (all of them: after a full list).
  std::set<std::string> unprogrammed_;
  bool unprogrammed_all_ = false;
  bool revisions_listed_ = false;  // known_revisions_ reflects every Revision
  struct RouteEntry {
    controller::RouteHosts hosts;
    std::string fingerprint;     // controller::programFingerprint
    bool ingress_ready = false;  // its stored status says IngressReady True (for this fingerprint)
  };
  std::map<std::string, RouteEntry> routes_;        // "ns/name" -> the Route reduced to what the table needs
  std::map<std::string, nlohmann::json> mappings_;  // "ns/name" -> DomainMapping
  std::map<std::string, std::vector<std::string>> external_hosts_;  // namespace -> routed external hosts
  std::map<std::string, LoadedCert> file_certs_;                    // "<dir>/<name>" -> loaded pair
  std::map<std::string, LoadedCert> secret_certs_;                  // "ns/name" -> loaded Secret
  std::string certs_applied_;                                       // fingerprint of the table the router has
  std::string dir_error_;           // last error reading the certificate directory
  bool secret_certs_stale_ = true;  // Secrets changed since they were last listed
};

// The scaler's settings of a Revision: its settings model mapped into the
// scaler's plain values; `reachable` false for routingState "reserve".
scaler::ScalerSettings toScalerSettings(const api::RevisionSettings& settings, bool reachable);

// "127.0.0.1:8080" -> {address, port}; kInvalidArgument on a malformed value.
StatusOr<std::pair<std::string, int>> splitHostPort(const std::string& listen, const std::string& what);

}  // namespace knap::daemon
