#include "router/metrics.h"

#include <cmath>
#include <cstdio>

namespace knap::router {

Histogram::Histogram(const std::vector<double>& bounds)
    : bounds_(bounds), buckets_(new std::atomic<uint64_t>[bounds.size() + 1]) {
  for (size_t i = 0; i <= bounds_.size(); ++i) buckets_[i].store(0);
}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
}

uint64_t Histogram::cumulative(size_t i) const {
  uint64_t n = 0;
  for (size_t j = 0; j <= i && j <= bounds_.size(); ++j) n += buckets_[j].load(std::memory_order_relaxed);
  return n;
}

std::string escapeLabelValue(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

namespace {

std::string formatNumber(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string labelSet(const std::vector<std::string>& names, const std::vector<std::string>& values,
                     const std::string& extra_name = "", const std::string& extra_value = "") {
  std::string out;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    out += out.empty() ? "{" : ",";
    out += names[i] + "=\"" + escapeLabelValue(values[i]) + "\"";
  }
  if (!extra_name.empty()) {
    out += out.empty() ? "{" : ",";
    out += extra_name + "=\"" + extra_value + "\"";
  }
  if (!out.empty()) out += "}";
  return out;
}

template <typename Cell>
Cell* makeCell(const std::vector<double>& bounds);
template <>
Counter* makeCell<Counter>(const std::vector<double>&) {
  return new Counter();
}
template <>
Gauge* makeCell<Gauge>(const std::vector<double>&) {
  return new Gauge();
}
template <>
Histogram* makeCell<Histogram>(const std::vector<double>& bounds) {
  return new Histogram(bounds);
}

void renderCell(std::string& out, const std::string& name, const std::vector<std::string>& labels,
                const std::vector<std::string>& values, const Counter& c) {
  out += name + labelSet(labels, values) + " " + formatNumber(c.value()) + "\n";
}
void renderCell(std::string& out, const std::string& name, const std::vector<std::string>& labels,
                const std::vector<std::string>& values, const Gauge& g) {
  out += name + labelSet(labels, values) + " " + formatNumber(g.value()) + "\n";
}
void renderCell(std::string& out, const std::string& name, const std::vector<std::string>& labels,
                const std::vector<std::string>& values, const Histogram& h) {
  for (size_t i = 0; i < h.bounds().size(); ++i) {
    out += name + "_bucket" + labelSet(labels, values, "le", formatNumber(h.bounds()[i])) + " " +
           std::to_string(h.cumulative(i)) + "\n";
  }
  out += name + "_bucket" + labelSet(labels, values, "le", "+Inf") + " " + std::to_string(h.count()) + "\n";
  out += name + "_sum" + labelSet(labels, values) + " " + formatNumber(h.sum()) + "\n";
  out += name + "_count" + labelSet(labels, values) + " " + std::to_string(h.count()) + "\n";
}

const char* typeName(const Counter*) {
  return "counter";
}
const char* typeName(const Gauge*) {
  return "gauge";
}
const char* typeName(const Histogram*) {
  return "histogram";
}

}  // namespace

template <typename Cell>
std::shared_ptr<Cell> Family<Cell>::with(const std::vector<std::string>& values) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = cells_[values];
  if (!slot) slot.reset(makeCell<Cell>(bounds_));
  return slot;
}

template <typename Cell>
void Family<Cell>::remove(const std::vector<std::string>& values) {
  std::shared_ptr<Cell> gone;  // freed after the mutex, when no holder is left
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cells_.find(values);
  if (it == cells_.end()) return;
  gone = std::move(it->second);
  cells_.erase(it);
}

template <typename Cell>
void Family<Cell>::removeAll(const std::string& first) {
  std::vector<std::shared_ptr<Cell>> gone;
  std::lock_guard<std::mutex> lock(mu_);
  for (auto it = cells_.begin(); it != cells_.end();) {
    if (!it->first.empty() && it->first[0] == first) {
      gone.push_back(std::move(it->second));
      it = cells_.erase(it);
    } else {
      ++it;
    }
  }
}

