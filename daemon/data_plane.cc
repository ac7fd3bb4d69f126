#include "daemon/data_plane.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "api/resources.h"
#include "api/revision_settings.h"
#include "common/base64.h"
#include "common/guard.h"
#include "common/json_path.h"
#include "common/log.h"
#include "common/string_util.h"
#include "controller/domain_mappings.h"
#include "controller/object_util.h"
#include "controller/route_urls.h"

namespace knap::daemon {
namespace {

using nlohmann::json;

// obj[name] when obj is an object that has it, else null (stored objects are
// not trusted to have admission's shape).
// How often the certificate directory is looked at for changed files.
constexpr auto kCertFilePoll = std::chrono::seconds(2);
// The longest a sync waits after the previous one (syncStep).
constexpr auto kMaxSyncHoldOff = std::chrono::milliseconds(500);
constexpr off_t kMaxPemBytes = 1 << 20;

// "size:mtime" of a file, "" when it cannot be stat'ed.
std::string fileStamp(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return "";
  return std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

StatusOr<std::string> readPem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return notFound("file " + path + ": " + std::strerror(errno));
  if (st.st_size > kMaxPemBytes) return invalidArgument("file " + path + ": larger than 1 MiB");
  std::ifstream in(path, std::ios::binary);
  if (!in) return unavailable("file " + path + ": cannot be read");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// A certificate served past (or close to) its expiry is logged when loaded.
void warnIfExpiring(const DataPlane::LoadedCert& lc, const std::string& what) {
  if (!lc.error.empty() || lc.cert.not_after == 0) return;
  const int64_t now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  if (lc.cert.not_after <= now) {
    LOG(WARNING) << "router TLS: " << what << " has expired; clients will refuse it until it is replaced";
  } else if (lc.cert.not_after - now < 14 * 24 * 3600) {
    LOG(WARNING) << "router TLS: " << what << " expires in " << (lc.cert.not_after - now) / 3600 << " hours";
  }
}

router::HttpProtocol httpProtocol(const std::string& v) {
  if (v == "Redirected") return router::HttpProtocol::kRedirected;
  if (v == "Disabled") return router::HttpProtocol::kDisabled;
  return router::HttpProtocol::kEnabled;
}

}  // namespace

scaler::ScalerSettings toScalerSettings(const api::RevisionSettings& r, bool reachable) {
  const api::AutoscalingSettings& a = r.autoscaling;
  scaler::ScalerSettings s;
  s.metric = scaler::parseScalingMetric(a.metric).value_or(scaler::ScalingMetric::kConcurrency);
  s.target_value = a.target_value;
  s.total_value = a.total_value;
  s.aggregation =
      scaler::parseAggregation(a.metric_aggregation_algorithm).value_or(scaler::Aggregation::kLinear);
  s.stable_window = a.stable_window;
  s.panic_window_percentage = a.panic_window_percentage;
  s.panic_threshold_percentage = a.panic_threshold_percentage;
  s.max_scale_up_rate = a.max_scale_up_rate;
  s.max_scale_down_rate = a.max_scale_down_rate;
  s.min_scale = a.min_scale;
  s.max_scale = a.max_scale;
  s.initial_scale = a.initial_scale;
  s.activation_scale = a.activation_scale;
  s.scale_down_delay = a.scale_down_delay;
  s.enable_scale_to_zero = a.enable_scale_to_zero;
  s.scale_to_zero_grace_period = a.scale_to_zero_grace_period;
  s.pod_retention_period = a.scale_to_zero_pod_retention_period;
  s.target_burst_capacity = a.target_burst_capacity;
  s.reachable = reachable;
  s.progress_deadline = r.progress_deadline;  // the Revision's progress-deadline, as the pod runner's
  return s;
}

StatusOr<std::pair<std::string, int>> splitHostPort(const std::string& listen, const std::string& what) {
  auto colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return invalidArgument(what + ": \"" + listen + "\" is not host:port");
  }
  std::string host = listen.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  int port = -1;
  try {
    port = std::stoi(listen.substr(colon + 1));
  } catch (...) {
  }
  if (port < 0 || port > 65535) return invalidArgument(what + ": bad port in \"" + listen + "\"");
  return std::make_pair(host, port);
}

DataPlane::DataPlane(const Config& config, store::Store& store, const TimeSource& clock,
                     scaler::PodCounter& pods, scaler::ScaleTarget& scale, EventRecorder& events,
                     int router_fd, int router_tls_fd)
    : config_(config),
      store_(store),
      clock_(clock),
      router_fd_(router_fd),
      sync_loop_(clock, "data plane sync loop") {
  router::RouterOptions options;
  options.external_fd = router_fd;
  tls_ = !config.knap.router_tls_listen.empty() || router_tls_fd >= 0;
  if (tls_) {
    options.tls_fd = router_tls_fd;
    options.http_protocol = httpProtocol(config.network.http_protocol);
    options.tls_default_host = config.knap.router_tls_default_host;
    if (router_tls_fd < 0) {
      auto https = splitHostPort(config.knap.router_tls_listen, "knap.router-tls-listen");
      if (!https.isOk()) {
        init_status_ = https.status();
      } else {
        options.tls_address = https->first;
        options.tls_port = https->second;
      }
    }
  } else if (!config.knap.router_tls_default_host.empty()) {
    LOG(WARNING)
        << "knap.router-tls-default-host is set but knap.router-tls-listen is empty: no HTTPS listener";
  }
  if (!tls_ && config.network.http_protocol != "Enabled") {
    LOG(WARNING) << "network.http-protocol is " << config.network.http_protocol
                 << " but knap.router-tls-listen is empty: Services are served over HTTP";
  }
  // Half the cores for the router's event loops (at least one): on a small
  // machine the pods, and the clients, need the rest. On 2 cores one loop
  // gave a p99 close to nginx's (one worker) where two loops tripled it
  // (docs/benchmarks.md).
  options.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency() / 2));
  options.max_connections = static_cast<int>(config.knap.router_max_connections);
  options.keepalive_idle_timeout = config.knap.router_keepalive_idle_timeout;
  options.tunnel_idle_timeout = config.knap.router_tunnel_idle_timeout;
  // Requests that arrive before the first route sync wait for it (a
  // restarted knapd has not loaded its routes yet), never 404.
  options.startup_hold = config.knap.router_startup_hold;
  auto external = splitHostPort(config.knap.router_listen, "knap.router-listen");
  if (!external.isOk()) {
    init_status_ = external.status();
  } else {
    options.address = external->first;
    options.port = external->second;
  }
  if (!config.knap.router_internal_listen.empty()) {
    auto internal = splitHostPort(config.knap.router_internal_listen, "knap.router-internal-listen");
    if (!internal.isOk()) {
      init_status_ = internal.status();
    } else {
      options.internal_address = internal->first;
      options.internal_port = internal->second;
    }
  }
  if (!config.knap.metrics_listen.empty()) {
    auto admin = splitHostPort(config.knap.metrics_listen, "knap.metrics-listen");
    if (!admin.isOk()) {
      init_status_ = admin.status();
    } else {
      options.admin_address = admin->first;
      options.admin_port = admin->second;
    }
  }
  router_ = std::make_unique<router::Router>(options, clock);
  driver_ = std::make_unique<scaler::ScalerDriver>(router_->metrics(), pods, scale, clock, events);
  // A request that finds its revision at zero pods wakes the autoscaler at
  // once; a frozen warm pod is then thawed on this (the router's) thread.
  router_->on_cold_request = [this, target = &scale](const std::string& revision) {
    driver_->poke(revision);
    target->wakeNow(revision);
  };
  ticker_ = std::make_unique<scaler::ScalerTicker>(*driver_, clock);
}

