// StoreEventRecorder: the EventRecorder knapd wires in. record() only queues
// (bounded; overflow drops and counts), a writer thread stores the Events as
// store kind "Event" in the involved object's namespace, so the REST server
// lists and watches them like any object. A repeat of the same event (same
// object, type, reason and message) within `dedupe_window` updates the stored
// Event's count and lastTimestamp instead of adding one, as client-go's
// recorder does. Retention is bounded twice: Events last seen more than `ttl`
// ago are removed, and beyond `max_events` the oldest go first. Both are
// enforced by prune(), which the writer runs every 64 new Events or
// `prune_interval` (so the store holds at most max_events + 64 Events); the
// REST server also hides expired Events that are not removed yet.
//
// Repeats cost little: the first `repeats_written_at_once` occurrences of an
// Event are written as they happen; after that a repeat is counted in memory
// and the stored count and lastTimestamp are brought up to date at most once
// per `repeat_write_interval` (and by flushRepeats(), stop(), and before the
// dedupe entry is forgotten). A Revision that fails the same way every few
// seconds therefore writes its Event a handful of times, then about once per
// interval, instead of on every retry (client-go's correlator bounds the same
// spam with a token bucket per object).
//
// Thread safety: every method may be called from any thread. The store and
// clock are borrowed and must outlive the recorder.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "common/clock.h"
#include "common/event_recorder.h"
#include "events/events.h"
#include "store/store.h"

namespace knap::events {

struct RetentionOptions {
  Duration ttl = kDefaultTtl;
  size_t max_events = 2000;  // across all namespaces
  Duration dedupe_window = std::chrono::minutes(10);
  Duration prune_interval = std::chrono::seconds(30);
  size_t queue_limit = 4096;
  int repeats_written_at_once = 4;  // occurrences written immediately, the first included
  Duration repeat_write_interval = std::chrono::minutes(15);
};

class StoreEventRecorder final : public EventRecorder {
 public:
  StoreEventRecorder(store::Store& store, const TimeSource& clock, RetentionOptions options = {});
  ~StoreEventRecorder() override;  // stop()s
  StoreEventRecorder(const StoreEventRecorder&) = delete;
  StoreEventRecorder& operator=(const StoreEventRecorder&) = delete;

  void start();  // the writer thread; without it, flush() writes on the caller's thread
  void stop();   // writes what is queued, then joins

  void record(const ObjectRef& object, EventType type, const std::string& reason, const std::string& message,
              const std::string& component) override;

  // Writes everything queued so far before returning.
  void flush();
  // Writes the counts of repeats held in memory (see above); returns how many Events were updated.
  size_t flushRepeats();
  // Removes expired Events and the oldest beyond max_events; returns how many.
  size_t prune();
  uint64_t dropped() const;
  const RetentionOptions& options() const { return options_; }

 private:
  struct Pending {
    ObjectRef object;
    EventType type;
    std::string reason, message, component;
    WallTime at;
  };
  struct Recent {
    std::string ns, name;   // the stored Event
    WallTime last;          // last occurrence
    WallTime written_at;    // last time the stored Event was written
    int occurrences = 1;    // seen within the dedupe window
    int64_t unwritten = 0;  // occurrences not yet in the stored count
  };
  static constexpr int kPruneEvery = 64;
  void writeOne(const Pending& in);
  size_t pruneLocked();
  bool writeRepeat(Recent& r);
  void drain(std::unique_lock<std::mutex>& lock);
  void loop();
  std::string suffix();

  store::Store& store_;
  const TimeSource& clock_;
  RetentionOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<Pending> queue_;
  bool writing_ = false;
  bool stopping_ = false;
  uint64_t dropped_ = 0;
  std::thread thread_;
  // Only the writer touches these (writes are serialised by write_mu_).
  std::mutex write_mu_;
  std::map<std::string, Recent> recent_;  // dedupe key -> stored Event
  WallTime last_prune_{};
  int creates_since_prune_ = 0;
  std::mt19937_64 rng_;
};

}  // namespace knap::events