template <typename Cell>
size_t Family<Cell>::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cells_.size();
}

template <typename Cell>
void Family<Cell>::render(std::string& out) const {
  std::lock_guard<std::mutex> lock(mu_);
  out += "# HELP " + name_ + " " + help_ + "\n";
  out += "# TYPE " + name_ + " " + typeName(static_cast<const Cell*>(nullptr)) + "\n";
  for (const auto& [values, cell] : cells_) renderCell(out, name_, labels_, values, *cell);
}

template class Family<Counter>;
template class Family<Gauge>;
template class Family<Histogram>;

namespace {
const std::vector<double> kLatencyBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                             0.5,   1,      2.5,   5,    10,    30,   60,  300};
const std::vector<double> kColdBuckets = {0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300};
}  // namespace

RouterMetrics::RouterMetrics()
    : requests_total("knap_router_requests_total",
                     "Requests the router answered, by revision and HTTP status code.", {"revision", "code"}),
      request_duration("knap_router_request_duration_seconds",
                       "Time from request header to the end of the response, by revision.", {"revision"},
                       kLatencyBuckets),
      queued_requests("knap_activator_queued_requests",
                      "Requests waiting in the activator queue for a pod slot.", {"revision"}),
      queue_wait("knap_activator_queue_wait_seconds",
                 "Time requests spent in the activator queue before a pod slot was granted.", {"revision"},
                 kLatencyBuckets),
      cold_start("knap_cold_start_seconds",
                 "From the first request at zero ready pods to its first response byte, by how the "
                 "first pod came to be (pulled, cached, warm, frozen).",
                 {"revision", "path"}, kColdBuckets),
      revision_pods("knap_revision_pods", "Pods of a revision, desired and ready.", {"revision", "state"}),
      probes_total("knap_router_probes_total", "Network probes answered by the router.", {"kind"}),
      warm_pool_pods("knap_warm_pool_pods",
                     "Warm pods kept for a revision that scales to zero, by pool mode.",
                     {"revision", "mode"}),
      warm_pool_memory("knap_warm_pool_memory_bytes", "Memory held by a revision's warm pods (cgroup usage).",
                       {"revision"}),
      open_connections("knap_router_open_connections", "Client connections open on a router listener.",
                       {"listener"}),
      rejected_connections("knap_router_rejected_connections_total",
                           "Client connections answered 503 and closed because the listener was at its "
                           "connection limit.",
                           {"listener"}),
      accept_errors("knap_router_accept_errors_total",
                    "accept() failures on a router listener (out of file descriptors and the like).",
                    {"listener"}),
      tls_handshakes("knap_router_tls_handshakes_total",
                     "TLS handshakes on the HTTPS listener, by result (failed: no certificate for the "
                     "SNI host, no shared protocol or cipher, timeout, client gone).",
                     {"result"}) {}

std::string RouterMetrics::render() const {
  std::string out;
  requests_total.render(out);
  request_duration.render(out);
  queued_requests.render(out);
  queue_wait.render(out);
  cold_start.render(out);
  revision_pods.render(out);
  probes_total.render(out);
  warm_pool_pods.render(out);
  warm_pool_memory.render(out);
  open_connections.render(out);
  rejected_connections.render(out);
  accept_errors.render(out);
  tls_handshakes.render(out);
  return out;
}

void RouterMetrics::removeRevision(const std::string& revision) {
  request_duration.remove({revision});
  queued_requests.remove({revision});
  queue_wait.remove({revision});
  cold_start.removeAll(revision);
  warm_pool_pods.removeAll(revision);
  warm_pool_memory.remove({revision});
  revision_pods.remove({revision, "desired"});
  revision_pods.remove({revision, "ready"});
  // requests_total keeps its counters: a counter that vanishes and comes
  // back would look like a reset to Prometheus.
}

}  // namespace knap::router
