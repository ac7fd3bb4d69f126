#include "events/store_event_recorder.h"

#include <algorithm>
#include <cstdio>

#include "common/guard.h"
#include "common/log.h"
#include "events/events.h"

namespace knap::events {

using nlohmann::json;

StoreEventRecorder::StoreEventRecorder(store::Store& store, const TimeSource& clock, RetentionOptions options)
    : store_(store), clock_(clock), options_(options), rng_(std::random_device{}()) {}

StoreEventRecorder::~StoreEventRecorder() {
  stop();
}

void StoreEventRecorder::start() {
  std::lock_guard<std::mutex> l(mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { runRestarting("event recorder loop", [this] { loop(); }); });
}

void StoreEventRecorder::stop() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  flushRepeats();
}

void StoreEventRecorder::record(const ObjectRef& object, EventType type, const std::string& reason,
                                const std::string& message, const std::string& component) {
  if (object.name.empty() || object.kind.empty()) return;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (queue_.size() >= options_.queue_limit) {
      if (dropped_++ % 1000 == 0)
        LOG(WARNING) << "events: queue full, dropping events (" << dropped_ << " so far)";
      return;
    }
    queue_.push_back({object, type, reason, message, component, clock_.now()});
  }
  cv_.notify_one();
}

uint64_t StoreEventRecorder::dropped() const {
  std::lock_guard<std::mutex> l(mu_);
  return dropped_;
}

void StoreEventRecorder::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty() && stopping_) return;
    drain(lock);
  }
}

// Writes the queue in order; called with `lock` held, releases it while writing.
void StoreEventRecorder::drain(std::unique_lock<std::mutex>& lock) {
  while (!queue_.empty()) {
    Pending p = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    lock.unlock();
    writeOne(p);
    lock.lock();
    writing_ = false;
  }
  idle_cv_.notify_all();
}

void StoreEventRecorder::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  if (thread_.joinable() && !stopping_) {
    cv_.notify_one();
    idle_cv_.wait(lock, [&] { return queue_.empty() && !writing_; });
    return;
  }
  drain(lock);
}

std::string StoreEventRecorder::suffix() {
  char buf[24];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(rng_()));
  return buf;
}

void StoreEventRecorder::writeOne(const Pending& in) {
  std::lock_guard<std::mutex> w(write_mu_);
  Pending p = in;
  // A reporter that knows only the name (the autoscaler): the uid comes from
  // the stored object, so that `kubectl describe` (which selects by uid) shows it.
  if (p.object.uid.empty()) {
    auto live = store_.get({p.object.kind, p.object.ns, p.object.name});
    if (live.isOk()) {
      ObjectRef stored = objectRefOf(live->body);
      p.object.uid = stored.uid;
      if (p.object.api_version.empty()) p.object.api_version = stored.api_version;
    }
  }
  std::string key = p.object.uid + "|" + p.object.kind + "|" + p.object.ns + "/" + p.object.name + "|" +
                    eventTypeName(p.type) + "|" + p.reason + "|" + p.message;
  auto it = recent_.find(key);
  if (it != recent_.end() && p.at - it->second.last <= options_.dedupe_window) {
    Recent& r = it->second;
    r.last = p.at;
    ++r.unwritten;
    ++r.occurrences;
    if (r.occurrences <= options_.repeats_written_at_once ||
        p.at - r.written_at >= options_.repeat_write_interval) {
      if (writeRepeat(r)) return;
      recent_.erase(it);  // the stored Event is gone: start a new one
    } else {
      return;
    }
  } else if (it != recent_.end()) {
    writeRepeat(it->second);  // what the old Event still owes, before it is forgotten
    recent_.erase(it);
  }
  json ev = makeEvent(p.object, p.type, p.reason, p.message, p.component, p.at, suffix());
  std::string name = ev["metadata"]["name"];
  auto created = store_.create({kStoreKind, p.object.ns, name}, ev);
  if (!created.isOk()) {
    LOG(WARNING) << "events: cannot store event " << p.reason << " for " << p.object.kind << " "
                 << p.object.ns << "/" << p.object.name << ": " << created.status().toString();
    return;
  }
  recent_[key] = Recent{p.object.ns, name, p.at, p.at};
  // Retention runs every kPruneEvery creates or prune_interval, whichever first.
  if (++creates_since_prune_ >= kPruneEvery || clock_.now() - last_prune_ >= options_.prune_interval)
    pruneLocked();
}

// Brings the stored Event's count and lastTimestamp up to date with what is
// held in memory. False when the stored Event is gone (or cannot be written).
bool StoreEventRecorder::writeRepeat(Recent& r) {
  if (r.unwritten == 0) return true;
  store::Key k{kStoreKind, r.ns, r.name};
  auto live = store_.get(k);
  if (!live.isOk()) return false;
  json body = live->body;
  body["count"] = body.value("count", int64_t{1}) + r.unwritten;
  body["lastTimestamp"] = formatRfc3339(r.last);
  if (!store_.update(k, body, live->resource_version).isOk()) return false;
  r.unwritten = 0;
  r.written_at = clock_.now();
  return true;
}

size_t StoreEventRecorder::flushRepeats() {
  flush();
  std::lock_guard<std::mutex> w(write_mu_);
  size_t written = 0;
  for (auto& [key, r] : recent_) {
    (void)key;
    if (r.unwritten == 0) continue;
    if (writeRepeat(r)) ++written;
  }
  return written;
}

size_t StoreEventRecorder::prune() {
  std::lock_guard<std::mutex> w(write_mu_);
  return pruneLocked();
}

size_t StoreEventRecorder::pruneLocked() {
  creates_since_prune_ = 0;
  last_prune_ = clock_.now();
  for (auto r = recent_.begin(); r != recent_.end();) {
    if (last_prune_ - r->second.last > options_.dedupe_window) {
      writeRepeat(r->second);
      r = recent_.erase(r);
    } else {
      ++r;
    }
  }
  auto all = store_.list(kStoreKind, "");
  if (!all.isOk()) return 0;
  WallTime now = clock_.now();
  std::vector<std::pair<WallTime, store::Key>> kept;
  size_t removed = 0;
  for (const store::Object& o : *all) {
    WallTime seen = lastSeen(o.body);
    if (now - seen > options_.ttl) {
      if (store_.remove(o.key).isOk()) ++removed;
    } else {
      kept.emplace_back(seen, o.key);
    }
  }
  if (kept.size() > options_.max_events) {
    std::sort(kept.begin(), kept.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    size_t excess = kept.size() - options_.max_events;
    for (size_t i = 0; i < excess; ++i)
      if (store_.remove(kept[i].second).isOk()) ++removed;
  }
  return removed;
}

}  // namespace knap::events