DataPlane::~DataPlane() {
  stop();
}

Status DataPlane::start() {
  KNAP_RETURN_IF_ERROR(init_status_);
  KNAP_RETURN_IF_ERROR(router_->start());
  listener_id_ = store_.addListener([this](const store::Event& e) { onStoreEvent(e); });
  poll_files_ = tls_ && (!config_.knap.router_tls_certificates_dir.empty() || acme_ != nullptr);
  next_file_poll_ = clock_.monotonic();
  sync_loop_.start([this] { return syncStep(); });
  ticker_->start();
  if (router_fd_ >= 0) {
    LOG(INFO) << "router serving the inherited socket (fd " << router_fd_ << ", port " << router_->port()
              << ")";
  } else {
    LOG(INFO) << "router listening on " << config_.knap.router_listen << " (port " << router_->port() << ")";
  }
  if (tls_) LOG(INFO) << "router HTTPS listener on port " << router_->tlsPort();
  return Status::ok();
}

void DataPlane::drain() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
  }
  router_->drain(config_.knap.router_drain_timeout);
}

void DataPlane::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  if (listener_id_ >= 0) store_.removeListener(listener_id_);
  sync_loop_.stop();
  ticker_->stop();
  router_->stop();
}

void DataPlane::setEndpoints(const std::string& revision, const std::vector<router::Endpoint>& endpoints,
                             const router::WakeInfo& wake, uint64_t version) {
  if (!router_->setEndpoints(revision, endpoints, wake, version)) return;  // stale
  driver_->podsChanged(revision);
}

