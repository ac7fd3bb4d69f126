#include "controller/controller.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/guard.h"
#include "common/log.h"
#include "controller/object_util.h"

namespace knap::controller {

namespace {
// The worker thread's nice value (0 is the API's and the router's).
constexpr int kWorkerNice = 5;

constexpr const char* kKinds[] = {"Service", "Configuration", "Revision",
                                  "Route",   "DomainMapping", "ClusterDomainClaim"};

bool isKnownKind(const std::string& kind) {
  for (const char* k : kKinds) {
    if (kind == k) return true;
  }
  return false;
}
}  // namespace

Controller::Controller(store::Store& store, RevisionBackend& backend, TimeSource& clock, const Config& config,
                       BackoffPolicy backoff)
    : store_(store),
      backend_(backend),
      clock_(clock),
      cache_(std::vector<std::string>(std::begin(kKinds), std::end(kKinds))),
      reconcilers_(store, cache_, backend, clock, config),
      queue_(backoff) {
  listener_id_ = store_.addListener([this](const store::Event& e) { onStoreEvent(e); });
  if (Status st = cache_.prime(store_); !st.isOk()) {
    LOG(WARNING) << "controller: cannot fill the cache (retried before each reconcile): " << st.toString();
  } else {
    primed_at_construction_ = true;
  }
  backend_.setOnChange([this](const std::string& ns, const std::string& name) {
    enqueue(store::Key{"Revision", ns, name});
  });
}

Controller::~Controller() {
  stop();
  backend_.setOnChange(nullptr);
  if (listener_id_ >= 0) store_.removeListener(listener_id_);
}

void Controller::start() {
  std::lock_guard<std::mutex> l(mu_);
  if (worker_.joinable()) return;
  stopping_ = false;
  worker_ = std::thread([this] {
    // Reconciling is background work: when the CPUs are busy, the API's
    // requests (and the router) go first, so a client's create is not held
    // up by the controllers reacting to the previous one. Linux's nice
    // applies per thread.
    if (::setpriority(PRIO_PROCESS, static_cast<id_t>(::gettid()), kWorkerNice) != 0) {
      LOG(WARNING) << "controller: cannot lower the worker's priority: " << std::strerror(errno);
    }
    runRestarting("controller worker", [this] { workerLoop(); });
  });
}

void Controller::stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!worker_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
  std::lock_guard<std::mutex> l(mu_);
  worker_ = std::thread();
}

void Controller::enqueue(const store::Key& key) {
  if (!isKnownKind(key.kind) || key.name.empty()) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.add(key);
  }
  cv_.notify_one();
}

void Controller::enqueueAll() {
  std::vector<store::Key> keys;
  bool fresh;
  {
    std::lock_guard<std::mutex> l(mu_);
    fresh = std::exchange(primed_at_construction_, false);
  }
  if (fresh) {
    // The constructor listed everything a moment ago, with the listener already registered: nothing can
    // have been missed, so the start-up resync takes its keys from the cache instead of listing (and
    // parsing) every object a second time.
    keys = cache_.keys();
  } else if (Status st = cache_.prime(store_, &keys); !st.isOk()) {
    LOG(WARNING) << "controller: resync cannot list objects: " << st.toString();
    return;
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& k : keys) queue_.addResync(k);
    resync_started_ = clock_.monotonic();
    resync_keys_ = keys.size();
  }
  cv_.notify_one();
}

Controller::Stats Controller::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return Stats{reconciles_, failures_, queue_.queued(), queue_.delayed()};
}

void Controller::onStoreEvent(const store::Event& event) {
  cache_.apply(event);  // before the enqueue: the reconcile must see this state
  const store::Key& key = event.object.key;
  enqueue(key);
  if (const json* ref = controllerRefOf(event.object.body); ref != nullptr) {
    const json& kind = ref->value("kind", json());
    const json& name = ref->value("name", json());
    if (kind.is_string() && name.is_string())
      enqueue(store::Key{kind.get<std::string>(), key.ns, name.get<std::string>()});
  }
  // Routes follow the Configurations and Revisions they name. Only on a change: re-reconciling every Route
  // after every Configuration and Revision reconcile was most of a restart's reconciles.
  if (key.kind == "Configuration" || key.kind == "Revision") enqueueRelatedRoutes(event.object);
  // DomainMappings follow their target (a Service's Route has its name) and
  // their domain's claim; a deleted mapping frees the domain for the others.
  if (key.kind == "Service" || key.kind == "Route") {
    for (const store::Key& dm : cache_.domainMappingsTargeting(key.ns, key.name)) enqueue(dm);
  }
  if (key.kind == "ClusterDomainClaim" || key.kind == "DomainMapping") {
    for (const store::Key& dm : cache_.domainMappingsNamed(key.name)) enqueue(dm);
  }
}

