// Route hostnames and URLs (KNATIVE-CONTRACT §5.2–5.4): the config-network
// domain-template and tag-template, config-domain selection by labels, the
// cluster-local visibility rule, and the per-host traffic split a Route's
// status describes. The Route reconciler writes status.url / status.traffic
// with these functions and the router builds its Host -> revisions table with
// routingTable(), so both agree on every hostname.
//
// Pure functions of their arguments; thread-safe. Errors are
// kInvalidArgument with a message naming the template or host.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/status.h"

namespace knap::controller {

// The cluster-local domain (svc.<cluster-domain>; knap's cluster domain is fixed).
inline constexpr const char* kClusterLocalDomain = "svc.cluster.local";

// Values a template may reference. A domain template sees Name, Namespace,
// Domain, Annotations and Labels; a tag template sees Tag and Name.
struct TemplateData {
  std::string name;
  std::string ns;
  std::string domain;
  std::string tag;
  std::map<std::string, std::string> annotations;
  std::map<std::string, std::string> labels;
};

enum class TemplateKind { kDomain, kTag };

// Renders the subset of Go text/template knap supports: literal text plus the
// actions {{.Name}} {{.Namespace}} {{.Domain}} {{.Tag}} (per kind, see above),
// {{index .Annotations "key"}} and {{index .Labels "key"}} (domain only; a
// missing key renders ""), with optional spaces inside the braces. Anything
// else (pipelines, functions, trim markers, unknown fields) is refused with
// kInvalidArgument naming the action.
StatusOr<std::string> renderTemplate(const std::string& tmpl, TemplateKind kind, const TemplateData& data);

// Checks a template renders with sample values (for config validation).
Status validateTemplate(const std::string& tmpl, TemplateKind kind);

// config-domain lookup: the entry whose selector matches `labels` with the most
// keys wins, ties go to the lexically smaller domain; an empty selector matches
// everything. Label networking.knative.dev/visibility=cluster-local forces
// svc.cluster.local. No match at all gives svc.cluster.local.
std::string selectDomain(const DomainConfig& domains, const std::map<std::string, std::string>& labels);

// DNS-1123 labels, each <= 63 characters, total <= 253, at least two labels.
Status validateHost(const std::string& host);

struct RouteHost {
  std::string host;            // e.g. "hello.default.localhost" or "tag-hello.default.svc.cluster.local"
  bool cluster_local = false;  // reachable only from inside (pods / internal listener)
  std::string scheme;          // "http" for cluster-local, else network.default-external-scheme
  std::string url() const { return scheme + "://" + host; }
};

// The host of route `name` in namespace `ns` with the route's labels and
// annotations; tag "" is the main host. Cluster-local routes use the default
// template (a custom domain-template is ignored) with domain svc.cluster.local.
// Errors: a template that does not render, or a host that is not a valid DNS
// name (e.g. "<tag>-<name>" longer than 63) — the Route's ErrorConfig case.
StatusOr<RouteHost> routeHost(const Config& config, const std::string& name, const std::string& ns,
                              const std::map<std::string, std::string>& labels,
                              const std::map<std::string, std::string>& annotations,
                              const std::string& tag = "");
// Same, reading name/namespace/labels/annotations from a Route object.
StatusOr<RouteHost> routeHostFor(const Config& config, const nlohmann::json& route,
                                 const std::string& tag = "");

// "<name>.<ns>.svc.cluster.local": status.address host of every Route.
std::string clusterLocalHost(const std::string& name, const std::string& ns);

struct RevisionWeight {
  std::string revision;
  int64_t percent = 0;
  bool operator==(const RevisionWeight&) const = default;
};

// One routable host set of a Route and the revisions it splits traffic over.
struct HostSplit {
  std::vector<std::string> hosts;  // the host first, then aliases (cluster-local short forms)
  bool cluster_local = false;
  std::string tag;                        // "" for the main split
  std::vector<RevisionWeight> revisions;  // merged per revision, order of first appearance
};

// Merges traffic entries that name the same revision (percents summed); a
// single revision gets 100 (KNATIVE-CONTRACT §5.4).
std::vector<RevisionWeight> mergeTargets(const std::vector<RevisionWeight>& targets);

// The routing table for one Route from its status.traffic (resolved revision
// names): the main split on the main host (and, when that host is external, on
// the cluster-local address host as well), and one 100% split per tag.
// Cluster-local hosts also answer "<x>.<ns>.svc" and "<x>.<ns>". Empty when
// status.traffic is empty. Errors as routeHost().
StatusOr<std::vector<HostSplit>> routingTable(const Config& config, const nlohmann::json& route);

// What one host routes to, for the router's Host -> revisions table.
struct HostTarget {
  std::string ns;     // the Route's namespace (Knative-Serving-Namespace)
  std::string route;  // the Route's name
  HostSplit split;
};

// The Host -> target table over all `routes` (full Route objects), built from
// each route's routingTable(). Hostnames must be unique (KNATIVE-CONTRACT
// §5.1): when two routes claim one host, the route created first keeps it
// (creationTimestamp, then namespace/name). Routes whose hosts cannot be
// computed are skipped. Never fails.
std::map<std::string, HostTarget> hostTable(const Config& config, const std::vector<nlohmann::json>& routes);

// One Route's part of the host table, computed once per Route change (the
// data plane keeps one per Route instead of re-reading every Route on each
// change): its routingTable() (empty when its hosts cannot be computed) and
// what orders it against another Route claiming the same host.
struct RouteHosts {
  std::string creation_timestamp, ns, name;
  std::vector<HostSplit> splits;
};
RouteHosts routeHosts(const Config& config, const nlohmann::json& route);
// hostTable() over Routes already reduced to their RouteHosts.
std::map<std::string, HostTarget> hostTable(const std::vector<const RouteHosts*>& routes);

// What the router's table takes from one Route (status.url and
// status.traffic), as text: the reconciler's desired status and the data
// plane's stored copy agree on it exactly when the data plane serves what
// the status says (controller/ingress_status.h).
std::string programFingerprint(const nlohmann::json& route);

}  // namespace knap::controller