void DataPlane::setWarmPool(const std::string& revision, const router::WarmPoolStats& pool) {
  router_->setWarmPool(revision, pool);
}

void DataPlane::onStoreEvent(const store::Event& event) {
  const std::string& kind = event.object.key.kind;
  if (kind != "Route" && kind != "Revision" && kind != "DomainMapping" && kind != "Secret") return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (kind == "Secret") {
      certs_dirty_ = true;
      return;
    }
    const std::string key = event.object.key.ns + "/" + event.object.key.name;
    if (kind == "Revision") {
      // Reachability (routingState) is the Revision's own label: a Route
      // change that moves it is a Revision event too.
      changed_revisions_.insert(key);
      revisions_dirty_ = true;
    } else {
      (kind == "Route" ? changed_routes_ : changed_mappings_).insert(key);
      routes_dirty_ = true;
    }
  }
  sync_loop_.wake();
}

MonoTime DataPlane::syncStep() {
  // A sync re-assembles the whole routing table (every Route's hosts): its
  // cost grows with the Routes. Under a storm of changes (1,000 Services
  // created one after another) syncing after each one made the data plane
  // knapd's largest CPU user, quadratic in the Routes. After a sync that took
  // d, the next waits until 3d have passed (at most kMaxSyncHoldOff),
  // gathering the changes of that time into one rebuild: at most a quarter
  // of a core goes to rebuilds, and a change waits at most 3d more
  // (microseconds with few Routes).
  const MonoTime start = clock_.monotonic();
  if (start < next_sync_) return next_sync_;
  bool routes, revisions, certs;
  std::set<std::string> changed_routes, changed_revisions, changed_mappings;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return MonoTime::max();
    routes = routes_dirty_;
    revisions = revisions_dirty_;
    certs = tls_ && certs_dirty_;
    routes_dirty_ = revisions_dirty_ = certs_dirty_ = false;
    changed_routes.swap(changed_routes_);
    changed_revisions.swap(changed_revisions_);
    changed_mappings.swap(changed_mappings_);
  }
  const bool files_due = poll_files_ && start >= next_file_poll_;
  if (files_due) next_file_poll_ = start + kCertFilePoll;
  // Each step is guarded on its own: one that throws (a stored object of a
  // shape no code expected) is logged and the others still run.
  if (revisions)
    runGuarded("data plane: sync revisions", [&] { syncRevisions(changed_revisions); });  // configs first
  if (routes) runGuarded("data plane: sync routes", [&] { syncRoutes(changed_routes, changed_mappings); });
  if (certs) secret_certs_stale_ = true;  // re-list the Secrets; a Route change only re-maps them
  if (tls_ && (certs || routes || files_due)) {
    // After the routes: Secrets serve the routed hosts of their namespace.
    runGuarded("data plane: sync certificates", [this] { syncCertificates(); });
  }
  const MonoTime end = clock_.monotonic();
  next_sync_ = end + std::min<Duration>(3 * (end - start), kMaxSyncHoldOff);
  return poll_files_ ? next_file_poll_ : MonoTime::max();
}

namespace {

// Brings `kept` ("ns/name" -> T) up to date for `kind`: everything listed
// when `listed` is false (then true on success), else only the `changed`
// keys, read one by one (gone: erased). `make` reduces a stored body to T.
// False when the store failed (the next sync lists again).
template <typename T, typename Make>
bool refresh(store::Store& store, const std::string& kind, const std::set<std::string>& changed, bool& listed,
             std::map<std::string, T>& kept, Make make) {
  if (!listed) {
    auto all = store.list(kind, "");
    if (!all.isOk()) {
      LOG(WARNING) << "data plane: cannot list " << kind << "s: " << all.status().message();
      return false;
    }
    kept.clear();
    for (const store::Object& o : *all) kept.emplace(o.key.ns + "/" + o.key.name, make(o.body));
    listed = true;
    return true;
  }
  for (const std::string& key : changed) {
    const size_t slash = key.find('/');
    auto got = store.get(store::Key{kind, key.substr(0, slash), key.substr(slash + 1)});
    if (got.isOk()) {
      kept.insert_or_assign(key, make(got->body));
    } else if (got.status().code() == Code::kNotFound) {
      kept.erase(key);
    } else {
      LOG(WARNING) << "data plane: cannot read " << kind << " " << key << ": " << got.status().message();
      listed = false;
      return false;
    }
  }
  return true;
}

}  // namespace

