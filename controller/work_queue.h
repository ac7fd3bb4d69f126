// WorkQueue: the controller's queue of store keys, with the semantics of
// client-go's rate-limiting workqueue:
//   - a key waiting is not queued twice (dedup);
//   - a key being processed (get() .. done()) is not handed out twice: adding
//     it meanwhile marks it dirty and it is queued again by done();
//   - addRateLimited() re-adds a key after a per-key exponential back-off
//     (base, 2*base, 4*base, ... capped at max) counted until forget();
//   - addAfter() re-adds after a delay; of several delays the earliest wins.
// And one knap addition: two lanes. add() (a store event, a backend change,
// a retry that is due) goes ahead of addResync() (the start-up or periodic
// resync), so a Service created while 4,000 resync keys are queued is not
// stuck behind them. A resync key that gets an event moves to the front lane.
//
// Time is the caller's: every call that needs it takes `now` (monotonic, from
// a TimeSource), so tests run on a SimulatedTimeSource and nothing sleeps.
//
// Thread safety: none; the Controller guards it with its mutex.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include "common/clock.h"
#include "store/store.h"

namespace knap::controller {

struct BackoffPolicy {
  Duration base = std::chrono::milliseconds(50);
  Duration max = std::chrono::seconds(5);
  // The delay before retry number `failures` (1 = first retry).
  Duration delay(int failures) const;
};

class WorkQueue {
 public:
  explicit WorkQueue(BackoffPolicy policy = {}) : policy_(policy) {}

  void add(const store::Key& key) { addToLane(key, kFront); }
  void addResync(const store::Key& key) { addToLane(key, kResync); }
  // Queued (front lane) once `delay` has passed since `now`.
  void addAfter(const store::Key& key, Duration delay, MonoTime now);
  // addAfter with the key's back-off; counts one more failure. Returns the delay.
  Duration addRateLimited(const store::Key& key, MonoTime now);
  // Clears the key's failure count (call after a successful reconcile).
  void forget(const store::Key& key) { failures_.erase(key.toString()); }
  int numRequeues(const store::Key& key) const;

  // The next key to process (front lane first, then resync), moving delayed
  // keys that are due at `now` to the front lane first; nullopt when none is
  // ready. The key is "processing" until done().
  std::optional<store::Key> get(MonoTime now);
  void done(const store::Key& key);

  // Time from `now` until the earliest delayed key is due (zero if one is
  // due already); nullopt when none is delayed.
  std::optional<Duration> nextDelay(MonoTime now) const;

  size_t queued() const { return entries_.size(); }   // ready to hand out
  size_t delayed() const { return waiting_.size(); }  // waiting for their time
  size_t processing() const { return processing_.size(); }
  // Nothing queued and nothing processing (delayed keys may remain).
  bool idle() const { return entries_.empty() && processing_.empty(); }

 private:
  enum Lane { kFront = 0, kResync = 1 };
  struct Entry {
    store::Key key;
    Lane lane;
    uint64_t seq;  // matches the lane deque's item that is live
  };
  struct Item {
    std::string id;
    uint64_t seq;
  };
  void addToLane(const store::Key& key, Lane lane);
  void push(const std::string& id, const store::Key& key, Lane lane);
  void promoteDue(MonoTime now);

  BackoffPolicy policy_;
  uint64_t next_seq_ = 1;
  std::map<std::string, Entry> entries_;  // queued keys by Key::toString()
  std::deque<Item> lanes_[2];             // may hold stale items (seq mismatch): skipped
  struct Processing {
    bool dirty = false;   // added again while processing: re-queued by done()
    Lane lane = kResync;  // the lane it goes back to (front wins)
  };
  std::map<std::string, Processing> processing_;
  std::map<std::string, std::pair<MonoTime, store::Key>> waiting_;  // id -> (due, key)
  std::multimap<MonoTime, std::string> by_due_;                     // the same, by due time
  std::map<std::string, int> failures_;
};

}  // namespace knap::controller
