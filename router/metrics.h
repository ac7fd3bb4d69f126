// A tiny Prometheus registry (text exposition format 0.0.4) and the router's
// metrics, declared once here (STYLE.md rule 8: the revision is a label,
// never part of a name).
//
// Families hand out cells by label values, shared: a holder (a request
// queued on a revision, a listener) keeps its cell alive across a remove(),
// and a removed cell is freed when its last holder lets go, so churning
// revisions leave no memory behind. Thread safety: every method is
// thread-safe; cells are atomics, lookups and render() take the family's
// mutex.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace knap::router {

class Counter {
 public:
  void inc(double v = 1) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  void add(double v) { value_.fetch_add(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Histogram {
 public:
  explicit Histogram(const std::vector<double>& bounds);
  void observe(double v);
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  // Cumulative count of observations <= bounds()[i].
  uint64_t cumulative(size_t i) const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // per bucket, not cumulative
  std::atomic<uint64_t> count_{0};
  std::atomic<double> sum_{0};
};

enum class MetricType { kCounter, kGauge, kHistogram };

template <typename Cell>
class Family {
 public:
  Family(std::string name, std::string help, std::vector<std::string> labels, std::vector<double> bounds = {})
      : name_(std::move(name)),
        help_(std::move(help)),
        labels_(std::move(labels)),
        bounds_(std::move(bounds)) {}
  // The cell for these label values (one per label name, same order);
  // created on first use. Use it at once (`with(...)->inc()`) or keep the
  // pointer for as long as the cell is needed.
  std::shared_ptr<Cell> with(const std::vector<std::string>& values);
  // Stops exporting a label set (e.g. a deleted revision). The family lets
  // go of the cell; a holder's pointer stays valid (its updates are no
  // longer exported).
  void remove(const std::vector<std::string>& values);
  // remove() of every label set whose first value is `first` (all paths or
  // modes of one revision).
  void removeAll(const std::string& first);
  void render(std::string& out) const;
  const std::string& name() const { return name_; }
  // Label sets exported (for tests: a removed revision leaves none).
  size_t size() const;

 private:
  std::string name_, help_;
  std::vector<std::string> labels_;
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<std::vector<std::string>, std::shared_ptr<Cell>> cells_;
};

using CounterFamily = Family<Counter>;
using GaugeFamily = Family<Gauge>;
using HistogramFamily = Family<Histogram>;

// Escapes a label value for the text format (\\, \", \n).
std::string escapeLabelValue(const std::string& v);

// Every metric the router exports.
class RouterMetrics {
 public:
  RouterMetrics();
  // Prometheus text exposition of every family.
  std::string render() const;
  // Forgets every series labelled with `revision`.
  void removeRevision(const std::string& revision);

  CounterFamily requests_total;        // {revision, code}
  HistogramFamily request_duration;    // {revision}
  GaugeFamily queued_requests;         // {revision}
  HistogramFamily queue_wait;          // {revision}
  HistogramFamily cold_start;          // {revision, path}
  GaugeFamily revision_pods;           // {revision, state="desired|ready"}
  CounterFamily probes_total;          // {kind}
  GaugeFamily warm_pool_pods;          // {revision, mode}
  GaugeFamily warm_pool_memory;        // {revision}
  GaugeFamily open_connections;        // {listener="external|internal|admin"}
  CounterFamily rejected_connections;  // {listener}: over router max-connections, answered 503
  CounterFamily accept_errors;         // {listener}: accept() failures (EMFILE, ENFILE, ...)
  CounterFamily tls_handshakes;        // {result="ok|failed"}: HTTPS listener handshakes
};

}  // namespace knap::router