void DataPlane::syncRoutes(const std::set<std::string>& changed_routes,
                           const std::set<std::string>& changed_mappings) {
  if (!routes_listed_) unprogrammed_all_ = true;
  unprogrammed_.insert(changed_routes.begin(), changed_routes.end());  // until a table with them is applied
  if (!refresh(store_, "Route", changed_routes, routes_listed_, routes_, [this](const json& body) {
        const json& status = valueAt(body, "status");
        const bool ready =
            status.is_object() && controller::conditionStateOf(status, "IngressReady").status == "True";
        return RouteEntry{controller::routeHosts(config_, body), controller::programFingerprint(body), ready};
      })) {
    return;
  }
  std::vector<const controller::RouteHosts*> route_hosts;
  route_hosts.reserve(routes_.size());
  for (const auto& [key, entry] : routes_) route_hosts.push_back(&entry.hosts);
  std::vector<router::HostGroup> groups;
  std::map<std::string, std::vector<std::string>> external_hosts;
  std::map<std::string, store::Key> host_owners;  // external host -> the Route or DomainMapping serving it
  std::vector<std::string> acme_hosts;
  for (const auto& [host, target] : controller::hostTable(route_hosts)) {
    if (!target.split.cluster_local) {
      external_hosts[target.ns].push_back(host);
      host_owners.emplace(host, store::Key{"Route", target.ns, target.route});
      acme_hosts.push_back(host);
    }
    router::HostGroup g;
    g.namespace_name = target.ns;
    g.route_name = target.route;
    g.tag = target.split.tag;
    g.visibility =
        target.split.cluster_local ? router::Visibility::kClusterLocal : router::Visibility::kExternal;
    g.hosts = {host};
    for (const auto& rw : target.split.revisions) {
      if (rw.percent > 0)
        g.traffic.push_back({target.ns + "/" + rw.revision, static_cast<int>(rw.percent), g.tag});
    }
    if (!g.traffic.empty()) groups.push_back(std::move(g));
  }
  // DomainMappings: a plain external host entry per mapped domain with the
  // target Route's main split, after the Routes' own hosts (which win a clash).
  std::optional<std::map<std::string, std::string>> dm_served;  // "ns/name" -> domainFingerprint
  if (refresh(store_, "DomainMapping", changed_mappings, mappings_listed_, mappings_,
              [](const json& body) { return body; })) {
    std::vector<json> dms;
    for (const auto& [key, m] : mappings_) dms.push_back(m);
    dm_served.emplace();
    std::map<std::pair<std::string, std::string>, const controller::RouteHosts*> by_name;
    if (!dms.empty()) {
      for (const auto& [key, entry] : routes_) by_name[{entry.hosts.ns, entry.hosts.name}] = &entry.hosts;
    }
    for (const controller::DomainTarget& t : controller::domainTargets(dms, by_name)) {
      const std::string key = t.ns + "/" + t.host;
      auto m = mappings_.find(key);
      if (m != mappings_.end()) (*dm_served)[key] = controller::domainFingerprint(m->second);
      // A Route's own host keeps its owner (it wins the clash in the table).
      if (host_owners.emplace(t.host, store::Key{"DomainMapping", t.ns, t.host}).second) {
        // Secrets of the mapping's namespace may cover it; the built-in
        // ACME client provisions it unless spec.tls names the user's own
        // certificate (Knative: CertificateNotRequired).
        external_hosts[t.ns].push_back(t.host);
        const json* tls = m != mappings_.end() ? jsonAt(m->second, {"spec", "tls"}) : nullptr;
        if (tls == nullptr || !tls->is_object()) acme_hosts.push_back(t.host);
      }
      router::HostGroup g;
      g.namespace_name = t.ns;
      g.route_name = t.route;
      g.visibility = router::Visibility::kExternal;
      g.hosts = {t.host};
      for (const auto& rw : t.split.revisions) {
        if (rw.percent > 0) g.traffic.push_back({t.ns + "/" + rw.revision, static_cast<int>(rw.percent), ""});
      }
      if (!g.traffic.empty()) groups.push_back(std::move(g));
    }
  }
  auto table = router::RoutingTable::build(groups, std::to_string(store_.currentResourceVersion()));
  if (!table.isOk()) {
    LOG(WARNING) << "data plane: routing table rejected: " << table.status().message();
    return;
  }
  router_->setRoutingTable(*table);
  external_hosts_ = std::move(external_hosts);
  {
    std::lock_guard<std::mutex> lock(hosts_mu_);
    host_owners_ = std::move(host_owners);
  }
  // After host_owners_: a new host's state change looks its owner up.
  if (acme_ != nullptr && config_.network.externalDomainTls()) acme_->setHosts(acme_hosts);
  // The router serves these Routes now: re-queue the ones whose traffic is
  // new, so their IngressReady turns True (controller/ingress_status.h).
  // Only the Routes changed since the last applied table are compared
  // (all of them after a full list).
  std::vector<std::string> changed;
  {
    std::lock_guard<std::mutex> lock(programmed_mu_);
    if (unprogrammed_all_) {
      std::map<std::string, std::string> programmed;  // "ns/name" -> programFingerprint
      for (const auto& [key, entry] : routes_) {
        auto it = programmed_.find(key);
        if (it == programmed_.end() || it->second != entry.fingerprint) changed.push_back(key);
        programmed.emplace(key, entry.fingerprint);
      }
      programmed_ = std::move(programmed);
    } else {
      for (const std::string& key : unprogrammed_) {
        auto entry = routes_.find(key);
        if (entry == routes_.end()) {
          programmed_.erase(key);
          continue;
        }
        auto it = programmed_.find(key);
        if (it == programmed_.end() || it->second != entry->second.fingerprint) {
          changed.push_back(key);
          programmed_[key] = entry->second.fingerprint;
        }
      }
    }
  }
  unprogrammed_all_ = false;
  unprogrammed_.clear();
  // DomainMappings (few): the whole set the table now serves.
  std::vector<std::string> changed_mappings_served;
  if (dm_served) {
    std::lock_guard<std::mutex> lock(programmed_mu_);
    for (const auto& [key, fingerprint] : *dm_served) {
      auto it = dm_programmed_.find(key);
      if (it == dm_programmed_.end() || it->second != fingerprint) changed_mappings_served.push_back(key);
    }
    dm_programmed_ = std::move(*dm_served);
  }
  if (on_programmed_) {
    auto split = [](const std::string& kind, const std::string& key) {
      const size_t slash = key.find('/');
      return store::Key{kind, key.substr(0, slash), key.substr(slash + 1)};
    };
    for (const std::string& key : changed) {
      // A Route whose stored status already says IngressReady for this
      // traffic needs no reconcile (after a restart: every Route).
      if (auto e = routes_.find(key); e != routes_.end() && e->second.ingress_ready) continue;
      on_programmed_(split("Route", key));
    }
    for (const std::string& key : changed_mappings_served) on_programmed_(split("DomainMapping", key));
  }
}