Status Controller::dispatch(const store::Key& key) {
  if (key.kind == "Service") return reconcilers_.reconcileService(key);
  if (key.kind == "Configuration") return reconcilers_.reconcileConfiguration(key);
  if (key.kind == "Revision") return reconcilers_.reconcileRevision(key);
  if (key.kind == "Route") return reconcilers_.reconcileRoute(key);
  if (key.kind == "DomainMapping") return reconcilers_.reconcileDomainMapping(key);
  return Status::ok();  // ClusterDomainClaim: only fans out to its DomainMappings
}

Status Controller::process(const store::Key& key) {
  Status st;
  int runs = 0;
  {
    std::lock_guard<std::mutex> l(reconcile_mu_);
    st = cache_.primed() ? Status::ok() : cache_.prime(store_);
    if (st.isOk()) {
      for (int attempt = 0; attempt < kMaxConflictRetries; ++attempt) {
        ++runs;
        st = statusOfThrowing("reconcile " + key.toString(), [&] { return dispatch(key); });
        if (st.code() != Code::kConflict) break;
      }
    }
  }
  Duration retry_in{};
  {
    std::lock_guard<std::mutex> l(mu_);
    reconciles_ += runs;
    if (st.isOk()) {
      queue_.forget(key);
    } else {
      ++failures_;
      retry_in = queue_.addRateLimited(key, clock_.monotonic());
    }
  }
  if (!st.isOk()) {
    LOG(WARNING) << "controller: reconcile " << key.toString() << ": " << st.toString() << " (retry in "
                 << std::chrono::duration_cast<std::chrono::milliseconds>(retry_in).count() << "ms)";
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    queue_.done(key);
    if (resync_started_ != MonoTime{} && queue_.idle()) {
      auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock_.monotonic() - resync_started_);
      LOG(INFO) << "controller: resync of " << resync_keys_ << " objects reconciled in " << ms.count()
                << "ms (" << reconciles_ << " reconciles, " << failures_ << " failures so far)";
      resync_started_ = MonoTime{};
    }
  }
  idle_cv_.notify_all();
  cv_.notify_one();  // a back-off may now be the earliest deadline
  return st;
}

void Controller::enqueueRelatedRoutes(const store::Object& obj) {
  const store::Key& key = obj.key;
  std::vector<store::Key> routes = cache_.routesReferencing(key.ns, key.kind, key.name);
  for (const std::string& r : splitList(annotationOf(obj.body, "serving.knative.dev/routes"))) {
    routes.push_back(store::Key{"Route", key.ns, r});
  }
  if (key.kind == "Revision") {
    std::string config_name = labelOf(obj.body, "serving.knative.dev/configuration");
    if (!config_name.empty()) {
      for (auto& r : cache_.routesReferencing(key.ns, "Configuration", config_name)) routes.push_back(r);
    }
  }
  for (const auto& r : routes) enqueue(r);
}

// Not through the queue: done() in process() is then a no-op for this key.
Status Controller::reconcileOnce(const store::Key& key) {
  return process(key);
}

size_t Controller::runPending(size_t max_items) {
  size_t n = 0;
  while (n < max_items) {
    std::optional<store::Key> key;
    {
      std::lock_guard<std::mutex> l(mu_);
      key = queue_.get(clock_.monotonic());
    }
    if (!key) break;
    (void)process(*key);
    ++n;
  }
  return n;
}

void Controller::workerLoop() {
  std::unique_lock<std::mutex> l(mu_);
  while (!stopping_) {
    std::optional<store::Key> key = queue_.get(clock_.monotonic());
    if (!key) {
      // Wait on clock_ until work arrives, stop(), or the earliest back-off
      // is due (on a simulated clock: when the test advances it). A key
      // queued with an earlier back-off meanwhile cuts the wait short.
      const MonoTime now = clock_.monotonic();
      const std::optional<Duration> d = queue_.nextDelay(now);
      const MonoTime due = d ? now + *d : MonoTime::max();
      clock_.waitUntil(l, cv_, due, [this, due] {
        if (stopping_ || queue_.queued() > 0) return true;
        const MonoTime t = clock_.monotonic();
        const std::optional<Duration> next = queue_.nextDelay(t);
        return next.has_value() && t + *next < due;
      });
      continue;
    }
    l.unlock();
    (void)process(*key);
    l.lock();
  }
}

bool Controller::waitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  return idle_cv_.wait_for(l, timeout, [&] { return queue_.idle(); });
}

}  // namespace knap::controller
