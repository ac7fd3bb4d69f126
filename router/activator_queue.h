// ActivatorQueue: one revision's ready endpoints, per-pod concurrency breaker,
// least-in-flight load balancing and the bounded FIFO of requests waiting for
// capacity (Knative's activator throttler plus queue-proxy breaker, §5.8,
// §4.6: a revision at zero holds requests until a pod is ready).
//
// Decision table for acquire():
//   endpoint with a free slot (in_flight < cc, or cc == 0)  -> granted now,
//                                                              least in-flight first
//   none free, queue depth < max_depth                     -> queued (FIFO)
//   none free, queue full                                  -> rejected (ResourceExhausted)
// A queued waiter leaves the queue when
//   a slot frees (release) or endpoints appear (setEndpoints) -> callback(endpoint)
//   its deadline passes (expire)  -> callback(Unavailable "queue wait limit") or
//                                    callback(DeadlineExceeded) if the request's own deadline came first
//   cancel(id)                    -> removed, no callback
//   shutdown(status)              -> callback(status)
//
// Pure logic: no I/O and no clock; times are passed in (tests drive a
// simulated clock). Thread safety: all methods are thread-safe (one mutex).
// Callbacks run while that mutex is held, so they must be quick and must
// not call back into the queue (the router's only post a wake-up).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/status.h"

namespace knap::router {

struct QueueLimits {
  size_t max_depth = 10000;                       // Knative activator default
  Duration max_wait = std::chrono::seconds(600);  // also bounded by the request's own deadline
};

class ActivatorQueue {
 public:
  // Receives the endpoint key ("ip:port") of the granted slot, or why not.
  using Callback = std::function<void(StatusOr<std::string> grant)>;

  enum class Outcome { kGranted, kQueued, kRejected };
  struct Acquired {
    Outcome outcome = Outcome::kRejected;
    std::string endpoint;     // kGranted: the slot's endpoint
    uint64_t waiter = 0;      // kQueued: id for cancel()
    bool cold = false;        // kQueued with no endpoint at all (the revision is at zero)
    bool first_cold = false;  // cold, and no other request was waiting: a cold start begins
    Status status;            // kRejected: why
  };

  explicit ActivatorQueue(QueueLimits limits) : limits_(limits) {}

  // 0 = unlimited. Raising it releases waiters.
  void setContainerConcurrency(int cc);
  void setLimits(QueueLimits limits);
  // Replaces the set of ready endpoints ("ip:port"). Endpoints that vanish
  // keep their in-flight count until released; new capacity releases waiters.
  void setEndpoints(const std::vector<std::string>& endpoints);

  // Takes a slot now or queues `cb`. `request_deadline` is when the request
  // itself times out; the waiter's deadline is min(now + max_wait, it).
  Acquired acquire(MonoTime now, MonoTime request_deadline, Callback cb);
  // acquire()'s first case only: a slot now (true, `endpoint` set) or
  // nothing changed. The proxy's fast path, before it builds a wait state.
  bool tryAcquire(std::string* endpoint);
  // Returns a slot taken by acquire() or granted to a callback; the next
  // waiter (FIFO) gets a slot if one is free.
  void release(const std::string& endpoint);
  // Removes a queued waiter without calling it. False if it is no longer
  // queued (it was already granted, expired or shut down).
  bool cancel(uint64_t waiter);
  // Fails every waiter whose deadline is <= now. Returns how many.
  size_t expire(MonoTime now);
  // Fails every waiter with `why` (revision removed, router stopping).
  void shutdown(const Status& why);

  size_t queued() const;
  size_t endpointCount() const;  // ready endpoints
  int inFlight(const std::string& endpoint) const;
  int totalInFlight() const;
  // Earliest waiter deadline, if any waiter is queued.
  bool nextDeadline(MonoTime* out) const;

 private:
  struct Slot {
    int in_flight = 0;
    bool ready = false;  // false: removed, kept until in_flight drops to 0
  };
  struct Waiter {
    uint64_t id;
    MonoTime queue_deadline;
    MonoTime request_deadline;
    Callback cb;
  };

  using SlotMap = std::map<std::string, Slot>;
  // The ready endpoint with a free slot and the fewest in flight
  // (slots_.end(): none).
  SlotMap::iterator pickLocked();
  bool grantLocked(std::string* endpoint);  // acquire()'s grant, under mu_
  void dispatchLocked();

  mutable std::mutex mu_;
  QueueLimits limits_;
  int cc_ = 0;
  SlotMap slots_;
  // The ready ones, in setEndpoints' order (for tie-breaking); a ready
  // slot is never erased, so the iterators stay valid.
  std::vector<SlotMap::iterator> ready_;
  size_t rotate_ = 0;
  std::deque<Waiter> waiters_;
  uint64_t next_id_ = 1;
};

}  // namespace knap::router
