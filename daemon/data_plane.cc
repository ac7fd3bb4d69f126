#include "daemon/data_plane.h"

#include <algorithm>
#include <set>

#include "api/effective_config.h"
#include "api/resources.h"
#include "common/log.h"
#include "controller/route_urls.h"

namespace knap::daemon {
namespace {

using nlohmann::json;

std::string revisionKey(const json& obj) {
  return obj["metadata"].value("namespace", "") + "/" + obj["metadata"].value("name", "");
}

scaler::ScalerSettings toScalerSettings(const api::AutoscalingSettings& a, const Config& config, bool reachable,
                                        Duration progress_deadline) {
  scaler::ScalerSettings s;
  s.metric = a.metric == "rps" ? scaler::ScalingMetric::kRps : scaler::ScalingMetric::kConcurrency;
  s.target_value = a.target_value;
  s.total_value = a.total_value;
  s.aggregation = a.metric_aggregation_algorithm == "linear" ? scaler::Aggregation::kLinear
                                                             : scaler::Aggregation::kWeightedExponential;
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
  s.progress_deadline = progress_deadline;
  (void)config;
  return s;
}

}  // namespace

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

DataPlane::DataPlane(const Config& config, store::Store& store, const TimeSource& clock, scaler::PodCounter& pods,
                     scaler::ScaleTarget& scale, EventRecorder& events, int router_fd)
    : config_(config), store_(store), clock_(clock), router_fd_(router_fd) {
  router::RouterOptions options;
  options.external_fd = router_fd;
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
  options.startup_hold = std::chrono::seconds(30);
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
  // A request that finds its revision at zero pods wakes the autoscaler at once.
  router_->on_cold_request = [this](const std::string& revision) { driver_->poke(revision); };
  ticker_ = std::make_unique<scaler::ScalerTicker>(*driver_, clock, [](MonoTime until) {
    std::this_thread::sleep_until(std::chrono::steady_clock::time_point(until.time_since_epoch()));
  });
}

DataPlane::~DataPlane() { stop(); }

Status DataPlane::start() {
  KNAP_RETURN_IF_ERROR(init_status_);
  KNAP_RETURN_IF_ERROR(router_->start());
  listener_id_ = store_.addListener([this](const store::Event& e) { onStoreEvent(e); });
  sync_thread_ = std::thread([this] { syncLoop(); });
  ticker_->start();
  if (router_fd_ >= 0) {
    LOG(INFO) << "router serving the inherited socket (fd " << router_fd_ << ", port " << router_->port() << ")";
  } else {
    LOG(INFO) << "router listening on " << config_.knap.router_listen << " (port " << router_->port() << ")";
  }
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
  cv_.notify_all();
  if (listener_id_ >= 0) store_.removeListener(listener_id_);
  if (sync_thread_.joinable()) sync_thread_.join();
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
  if (kind != "Route" && kind != "Revision") return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (kind == "Route") routes_dirty_ = true;
    // A Route change moves routingState (reachability) of revisions too.
    revisions_dirty_ = true;
  }
  cv_.notify_all();
}

void DataPlane::syncLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    cv_.wait(lock, [this] { return stopping_ || routes_dirty_ || revisions_dirty_; });
    if (stopping_) break;
    bool routes = routes_dirty_, revisions = revisions_dirty_;
    routes_dirty_ = revisions_dirty_ = false;
    lock.unlock();
    if (revisions) syncRevisions();  // configs first: a new route may point at a new revision
    if (routes) syncRoutes();
    lock.lock();
  }
}

void DataPlane::syncRoutes() {
  auto routes = store_.list("Route", "");
  if (!routes.isOk()) {
    LOG(WARNING) << "data plane: cannot list routes: " << routes.status().message();
    return;
  }
  std::vector<json> bodies;
  for (auto& r : *routes) bodies.push_back(std::move(r.body));
  std::vector<router::HostGroup> groups;
  for (const auto& [host, target] : controller::hostTable(config_, bodies)) {
    router::HostGroup g;
    g.namespace_name = target.ns;
    g.route_name = target.route;
    g.tag = target.split.tag;
    g.visibility = target.split.cluster_local ? router::Visibility::kClusterLocal : router::Visibility::kExternal;
    g.hosts = {host};
    for (const auto& rw : target.split.revisions) {
      if (rw.percent > 0) g.traffic.push_back({target.ns + "/" + rw.revision, static_cast<int>(rw.percent), g.tag});
    }
    if (!g.traffic.empty()) groups.push_back(std::move(g));
  }
  auto table = router::RoutingTable::build(groups, std::to_string(store_.currentResourceVersion()));
  if (!table.isOk()) {
    LOG(WARNING) << "data plane: routing table rejected: " << table.status().message();
    return;
  }
  router_->setRoutingTable(*table);
}

void DataPlane::syncRevisions() {
  auto revisions = store_.list("Revision", "");
  if (!revisions.isOk()) {
    LOG(WARNING) << "data plane: cannot list revisions: " << revisions.status().message();
    return;
  }
  std::set<std::string> live;
  for (const auto& obj : *revisions) {
    const json& rev = obj.body;
    std::string key = revisionKey(rev);
    live.insert(key);
    const json spec = rev.value("spec", json::object());
    int64_t cc = spec.value("containerConcurrency", int64_t{0});
    json annotations = rev["metadata"].value("annotations", json::object());
    std::string routing_state = rev["metadata"].value("labels", json::object()).value(api::labels::kRoutingState, "");
    bool reachable = routing_state != "reserve";
    // Only re-apply when what the data plane uses changed.
    std::string fingerprint = spec.dump() + annotations.dump() + (reachable ? "r" : "u");
    auto known = known_revisions_.find(key);
    if (known != known_revisions_.end() && known->second == fingerprint) continue;

    router::RevisionConfig rc;
    rc.container_concurrency = static_cast<int>(cc);
    rc.timeout = std::chrono::seconds(spec.value("timeoutSeconds", int64_t{300}));
    if (spec.contains("responseStartTimeoutSeconds"))
      rc.response_start_timeout = std::chrono::seconds(spec.value("responseStartTimeoutSeconds", int64_t{0}));
    if (spec.contains("idleTimeoutSeconds"))
      rc.idle_timeout = std::chrono::seconds(spec.value("idleTimeoutSeconds", int64_t{0}));
    router_->setRevisionConfig(key, rc);

    auto settings = api::autoscalingSettings(annotations, config_, cc);
    if (!settings.isOk()) {
      LOG(WARNING) << "revision " << key << ": autoscaling settings: " << settings.status().message();
      continue;
    }
    Duration deadline = config_.deployment.progress_deadline;
    auto st = driver_->addRevision(key, toScalerSettings(*settings, config_, reachable, deadline));
    if (!st.isOk()) {
      LOG(WARNING) << "revision " << key << ": scaler: " << st.message();
      continue;
    }
    known_revisions_[key] = fingerprint;
  }
  for (auto it = known_revisions_.begin(); it != known_revisions_.end();) {
    if (live.count(it->first)) {
      ++it;
      continue;
    }
    driver_->removeRevision(it->first);
    router_->removeRevision(it->first);
    it = known_revisions_.erase(it);
  }
}

}  // namespace knap::daemon