bool DataPlane::programmed(const store::Key& key, const std::string& fingerprint) const {
  std::lock_guard<std::mutex> lock(programmed_mu_);
  const auto& served = key.kind == "DomainMapping" ? dm_programmed_ : programmed_;
  auto it = served.find(key.ns + "/" + key.name);
  return it != served.end() && it->second == fingerprint;
}

std::optional<store::Key> DataPlane::ownerOfHost(const std::string& host) const {
  std::lock_guard<std::mutex> lock(hosts_mu_);
  auto it = host_owners_.find(host);
  if (it == host_owners_.end()) return std::nullopt;
  return it->second;
}

void DataPlane::syncCertificates() {
  // 1. Files: <name>.crt with <name>.key beside it; re-read when either
  // changed. The operator's directory, then the ACME client's.
  std::map<std::string, LoadedCert> files;
  std::vector<std::string> dirs;
  if (!config_.knap.router_tls_certificates_dir.empty())
    dirs.push_back(config_.knap.router_tls_certificates_dir);
  if (acme_ != nullptr) dirs.push_back(acme_->certDir());
  std::vector<std::string> crts;
  std::string dir_error;
  for (const std::string& dir : dirs) {
    std::error_code ec;
    std::vector<std::string> in_dir;
    for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      if (it->path().extension() == ".crt") in_dir.push_back(it->path().string());
    }
    std::sort(in_dir.begin(), in_dir.end());
    crts.insert(crts.end(), in_dir.begin(), in_dir.end());
    if (ec) dir_error += dir + ": " + ec.message() + "; ";
  }
  if (!dir_error.empty() && dir_error_ != dir_error)
    LOG(WARNING) << "router TLS certificate directory " << dir_error;
  dir_error_ = dir_error;
  {
    for (const std::string& crt : crts) {
      const std::string key = crt.substr(0, crt.size() - 4) + ".key";
      const std::string stamp = fileStamp(crt) + "/" + fileStamp(key);
      auto old = file_certs_.find(crt);
      if (old != file_certs_.end() && old->second.fingerprint == stamp) {
        files[crt] = old->second;
        continue;
      }
      LoadedCert lc;
      lc.fingerprint = stamp;
      auto chain = readPem(crt);
      auto pem_key = readPem(key);
      if (!chain.isOk()) {
        lc.error = chain.status().message();
      } else if (!pem_key.isOk()) {
        lc.error = "file " + crt + ": no readable key beside it (" + pem_key.status().message() + ")";
      } else {
        auto cert = tls::loadServerCertificate(*chain, *pem_key, "file " + crt);
        if (cert.isOk()) {
          lc.cert = std::move(*cert);
        } else {
          lc.error = cert.status().message();
        }
      }
      if (!lc.error.empty() && old != file_certs_.end() && old->second.error.empty()) {
        // Mid-replacement (a new key beside the old certificate, as the
        // ACME client's two renames can be seen): keep serving the previous
        // pair until the files agree again (their stamp changes then).
        LOG(WARNING) << "router TLS: " << lc.error << " (the previous certificate is served)";
        LoadedCert keep = old->second;
        keep.fingerprint = stamp;
        files[crt] = std::move(keep);
        continue;
      }
      if (!lc.error.empty()) LOG(WARNING) << "router TLS: " << lc.error << " (not served)";
      warnIfExpiring(lc, "file " + crt);
      files[crt] = std::move(lc);
    }
  }
  file_certs_ = std::move(files);

  // 2. kubernetes.io/tls Secrets (only re-listed after a Secret or Route change).
  if (secret_certs_stale_) {
    secret_certs_stale_ = false;
    std::map<std::string, LoadedCert> secrets;
    auto listed = store_.list("Secret", "");
    if (!listed.isOk()) {
      LOG(WARNING) << "router TLS: cannot list Secrets: " << listed.status().message();
      secrets = secret_certs_;
    } else {
      for (const auto& obj : *listed) {
        const json& body = obj.body;
        if (body.value("type", "") != "kubernetes.io/tls") continue;
        const std::string id = obj.key.ns + "/" + obj.key.name;
        const std::string stamp = std::to_string(obj.resource_version);
        auto old = secret_certs_.find(id);
        if (old != secret_certs_.end() && old->second.fingerprint == stamp) {
          secrets[id] = old->second;
          continue;
        }
        LoadedCert lc;
        lc.fingerprint = stamp;
        const json data = body.value("data", json::object());
        std::string chain, key;
        if (!data.is_object() || !data.value("tls.crt", json()).is_string() ||
            !data.value("tls.key", json()).is_string() ||
            !base64Decode(data["tls.crt"].get<std::string>(), &chain) ||
            !base64Decode(data["tls.key"].get<std::string>(), &key)) {
          lc.error = "Secret " + id + ": data needs base64 tls.crt and tls.key";
        } else {
          auto cert = tls::loadServerCertificate(chain, key, "Secret " + id);
          if (cert.isOk()) {
            lc.cert = std::move(*cert);
          } else {
            lc.error = cert.status().message();
          }
        }
        if (!lc.error.empty()) LOG(WARNING) << "router TLS: " << lc.error << " (not served)";
        warnIfExpiring(lc, "Secret " + id);
        secrets[id] = std::move(lc);
      }
    }
    secret_certs_ = std::move(secrets);
  }

  // 3. The table: files first (every name), then each Secret for the
  // routed external hosts of its namespace it covers.
  std::string fingerprint;
  std::vector<router::CertEntry> entries;
  const std::string acme_prefix = acme_ != nullptr ? acme_->certDir() + "/" : std::string("\0", 1);
  for (bool acme_pass : {false, true}) {  // the operator's files win over ACME's
    for (const auto& [path, lc] : file_certs_) {
      if ((path.rfind(acme_prefix, 0) == 0) != acme_pass) continue;
      fingerprint += path + "=" + lc.fingerprint + ";";
      if (!lc.error.empty()) continue;
      for (const std::string& n : lc.cert.names) entries.push_back({n, lc.cert.ctx, "file " + path});
    }
  }
  for (const auto& [id, lc] : secret_certs_) {
    fingerprint += id + "=" + lc.fingerprint + ";";
    if (!lc.error.empty()) continue;
    auto hosts = external_hosts_.find(id.substr(0, id.find('/')));
    if (hosts == external_hosts_.end()) continue;
    for (const std::string& h : hosts->second) {
      fingerprint += h + ",";
      for (const std::string& n : lc.cert.names) {
        if (tls::nameCovers(n, h)) {
          entries.push_back({h, lc.cert.ctx, "Secret " + id});
          break;
        }
      }
    }
  }
  if (fingerprint == certs_applied_) return;
  certs_applied_ = fingerprint;
  std::vector<std::string> shadowed;
  auto table = router::CertTable::build(std::move(entries), &shadowed);
  for (const std::string& s : shadowed) LOG(WARNING) << "router TLS: " << s;
  LOG(INFO) << "router TLS: serving " << table->size() << " certificate names";
  router_->setCertificates(std::move(table));
}

