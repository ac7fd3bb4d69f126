// Controller: runs the Knative reconcilers (Service, Configuration, Revision,
// Route) that need no pods, on one worker thread fed by a deduplicated work
// queue of store keys.
//
// What enqueues what:
//   - every committed store event enqueues the object and its controller
//     owner (ownerReferences), so children's status reaches the parent;
//   - after a Configuration or Revision is reconciled, the Routes of its
//     namespace that reference it (all Routes there when it is gone);
//   - RevisionBackend::setOnChange enqueues that Revision;
//   - enqueueAll() (start-up resync; the daemon may call it periodically so
//     time-based revision GC gets re-evaluated).
// Reconcilers write only when the computed object differs from the stored one,
// so a converged system goes quiet. A reconcile that hits kConflict is re-run
// (up to kMaxConflictRetries times); other failures are logged and the key is
// retried on the next event or enqueueAll().
//
// Thread safety: enqueue*, start, stop and waitIdle may be called from any
// thread. reconcileOnce and runPending run reconcilers on the calling thread
// and serialise with the worker through an internal mutex. The Store, backend,
// clock and config must outlive the Controller; the destructor stops the
// worker and unregisters the store listener and backend callback.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/config.h"
#include "common/status.h"
#include "controller/reconcilers.h"
#include "controller/revision_backend.h"
#include "store/store.h"

namespace knap::controller {

class Controller {
 public:
  static constexpr int kMaxConflictRetries = 8;

  Controller(store::Store& store, RevisionBackend& backend, TimeSource& clock, const Config& config);
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // Starts the worker thread (idempotent). Keys queued before start() are kept.
  void start();
  // Stops and joins the worker; queued keys stay queued. Idempotent.
  void stop();

  // Queues one key (kind Service, Configuration, Revision or Route; others are
  // ignored). A key already waiting is not queued twice.
  void enqueue(const store::Key& key);
  // Queues every Service, Configuration, Revision and Route in the store. A
  // failing store list is logged (the next call retries).
  void enqueueAll();

  // Reconciles one key synchronously (with conflict retries) and fans out to
  // related keys as the worker would. For tests and tools.
  Status reconcileOnce(const store::Key& key);
  // Processes queued keys on the calling thread until the queue is empty or
  // max_items were processed; returns how many were processed. For tests that
  // do not start the worker.
  size_t runPending(size_t max_items = 10000);
  // Test helper: blocks until the queue is empty and no reconcile is running,
  // or `timeout` (real time) passes; true when idle.
  bool waitIdle(std::chrono::milliseconds timeout);

 private:
  void onStoreEvent(const store::Event& event);
  void workerLoop();
  // Runs the reconciler for key with retries, then queues related keys.
  Status process(const store::Key& key);
  Status dispatch(const store::Key& key);
  void enqueueRelatedRoutes(const store::Key& key);

  store::Store& store_;
  RevisionBackend& backend_;
  Reconcilers reconcilers_;
  int listener_id_ = -1;

  std::mutex reconcile_mu_;  // one reconcile at a time (worker or reconcileOnce)

  std::mutex mu_;
  std::condition_variable cv_;       // work arrived / stop requested
  std::condition_variable idle_cv_;  // queue drained
  std::deque<store::Key> queue_;
  std::set<std::string> queued_;     // Key::toString() of queued keys
  int in_flight_ = 0;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace knap::controller
