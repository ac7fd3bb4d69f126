// RoutingTable: the router's immutable map from request Host to a traffic
// split (Knative Route + Ingress, §5.1–5.4 of KNATIVE-CONTRACT.md).
//
// The daemon builds a table from plain RouteSpecs (router/ never sees api/
// types) and hands it to Router::setRoutingTable(); the router swaps the
// shared_ptr atomically, so lookups on the request path take no lock and a
// request keeps the snapshot it started with.
//
// Thread safety: a built RoutingTable is immutable except for the per-host
// pick counter (an atomic), so any number of threads may call lookup() and
// pick() concurrently.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace knap::router {

enum class Visibility {
  kExternal,      // served on the external and the internal listener
  kClusterLocal,  // served on the internal listener only
};

// Which listener a request came in on.
enum class ListenerKind { kExternal, kInternal };

struct TrafficSplit {
  std::string revision;  // revision key "namespace/name"
  int percent = 0;       // > 0; a host's splits should sum to 100 (any positive sum works)
  std::string tag;       // optional, for metrics/debugging only
};

struct TagSpec {
  std::string tag;
  std::string revision;                           // "namespace/name"; a tag host routes 100% here
  std::vector<std::string> hosts;                 // e.g. "<tag>-<route>.<ns>.example.com"
  Visibility visibility = Visibility::kExternal;  // effective = most restrictive of route and tag
};

// One Route as the daemon computed it (hosts already rendered from the
// domain and tag templates).
struct RouteSpec {
  std::string namespace_name;
  std::string name;
  Visibility visibility = Visibility::kExternal;
  std::vector<std::string> hosts;  // main hosts, served with `visibility`
  std::vector<std::string>
      internal_hosts;  // always cluster-local: <name>.<ns>.svc.cluster.local, <name>.<ns>.svc, <name>.<ns>
  std::vector<TrafficSplit> traffic;  // main hosts' split
  std::vector<TagSpec> tags;
};

// The flat form: one set of hosts sharing one split (what
// controller::routingTable() yields per HostSplit). RouteSpecs are turned
// into these.
struct HostGroup {
  std::string namespace_name;
  std::string route_name;
  std::string tag;  // "" for the main split
  Visibility visibility = Visibility::kExternal;
  std::vector<std::string> hosts;
  std::vector<TrafficSplit> traffic;
};

// What a host resolves to.
struct HostRoute {
  std::string host;  // normalised (lower case, no port)
  std::string namespace_name;
  std::string route_name;
  std::string tag;  // empty for a main host
  Visibility visibility = Visibility::kExternal;
  std::vector<TrafficSplit> splits;  // revisions merged, percents > 0
  int total_percent = 0;
  mutable std::atomic<uint64_t> picks{0};  // drives the deterministic weighted choice

  // The revision for the next request on this host (see weighted_chooser.h).
  const std::string& pick() const;
};

// Lower-cases `host` and strips a trailing ":port" (and IPv6 brackets' port)
// and a trailing dot. "Foo.Example.COM:8080" -> "foo.example.com".
std::string normalizeHost(std::string_view host);

class RoutingTable {
 public:
  // Builds a table. Fails with InvalidArgument when a split has a negative
  // percent or an empty revision, or a host has no traffic at all. When two
  // routes claim one host the first keeps it and the clash is listed in
  // conflicts() (the controller already decides who owns a host; one bad
  // route must not take every other route down). `network_hash` is the
  // K-Network-Hash the table answers ingress probes with.
  static StatusOr<std::shared_ptr<const RoutingTable>> build(const std::vector<RouteSpec>& routes,
                                                             std::string network_hash = "");
  static StatusOr<std::shared_ptr<const RoutingTable>> build(const std::vector<HostGroup>& groups,
                                                             std::string network_hash = "");
  // An empty table (every host is unknown).
  static std::shared_ptr<const RoutingTable> empty();

  // The route for `host` (any case, port allowed) on `listener`, or nullptr
  // when the host is unknown or cluster-local and `listener` is external.
  const HostRoute* lookup(std::string_view host, ListenerKind listener) const;

  const std::string& networkHash() const { return network_hash_; }
  // "host: route a/b kept, route c/d ignored" for each host claimed twice.
  const std::vector<std::string>& conflicts() const { return conflicts_; }
  size_t size() const { return hosts_.size(); }
  // Every revision some host routes to (sorted, unique).
  std::vector<std::string> revisions() const;

 private:
  std::map<std::string, std::unique_ptr<HostRoute>, std::less<>> hosts_;
  std::string network_hash_;
  std::vector<std::string> conflicts_;
};

}  // namespace knap::router