void DataPlane::syncRevisions(const std::set<std::string>& changed) {
  if (!revisions_listed_) {
    auto revisions = store_.list("Revision", "");
    if (!revisions.isOk()) {
      LOG(WARNING) << "data plane: cannot list revisions: " << revisions.status().message();
      return;
    }
    std::set<std::string> live;
    for (const auto& obj : *revisions) {
      std::string key = obj.key.ns + "/" + obj.key.name;
      applyRevision(key, obj.body);
      live.insert(std::move(key));
    }
    std::vector<std::string> gone;
    for (const auto& [key, fingerprint] : known_revisions_) {
      if (!live.count(key)) gone.push_back(key);
    }
    for (const std::string& key : gone) forgetRevision(key);
    revisions_listed_ = true;
    return;
  }
  // Only the Revisions whose events arrived: one read and parse each.
  for (const std::string& key : changed) {
    const size_t slash = key.find('/');
    auto got = store_.get(store::Key{"Revision", key.substr(0, slash), key.substr(slash + 1)});
    if (got.isOk()) {
      applyRevision(key, got->body);
    } else if (got.status().code() == Code::kNotFound) {
      forgetRevision(key);
    } else {
      LOG(WARNING) << "data plane: cannot read revision " << key << ": " << got.status().message();
      revisions_listed_ = false;  // the next sync lists them all
    }
  }
}

