#include "controller/route_urls.h"

#include <algorithm>
#include <tuple>

#include "api/naming.h"
#include "api/resources.h"
#include "common/string_util.h"
#include "controller/object_util.h"

namespace knap::controller {

namespace {

constexpr const char* kDefaultDomainTemplate = "{{.Name}}.{{.Namespace}}.{{.Domain}}";

std::string supportedActions(TemplateKind kind) {
  return kind == TemplateKind::kDomain ? "{{.Name}}, {{.Namespace}}, {{.Domain}}, {{index .Annotations "
                                         "\"key\"}}, {{index .Labels \"key\"}}"
                                       : "{{.Tag}}, {{.Name}}";
}

// Parses `index .Annotations "key"` / `index .Labels "key"`; false if the action has another shape.
bool parseIndex(const std::string& action, std::string* map_name, std::string* key) {
  if (action.rfind("index", 0) != 0) return false;
  std::string rest(trimOws(action.substr(5)));
  if (rest.size() == action.size() - 5) return false;  // "indexX": no space after index
  size_t sp = rest.find_first_of(" \t");
  if (sp == std::string::npos) return false;
  *map_name = rest.substr(0, sp);
  std::string lit(trimOws(rest.substr(sp)));
  if (lit.size() < 2 || lit.front() != '"' || lit.back() != '"') return false;
  std::string inner = lit.substr(1, lit.size() - 2);
  if (inner.find_first_of("\"\\") != std::string::npos) return false;  // no escapes supported
  *key = inner;
  return true;
}

}  // namespace

StatusOr<std::string> renderTemplate(const std::string& tmpl, TemplateKind kind, const TemplateData& data) {
  const char* what = kind == TemplateKind::kDomain ? "domain-template" : "tag-template";
  std::string out;
  size_t pos = 0;
  while (pos < tmpl.size()) {
    size_t open = tmpl.find("{{", pos);
    if (open == std::string::npos) {
      if (tmpl.find("}}", pos) != std::string::npos) {
        return invalidArgument(std::string(what) + " \"" + tmpl + "\": unexpected \"}}\"");
      }
      out += tmpl.substr(pos);
      break;
    }
    out += tmpl.substr(pos, open - pos);
    size_t close = tmpl.find("}}", open + 2);
    if (close == std::string::npos) {
      return invalidArgument(std::string(what) + " \"" + tmpl + "\": unclosed action \"{{\"");
    }
    std::string raw = tmpl.substr(open + 2, close - open - 2);
    std::string action(trimOws(raw));
    auto unsupported = [&]() {
      return invalidArgument(std::string(what) + " \"" + tmpl + "\": unsupported action {{" + raw +
                             "}}; knap supports " + supportedActions(kind));
    };
    if (!raw.empty() && (raw.front() == '-' || raw.back() == '-')) return unsupported();
    std::string map_name, key;
    if (kind == TemplateKind::kDomain && action == ".Name") {
      out += data.name;
    } else if (kind == TemplateKind::kDomain && action == ".Namespace") {
      out += data.ns;
    } else if (kind == TemplateKind::kDomain && action == ".Domain") {
      out += data.domain;
    } else if (kind == TemplateKind::kTag && action == ".Tag") {
      out += data.tag;
    } else if (kind == TemplateKind::kTag && action == ".Name") {
      out += data.name;
    } else if (kind == TemplateKind::kDomain && parseIndex(action, &map_name, &key) &&
               (map_name == ".Annotations" || map_name == ".Labels")) {
      const auto& m = map_name == ".Annotations" ? data.annotations : data.labels;
      auto it = m.find(key);
      if (it != m.end()) out += it->second;
    } else {
      return unsupported();
    }
    pos = close + 2;
  }
  return out;
}

Status validateTemplate(const std::string& tmpl, TemplateKind kind) {
  TemplateData sample{"name", "namespace", "example.com", "tag", {}, {}};
  KNAP_ASSIGN_OR_RETURN(std::string rendered, renderTemplate(tmpl, kind, sample));
  if (kind == TemplateKind::kDomain) {
    if (rendered.find('/') != std::string::npos) {
      return invalidArgument("domain-template \"" + tmpl + "\" must render a host without a path");
    }
    Status st = validateHost(rendered);
    if (!st.isOk()) return invalidArgument("domain-template \"" + tmpl + "\": " + st.message());
  } else if (!api::isDns1123Label(rendered)) {
    return invalidArgument("tag-template \"" + tmpl + "\" must render one DNS label, got \"" + rendered +
                           "\"");
  }
  return Status::ok();
}

std::string selectDomain(const DomainConfig& domains, const std::map<std::string, std::string>& labels) {
  auto vis = labels.find(api::labels::kVisibility);
  if (vis != labels.end() && vis->second == "cluster-local") return kClusterLocalDomain;
  std::string found;
  int specificity = -1;
  for (const DomainEntry& entry : domains.domains) {
    bool matches = true;
    for (const auto& [k, v] : entry.selector) {
      auto it = labels.find(k);
      if (it == labels.end() || it->second != v) {
        matches = false;
        break;
      }
    }
    int n = static_cast<int>(entry.selector.size());
    if (!matches || n < specificity) continue;
    if (n > specificity || entry.domain < found) {
      found = entry.domain;
      specificity = n;
    }
  }
  return found.empty() ? kClusterLocalDomain : found;
}

Status validateHost(const std::string& host) {
  if (host.empty()) return invalidArgument("host is empty");
  if (host.size() > 253) return invalidArgument("host \"" + host + "\" is longer than 253 characters");
  size_t start = 0;
  int labels = 0;
  while (true) {
    size_t dot = host.find('.', start);
    std::string label = host.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!api::isDns1123Label(label)) {
      return invalidArgument(
          "host \"" + host + "\": \"" + label +
          "\" is not a DNS label (lower-case alphanumerics and '-', at most 63 characters)");
    }
    ++labels;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (labels < 2) return invalidArgument("host \"" + host + "\" must have at least two DNS labels");
  return Status::ok();
}

StatusOr<RouteHost> routeHost(const Config& config, const std::string& name, const std::string& ns,
                              const std::map<std::string, std::string>& labels,
                              const std::map<std::string, std::string>& annotations, const std::string& tag) {
  std::string domain = selectDomain(config.domain, labels);
  bool cluster_local = domain == kClusterLocalDomain;
  std::string host_name = name;
  if (!tag.empty()) {
    TemplateData tag_data;
    tag_data.tag = tag;
    tag_data.name = name;
    KNAP_ASSIGN_OR_RETURN(host_name,
                          renderTemplate(config.network.tag_template, TemplateKind::kTag, tag_data));
  }
  TemplateData data{host_name, ns, domain, tag, annotations, labels};
  const std::string& tmpl =
      cluster_local ? std::string(kDefaultDomainTemplate) : config.network.domain_template;
  KNAP_ASSIGN_OR_RETURN(std::string host, renderTemplate(tmpl, TemplateKind::kDomain, data));
  KNAP_RETURN_IF_ERROR(validateHost(host));
  RouteHost out;
  out.host = host;
  out.cluster_local = cluster_local;
  // external-domain-tls: Enabled → the router's HTTPS listener serves external hosts.
  out.scheme = cluster_local                        ? "http"
               : config.network.externalDomainTls() ? "https"
                                                    : config.network.default_external_scheme;
  return out;
}

StatusOr<RouteHost> routeHostFor(const Config& config, const nlohmann::json& route, const std::string& tag) {
  return routeHost(config, metaString(route, "name"), metaString(route, "namespace"), labelsOf(route),
                   annotationsOf(route), tag);
}

std::string clusterLocalHost(const std::string& name, const std::string& ns) {
  return name + "." + ns + "." + kClusterLocalDomain;
}

std::vector<RevisionWeight> mergeTargets(const std::vector<RevisionWeight>& targets) {
  std::vector<RevisionWeight> out;
  for (const auto& t : targets) {
    auto it = std::find_if(out.begin(), out.end(),
                           [&](const RevisionWeight& w) { return w.revision == t.revision; });
    if (it == out.end()) {
      out.push_back(t);
    } else {
      it->percent += t.percent;
    }
  }
  if (out.size() == 1) out[0].percent = 100;
  return out;
}

namespace {
std::vector<std::string> withShortForms(const std::string& host, bool cluster_local) {
  std::vector<std::string> out = {host};
  const std::string suffix = std::string(".") + kClusterLocalDomain;
  if (cluster_local && host.size() > suffix.size() &&
      host.compare(host.size() - suffix.size(), suffix.size(), suffix) == 0) {
    std::string base = host.substr(0, host.size() - suffix.size());  // "<x>.<ns>"
    out.push_back(base + ".svc");
    out.push_back(base);
  }
  return out;
}
}  // namespace

StatusOr<std::vector<HostSplit>> routingTable(const Config& config, const nlohmann::json& route) {
  std::vector<HostSplit> out;
  const nlohmann::json* traffic = nullptr;
  if (route.contains("status") && route["status"].is_object() && route["status"].contains("traffic") &&
      route["status"]["traffic"].is_array()) {
    traffic = &route["status"]["traffic"];
  }
  if (traffic == nullptr || traffic->empty()) return out;

  std::vector<RevisionWeight> all;
  std::map<std::string, std::vector<RevisionWeight>> by_tag;
  for (const auto& t : *traffic) {
    if (!t.is_object()) continue;
    std::string rev = t.value("revisionName", "");
    if (rev.empty()) continue;
    int64_t pct = t.contains("percent") && t["percent"].is_number_integer() ? t["percent"].get<int64_t>() : 0;
    all.push_back({rev, pct});
    std::string tag = t.value("tag", "");
    if (!tag.empty()) by_tag[tag].push_back({rev, 100});
  }
  // Entries with 0% still belong in a tag's split but not in the main one.
  std::vector<RevisionWeight> main;
  for (const auto& w : mergeTargets(all)) {
    if (w.percent > 0) main.push_back(w);
  }

  std::string name = metaString(route, "name");
  std::string ns = metaString(route, "namespace");
  KNAP_ASSIGN_OR_RETURN(RouteHost main_host, routeHostFor(config, route));
  if (!main.empty()) {
    HostSplit split;
    split.hosts = withShortForms(main_host.host, main_host.cluster_local);
    split.cluster_local = main_host.cluster_local;
    split.revisions = main;
    out.push_back(split);
    if (!main_host.cluster_local) {
      HostSplit internal;
      internal.hosts = withShortForms(clusterLocalHost(name, ns), true);
      internal.cluster_local = true;
      internal.revisions = main;
      out.push_back(internal);
    }
  }
  for (const auto& [tag, targets] : by_tag) {
    KNAP_ASSIGN_OR_RETURN(RouteHost h, routeHostFor(config, route, tag));
    HostSplit split;
    split.hosts = withShortForms(h.host, h.cluster_local);
    split.cluster_local = h.cluster_local;
    split.tag = tag;
    split.revisions = {{targets.front().revision, 100}};
    out.push_back(split);
  }
  return out;
}

std::map<std::string, HostTarget> hostTable(const Config& config, const std::vector<nlohmann::json>& routes) {
  std::vector<RouteHosts> each;
  each.reserve(routes.size());
  for (const auto& r : routes) each.push_back(routeHosts(config, r));
  std::vector<const RouteHosts*> ptrs;
  for (const RouteHosts& r : each) ptrs.push_back(&r);
  return hostTable(ptrs);
}

RouteHosts routeHosts(const Config& config, const nlohmann::json& route) {
  RouteHosts out{
      metaString(route, "creationTimestamp"), metaString(route, "namespace"), metaString(route, "name"), {}};
  auto table = routingTable(config, route);
  if (table.isOk()) out.splits = std::move(*table);
  return out;
}

std::map<std::string, HostTarget> hostTable(const std::vector<const RouteHosts*>& routes) {
  std::vector<const RouteHosts*> ordered = routes;
  auto sortKey = [](const RouteHosts* r) { return std::tie(r->creation_timestamp, r->ns, r->name); };
  std::stable_sort(ordered.begin(), ordered.end(),
                   [&](const RouteHosts* a, const RouteHosts* b) { return sortKey(a) < sortKey(b); });
  std::map<std::string, HostTarget> out;
  for (const RouteHosts* r : ordered) {
    for (const HostSplit& split : r->splits) {
      for (const std::string& host : split.hosts) out.try_emplace(host, HostTarget{r->ns, r->name, split});
    }
  }
  return out;
}

std::string programFingerprint(const nlohmann::json& route) {
  if (!route.is_object()) return "";
  auto it = route.find("status");
  if (it == route.end() || !it->is_object()) return "";
  const nlohmann::json* st = &*it;
  std::string out = st->contains("url") && (*st)["url"].is_string() ? (*st)["url"].get<std::string>() : "";
  out += '\n';
  if (st->contains("traffic")) out += (*st)["traffic"].dump();
  return out;
}

}  // namespace knap::controller
