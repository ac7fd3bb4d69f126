// Controller: runs the Knative reconcilers (Service, Configuration, Revision,
// Route, DomainMapping) that need no pods, on one worker thread fed by a rate-limited work
// queue of store keys (controller/work_queue.h), reading related objects from
// an ObjectCache fed by the same store events (controller/object_cache.h).
//
// What enqueues what:
//   - every committed store event enqueues the object and its controller
//     owner (ownerReferences), so children's status reaches the parent;
//   - a Configuration or Revision event, the Routes that reference it (by
//     spec or status traffic, or its routes annotation);
//   - a Service or Route event, the DomainMappings that target it; a
//     ClusterDomainClaim or DomainMapping event, the DomainMappings of that
//     domain in every namespace;
//   - RevisionBackend::setOnChange enqueues that Revision;
//   - enqueueAll() (start-up resync; the daemon calls it hourly so time-based
//     revision GC gets re-evaluated) queues every object in the resync lane,
//     behind event-driven keys.
// Reconcilers write only when the computed object differs from the stored one,
// so a converged system goes quiet. A reconcile that hits kConflict is re-run
// at once (up to kMaxConflictRetries times); any other failure (a store
// error: disk full, read-only) re-queues the key with per-key exponential
// back-off (options.backoff), reset by the next success.
//
// Thread safety: enqueue*, start, stop, stats and waitIdle may be called from
// any thread. reconcileOnce and runPending run reconcilers on the calling
// thread and serialise with the worker through an internal mutex. The Store,
// backend, clock and config must outlive the Controller; the destructor stops
// the worker and unregisters the store listener and backend callback.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/config.h"
#include "common/status.h"
#include "controller/object_cache.h"
#include "controller/reconcilers.h"
#include "controller/revision_backend.h"
#include "controller/work_queue.h"
#include "store/store.h"

namespace knap::controller {

class Controller {
 public:
  static constexpr int kMaxConflictRetries = 8;

  struct Stats {
    uint64_t reconciles = 0;  // reconcile runs (a conflict re-run counts again)
    uint64_t failures = 0;    // reconciles that ended in an error and were re-queued with back-off
    size_t queued = 0;        // keys ready to run
    size_t delayed = 0;       // keys waiting for their back-off
  };

  Controller(store::Store& store, RevisionBackend& backend, TimeSource& clock, const Config& config,
             BackoffPolicy backoff = {});
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // Starts the worker thread (idempotent). Keys queued before start() are kept.
  void start();
  // Stops and joins the worker; queued keys stay queued. Idempotent.
  void stop();

  // Queues one key (kind Service, Configuration, Revision, Route,
  // DomainMapping or ClusterDomainClaim; others are ignored). A key already waiting is not queued twice.
  void enqueue(const store::Key& key);
  // Queues every Service, Configuration, Revision and Route in the store
  // (resync lane) and refreshes the cache from the same lists. A failing
  // store list is logged (the next call retries). The first call after
  // construction takes the keys from the cache the constructor just filled
  // (the store listener was registered first, so nothing was missed).
  void enqueueAll();
  Stats stats() const;
  // See Reconcilers::setCertificateStatus; before start().
  void setCertificateStatus(const CertificateStatus* status) { reconcilers_.setCertificateStatus(status); }
  // See Reconcilers::setIngressStatus; before start().
  void setIngressStatus(const IngressStatus* status) { reconcilers_.setIngressStatus(status); }

  // Reconciles one key synchronously (with conflict retries) and fans out to
  // related keys as the worker would. For tests and tools.
  Status reconcileOnce(const store::Key& key);
  // Processes queued keys on the calling thread until the queue is empty or
  // max_items were processed; returns how many were processed. For tests that
  // do not start the worker.
  size_t runPending(size_t max_items = 10000);
  // Test helper: blocks until no key is queued and no reconcile is running
  // (keys waiting for back-off do not count), or `timeout` (real time)
  // passes; true when idle.
  bool waitIdle(std::chrono::milliseconds timeout);

 private:
  void onStoreEvent(const store::Event& event);
  void workerLoop();
  // Runs the reconciler for key with retries (back-off on failure), then
  // queues related keys, then calls queue_.done(key) (a no-op for a key not
  // handed out by queue_.get()).
  Status process(const store::Key& key);
  Status dispatch(const store::Key& key);
  void enqueueRelatedRoutes(const store::Object& obj);

  store::Store& store_;
  RevisionBackend& backend_;
  TimeSource& clock_;
  ObjectCache cache_;
  Reconcilers reconcilers_;
  int listener_id_ = -1;

  std::mutex reconcile_mu_;  // one reconcile at a time (worker or reconcileOnce)

  mutable std::mutex mu_;
  std::condition_variable cv_;       // work arrived / stop requested
  std::condition_variable idle_cv_;  // queue drained
  WorkQueue queue_;
  uint64_t reconciles_ = 0, failures_ = 0;
  MonoTime resync_started_{};  // the last enqueueAll(), until the queue drains (logged)
  size_t resync_keys_ = 0;
  bool primed_at_construction_ = false;  // the first enqueueAll() may use the cache as it is
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace knap::controller
