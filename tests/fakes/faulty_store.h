// FaultyStore: a store::Store that forwards to a real one and can be told to
// fail, the way a full or read-only disk makes SQLite fail: writes
// (transact) and/or reads (get, list) return kUnavailable while the switch is
// on. It also counts calls, so tests can bound what a reconcile reads.
//
// Thread safety: as the wrapped store; the switches and counters are atomics.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "store/store.h"

namespace knap::testing {

class FaultyStore final : public store::Store {
 public:
  explicit FaultyStore(store::Store& inner) : inner_(inner) {}

  std::atomic<bool> fail_writes{false};
  std::atomic<bool> fail_reads{false};
  std::atomic<int> gets{0}, lists{0}, writes{0}, failed{0};

  StatusOr<store::Object> get(const store::Key& key) override {
    ++gets;
    if (fail_reads) return fault();
    return inner_.get(key);
  }
  StatusOr<std::vector<store::Object>> list(const std::string& kind, const std::string& ns) override {
    ++lists;
    if (fail_reads) return fault();
    return inner_.list(kind, ns);
  }
  int64_t currentResourceVersion() override { return inner_.currentResourceVersion(); }
  Status transact(const std::function<Status(store::Txn&)>& fn) override {
    ++writes;
    if (fail_writes) return fault();
    return inner_.transact(fn);
  }
  StatusOr<std::vector<store::Event>> eventsSince(int64_t since_rv, const std::string& kind) override {
    return inner_.eventsSince(since_rv, kind);
  }
  int addListener(std::function<void(const store::Event&)> fn) override {
    return inner_.addListener(std::move(fn));
  }
  void removeListener(int id) override { inner_.removeListener(id); }

  void resetCounters() { gets = lists = writes = failed = 0; }

 private:
  Status fault() {
    ++failed;
    return unavailable("database or disk is full (injected)");
  }
  store::Store& inner_;
};

}  // namespace knap::testing
