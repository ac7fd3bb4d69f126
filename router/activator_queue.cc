#include "router/activator_queue.h"

#include <algorithm>

namespace knap::router {

void ActivatorQueue::setContainerConcurrency(int cc) {
  std::lock_guard<std::mutex> lock(mu_);
  cc_ = std::max(0, cc);
  dispatchLocked();
}

void ActivatorQueue::setLimits(QueueLimits limits) {
  std::lock_guard<std::mutex> lock(mu_);
  limits_ = limits;
}

void ActivatorQueue::setEndpoints(const std::vector<std::string>& endpoints) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, slot] : slots_) slot.ready = false;
  ready_.clear();
  for (const std::string& e : endpoints) {
    auto it = slots_.try_emplace(e).first;
    if (it->second.ready) continue;  // duplicate
    it->second.ready = true;
    ready_.push_back(it);
  }
  for (auto it = slots_.begin(); it != slots_.end();) {
    if (!it->second.ready && it->second.in_flight == 0) {
      it = slots_.erase(it);
    } else {
      ++it;
    }
  }
  dispatchLocked();
}

ActivatorQueue::SlotMap::iterator ActivatorQueue::pickLocked() {
  const size_t n = ready_.size();
  if (n == 0) return slots_.end();
  // Least in-flight among endpoints under the breaker limit; ties go to the
  // next endpoint in rotation so equal pods share the load.
  auto best = slots_.end();
  int best_load = 0;
  const size_t start = rotate_++ % n;
  for (size_t i = 0; i < n; ++i) {
    const auto it = ready_[(start + i) % n];
    const int load = it->second.in_flight;
    if (cc_ > 0 && load >= cc_) continue;
    if (best == slots_.end() || load < best_load) {
      best = it;
      best_load = load;
    }
  }
  return best;
}

void ActivatorQueue::dispatchLocked() {
  while (!waiters_.empty()) {
    const auto picked = pickLocked();
    if (picked == slots_.end()) return;
    Waiter w = std::move(waiters_.front());
    waiters_.pop_front();
    ++picked->second.in_flight;
    w.cb(picked->first);
  }
}

bool ActivatorQueue::grantLocked(std::string* endpoint) {
  // FIFO: a newcomer may not overtake requests already waiting.
  if (!waiters_.empty()) return false;
  const auto picked = pickLocked();
  if (picked == slots_.end()) return false;
  ++picked->second.in_flight;
  *endpoint = picked->first;
  return true;
}

bool ActivatorQueue::tryAcquire(std::string* endpoint) {
  std::lock_guard<std::mutex> lock(mu_);
  return grantLocked(endpoint);
}

ActivatorQueue::Acquired ActivatorQueue::acquire(MonoTime now, MonoTime request_deadline, Callback cb) {
  std::lock_guard<std::mutex> lock(mu_);
  Acquired out;
  if (grantLocked(&out.endpoint)) {
    out.outcome = Outcome::kGranted;
    return out;
  }
  if (waiters_.size() >= limits_.max_depth) {
    out.outcome = Outcome::kRejected;
    out.status = Status(Code::kResourceExhausted,
                        "activator queue full (" + std::to_string(limits_.max_depth) + " requests waiting)");
    return out;
  }
  out.outcome = Outcome::kQueued;
  out.waiter = next_id_++;
  out.cold = ready_.empty();
  out.first_cold = out.cold && waiters_.empty();
  waiters_.push_back(Waiter{out.waiter, now + limits_.max_wait, request_deadline, std::move(cb)});
  return out;
}

void ActivatorQueue::release(const std::string& endpoint) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slots_.find(endpoint);
  if (it == slots_.end()) return;
  if (it->second.in_flight > 0) --it->second.in_flight;
  if (!it->second.ready && it->second.in_flight == 0) {
    slots_.erase(it);
    return;
  }
  dispatchLocked();
}

bool ActivatorQueue::cancel(uint64_t waiter) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(waiters_.begin(), waiters_.end(), [&](const Waiter& w) { return w.id == waiter; });
  if (it == waiters_.end()) return false;
  waiters_.erase(it);
  return true;
}

size_t ActivatorQueue::expire(MonoTime now) {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    const MonoTime deadline = std::min(it->queue_deadline, it->request_deadline);
    if (deadline > now) {
      ++it;
      continue;
    }
    Callback cb = std::move(it->cb);
    const bool request_first = it->request_deadline <= it->queue_deadline;
    it = waiters_.erase(it);
    ++n;
    if (request_first) {
      cb(Status(Code::kDeadlineExceeded, "activator request timeout"));
    } else {
      cb(unavailable("no pod became available within the activator queue wait limit"));
    }
  }
  return n;
}

void ActivatorQueue::shutdown(const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  std::deque<Waiter> all;
  all.swap(waiters_);
  for (Waiter& w : all) w.cb(why);
}

size_t ActivatorQueue::queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiters_.size();
}

size_t ActivatorQueue::endpointCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ready_.size();
}

int ActivatorQueue::inFlight(const std::string& endpoint) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slots_.find(endpoint);
  return it == slots_.end() ? 0 : it->second.in_flight;
}

int ActivatorQueue::totalInFlight() const {
  std::lock_guard<std::mutex> lock(mu_);
  int n = 0;
  for (const auto& [key, slot] : slots_) n += slot.in_flight;
  return n;
}

bool ActivatorQueue::nextDeadline(MonoTime* out) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (waiters_.empty()) return false;
  MonoTime best = MonoTime::max();
  for (const Waiter& w : waiters_) best = std::min({best, w.queue_deadline, w.request_deadline});
  *out = best;
  return true;
}

}  // namespace knap::router