void DataPlane::applyRevision(const std::string& key, const json& rev) {
  const json& md = valueAt(rev, "metadata");
  bool reachable = valueAt(valueAt(md, "labels"), api::labels::kRoutingState) != "reserve";
  // Only re-apply when what the data plane uses changed.
  std::string fingerprint =
      valueAt(rev, "spec").dump() + valueAt(md, "annotations").dump() + (reachable ? "r" : "u");
  auto known = known_revisions_.find(key);
  if (known != known_revisions_.end() && known->second == fingerprint) return;
  const api::RevisionSettings settings = api::revisionSettings(rev, config_);

  router::RevisionConfig rc;
  rc.container_concurrency = static_cast<int>(settings.container_concurrency);
  rc.timeout = settings.timeout;
  rc.response_start_timeout = settings.response_start_timeout;
  rc.idle_timeout = settings.idle_timeout;
  router_->setRevisionConfig(key, rc);

  if (!settings.errors.empty()) {
    LOG(WARNING) << "revision " << key << ": settings: " << settings.status().message();
    return;
  }
  auto st = driver_->addRevision(key, toScalerSettings(settings, reachable));
  if (!st.isOk()) {
    LOG(WARNING) << "revision " << key << ": scaler: " << st.message();
    return;
  }
  known_revisions_[key] = fingerprint;
}

// Also for a Revision never applied (its settings were refused): the router
// may hold its config.
void DataPlane::forgetRevision(const std::string& key) {
  driver_->removeRevision(key);
  router_->removeRevision(key);
  known_revisions_.erase(key);
}

}  // namespace knap::daemon
