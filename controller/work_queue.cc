#include "controller/work_queue.h"

#include <algorithm>

namespace knap::controller {

Duration BackoffPolicy::delay(int failures) const {
  if (failures < 1) failures = 1;
  Duration d = base;
  for (int i = 1; i < failures && d < max; ++i) d *= 2;
  return std::min(d, max);
}

void WorkQueue::push(const std::string& id, const store::Key& key, Lane lane) {
  uint64_t seq = next_seq_++;
  entries_[id] = Entry{key, lane, seq};
  lanes_[lane].push_back(Item{id, seq});
}

void WorkQueue::addToLane(const store::Key& key, Lane lane) {
  const std::string id = key.toString();
  if (auto p = processing_.find(id); p != processing_.end()) {
    if (!p->second.dirty || lane < p->second.lane) p->second.lane = lane;
    p->second.dirty = true;
    return;
  }
  auto it = entries_.find(id);
  if (it == entries_.end()) {
    push(id, key, lane);
  } else if (lane < it->second.lane) {
    push(id, key, lane);  // promoted; the resync lane's item is now stale
  }
}

void WorkQueue::addAfter(const store::Key& key, Duration delay, MonoTime now) {
  if (delay <= Duration::zero()) {
    add(key);
    return;
  }
  const std::string id = key.toString();
  MonoTime due = now + delay;
  auto it = waiting_.find(id);
  if (it == waiting_.end()) {
    waiting_.emplace(id, std::make_pair(due, key));
    by_due_.emplace(due, id);
  } else if (due < it->second.first) {
    auto range = by_due_.equal_range(it->second.first);
    for (auto b = range.first; b != range.second; ++b) {
      if (b->second == id) {
        by_due_.erase(b);
        break;
      }
    }
    it->second.first = due;
    by_due_.emplace(due, id);
  }
}

Duration WorkQueue::addRateLimited(const store::Key& key, MonoTime now) {
  int n = ++failures_[key.toString()];
  Duration d = policy_.delay(n);
  addAfter(key, d, now);
  return d;
}

int WorkQueue::numRequeues(const store::Key& key) const {
  auto it = failures_.find(key.toString());
  return it == failures_.end() ? 0 : it->second;
}

void WorkQueue::promoteDue(MonoTime now) {
  while (!by_due_.empty() && by_due_.begin()->first <= now) {
    auto it = waiting_.find(by_due_.begin()->second);
    by_due_.erase(by_due_.begin());
    if (it == waiting_.end()) continue;
    store::Key key = std::move(it->second.second);
    waiting_.erase(it);
    add(key);
  }
}

std::optional<store::Key> WorkQueue::get(MonoTime now) {
  promoteDue(now);
  for (auto& lane : lanes_) {
    while (!lane.empty()) {
      Item item = std::move(lane.front());
      lane.pop_front();
      auto it = entries_.find(item.id);
      if (it == entries_.end() || it->second.seq != item.seq) continue;  // stale
      store::Key key = std::move(it->second.key);
      entries_.erase(it);
      processing_[item.id] = Processing{};
      return key;
    }
  }
  return std::nullopt;
}

void WorkQueue::done(const store::Key& key) {
  const std::string id = key.toString();
  auto p = processing_.find(id);
  if (p == processing_.end()) return;
  Processing state = p->second;
  processing_.erase(p);
  if (state.dirty) addToLane(key, state.lane);
}

std::optional<Duration> WorkQueue::nextDelay(MonoTime now) const {
  if (by_due_.empty()) return std::nullopt;
  return std::max(Duration::zero(), Duration(by_due_.begin()->first - now));
}

}  // namespace knap::controller
