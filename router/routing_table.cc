#include "router/routing_table.h"

#include <algorithm>
#include <set>

#include "router/weighted_chooser.h"

namespace knap::router {

const std::string& HostRoute::pick() const {
  const uint64_t ticket = picks.fetch_add(1, std::memory_order_relaxed);
  return splits[chooseSplit(splits, total_percent, ticket)].revision;
}

namespace {

// The part of `host` normalizeHost keeps, before lowercasing.
std::string_view hostCore(std::string_view host) {
  // Trim surrounding whitespace (tolerated in Host values).
  while (!host.empty() && (host.front() == ' ' || host.front() == '\t')) host.remove_prefix(1);
  while (!host.empty() && (host.back() == ' ' || host.back() == '\t')) host.remove_suffix(1);
  if (!host.empty() && host.front() == '[') {
    // IPv6 literal: keep "[...]", drop ":port".
    const size_t close = host.find(']');
    if (close != std::string_view::npos) host = host.substr(0, close + 1);
  } else {
    const size_t colon = host.rfind(':');
    if (colon != std::string_view::npos && host.find(':') == colon) host = host.substr(0, colon);
  }
  if (!host.empty() && host.back() == '.') host.remove_suffix(1);
  return host;
}

char asciiLower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

}  // namespace

std::string normalizeHost(std::string_view host) {
  std::string out(hostCore(host));
  for (char& c : out) c = asciiLower(c);
  return out;
}

namespace {

// Merges splits naming the same revision (§5.4) and drops zero-percent ones.
std::vector<TrafficSplit> mergeSplits(const std::vector<TrafficSplit>& in) {
  std::vector<TrafficSplit> out;
  for (const TrafficSplit& s : in) {
    if (s.percent == 0) continue;
    auto it =
        std::find_if(out.begin(), out.end(), [&](const TrafficSplit& o) { return o.revision == s.revision; });
    if (it == out.end()) {
      out.push_back(s);
    } else {
      it->percent += s.percent;
    }
  }
  return out;
}

Visibility mostRestrictive(Visibility a, Visibility b) {
  return (a == Visibility::kClusterLocal || b == Visibility::kClusterLocal) ? Visibility::kClusterLocal
                                                                            : Visibility::kExternal;
}

}  // namespace

StatusOr<std::shared_ptr<const RoutingTable>> RoutingTable::build(const std::vector<RouteSpec>& routes,
                                                                  std::string network_hash) {
  std::vector<HostGroup> groups;
  for (const RouteSpec& route : routes) {
    HostGroup main{route.namespace_name, route.name, "", route.visibility, route.hosts, route.traffic};
    if (!main.hosts.empty()) groups.push_back(main);
    if (!route.internal_hosts.empty()) {
      main.visibility = Visibility::kClusterLocal;
      main.hosts = route.internal_hosts;
      groups.push_back(std::move(main));
    }
    for (const TagSpec& tag : route.tags) {
      groups.push_back(HostGroup{route.namespace_name,
                                 route.name,
                                 tag.tag,
                                 mostRestrictive(route.visibility, tag.visibility),
                                 tag.hosts,
                                 {{tag.revision, 100, tag.tag}}});
    }
  }
  return build(groups, std::move(network_hash));
}

StatusOr<std::shared_ptr<const RoutingTable>> RoutingTable::build(const std::vector<HostGroup>& groups,
                                                                  std::string network_hash) {
  auto table = std::shared_ptr<RoutingTable>(new RoutingTable());
  table->network_hash_ = std::move(network_hash);
  for (const HostGroup& g : groups) {
    const std::string where =
        "route " + g.namespace_name + "/" + g.route_name + (g.tag.empty() ? "" : " tag " + g.tag);
    const std::vector<TrafficSplit> splits = mergeSplits(g.traffic);
    int total = 0;
    for (const TrafficSplit& s : g.traffic) {
      if (s.revision.empty()) return invalidArgument(where + ": traffic target without revision");
      if (s.percent < 0) return invalidArgument(where + ": negative percent for " + s.revision);
      total += s.percent;
    }
    if (total <= 0) return invalidArgument(where + ": no traffic (all percents are 0)");
    for (const std::string& raw_host : g.hosts) {
      const std::string host = normalizeHost(raw_host);
      if (host.empty()) return invalidArgument(where + ": empty host");
      auto it = table->hosts_.find(host);
      if (it != table->hosts_.end()) {
        const HostRoute& other = *it->second;
        if (other.namespace_name != g.namespace_name || other.route_name != g.route_name ||
            other.tag != g.tag) {
          table->conflicts_.push_back(host + ": route " + other.namespace_name + "/" + other.route_name +
                                      " kept, " + where + " ignored");
        }
        continue;
      }
      auto entry = std::make_unique<HostRoute>();
      entry->host = host;
      entry->namespace_name = g.namespace_name;
      entry->route_name = g.route_name;
      entry->tag = g.tag;
      entry->visibility = g.visibility;
      entry->splits = splits;
      entry->total_percent = total;
      table->hosts_.emplace(host, std::move(entry));
    }
  }
  return std::shared_ptr<const RoutingTable>(std::move(table));
}

std::shared_ptr<const RoutingTable> RoutingTable::empty() {
  return std::shared_ptr<const RoutingTable>(new RoutingTable());
}

const HostRoute* RoutingTable::lookup(std::string_view host, ListenerKind listener) const {
  // (Normalised on the stack: no allocation per request for a usual host.)
  const std::string_view core = hostCore(host);
  char buf[256];
  std::string spill;
  std::string_view key;
  if (core.size() <= sizeof buf) {
    for (size_t i = 0; i < core.size(); ++i) buf[i] = asciiLower(core[i]);
    key = std::string_view(buf, core.size());
  } else {
    spill = normalizeHost(host);
    key = spill;
  }
  auto it = hosts_.find(key);
  if (it == hosts_.end()) return nullptr;
  const HostRoute* route = it->second.get();
  if (route->visibility == Visibility::kClusterLocal && listener != ListenerKind::kInternal) {
    return nullptr;
  }
  return route;
}

std::vector<std::string> RoutingTable::revisions() const {
  std::set<std::string> out;
  for (const auto& [host, route] : hosts_) {
    for (const TrafficSplit& s : route->splits) out.insert(s.revision);
  }
  return {out.begin(), out.end()};
}

}  // namespace knap::router
