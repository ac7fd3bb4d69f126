#include "controller/controller.h"

#include "common/log.h"
#include "controller/object_util.h"

namespace knap::controller {

namespace {
constexpr const char* kKinds[] = {"Service", "Configuration", "Revision", "Route"};

bool isKnownKind(const std::string& kind) {
  for (const char* k : kKinds) {
    if (kind == k) return true;
  }
  return false;
}
}  // namespace

Controller::Controller(store::Store& store, RevisionBackend& backend, TimeSource& clock, const Config& config)
    : store_(store), backend_(backend), reconcilers_(store, backend, clock, config) {
  listener_id_ = store_.addListener([this](const store::Event& e) { onStoreEvent(e); });
  backend_.setOnChange(
      [this](const std::string& ns, const std::string& name) { enqueue(store::Key{"Revision", ns, name}); });
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
  worker_ = std::thread([this] { workerLoop(); });
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
    if (!queued_.insert(key.toString()).second) return;
    queue_.push_back(key);
  }
  cv_.notify_one();
}

void Controller::enqueueAll() {
  for (const char* kind : kKinds) {
    auto objs = store_.list(kind, "");
    if (!objs.isOk()) {
      LOG(WARNING) << "controller: resync cannot list " << kind << ": " << objs.status().toString();
      continue;
    }
    for (const auto& o : *objs) enqueue(o.key);
  }
}

void Controller::onStoreEvent(const store::Event& event) {
  const store::Key& key = event.object.key;
  enqueue(key);
  if (const json* ref = controllerRefOf(event.object.body); ref != nullptr) {
    enqueue(store::Key{ref->value("kind", ""), key.ns, ref->value("name", "")});
  }
}

Status Controller::dispatch(const store::Key& key) {
  if (key.kind == "Service") return reconcilers_.reconcileService(key);
  if (key.kind == "Configuration") return reconcilers_.reconcileConfiguration(key);
  if (key.kind == "Revision") return reconcilers_.reconcileRevision(key);
  if (key.kind == "Route") return reconcilers_.reconcileRoute(key);
  return Status::ok();
}

Status Controller::process(const store::Key& key) {
  Status st;
  {
    std::lock_guard<std::mutex> l(reconcile_mu_);
    for (int attempt = 0; attempt < kMaxConflictRetries; ++attempt) {
      st = dispatch(key);
      if (st.code() != Code::kConflict) break;
    }
  }
  if (!st.isOk()) LOG(WARNING) << "controller: reconcile " << key.toString() << ": " << st.toString();
  if (key.kind == "Configuration" || key.kind == "Revision") enqueueRelatedRoutes(key);
  return st;
}

void Controller::enqueueRelatedRoutes(const store::Key& key) {
  auto routes = store_.list("Route", key.ns);
  if (!routes.isOk()) return;
  auto obj = store_.get(key);
  std::string config_name = key.kind == "Configuration" ? key.name : "";
  if (obj.isOk() && key.kind == "Revision") config_name = labelOf(obj->body, "serving.knative.dev/configuration");
  for (const auto& route : *routes) {
    bool related = !obj.isOk();  // gone: any route may have pointed at it
    const json& spec = route.body.contains("spec") ? route.body["spec"] : json::object();
    if (!related && spec.is_object() && spec.contains("traffic") && spec["traffic"].is_array()) {
      for (const json& t : spec["traffic"]) {
        if (!t.is_object()) continue;
        if ((key.kind == "Revision" && t.value("revisionName", "") == key.name) ||
            (!config_name.empty() && t.value("configurationName", "") == config_name)) {
          related = true;
        }
      }
    }
    if (!related && obj.isOk()) related = splitList(annotationOf(obj->body, "serving.knative.dev/routes")).count(
                                              route.key.name) > 0;
    if (related) enqueue(route.key);
  }
}

Status Controller::reconcileOnce(const store::Key& key) { return process(key); }

size_t Controller::runPending(size_t max_items) {
  size_t n = 0;
  while (n < max_items) {
    store::Key key;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (queue_.empty()) break;
      key = queue_.front();
      queue_.pop_front();
      queued_.erase(key.toString());
      ++in_flight_;
    }
    (void)process(key);
    ++n;
    {
      std::lock_guard<std::mutex> l(mu_);
      --in_flight_;
    }
    idle_cv_.notify_all();
  }
  return n;
}

void Controller::workerLoop() {
  while (true) {
    store::Key key;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait(l, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      key = queue_.front();
      queue_.pop_front();
      queued_.erase(key.toString());
      ++in_flight_;
    }
    (void)process(key);
    {
      std::lock_guard<std::mutex> l(mu_);
      --in_flight_;
    }
    idle_cv_.notify_all();
  }
}

bool Controller::waitIdle(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(mu_);
  return idle_cv_.wait_for(l, timeout, [&] { return queue_.empty() && in_flight_ == 0; });
}

}  // namespace knap::controller
