#include "router/activator_queue.h"

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>

namespace knap::router {
namespace {

using std::chrono::seconds;

// Collects what a queued waiter was told.
struct Outcome {
  std::optional<StatusOr<std::string>> got;
  ActivatorQueue::Callback cb() {
    return [this](StatusOr<std::string> g) { got.emplace(std::move(g)); };
  }
  bool granted() const { return got && got->isOk(); }
  std::string endpoint() const { return got->value(); }
  Code code() const { return got->status().code(); }
};

class ActivatorQueueTest : public ::testing::Test {
 protected:
  MonoTime now() const { return clock_.monotonic(); }
  MonoTime never() const { return now() + seconds(3600); }
  SimulatedTimeSource clock_;
};

TEST_F(ActivatorQueueTest, GrantsImmediatelyWhenCapacity) {
  ActivatorQueue q({10, seconds(60)});
  q.setEndpoints({"10.0.0.1:8080"});
  Outcome o;
  auto a = q.acquire(now(), never(), o.cb());
  EXPECT_EQ(a.outcome, ActivatorQueue::Outcome::kGranted);
  EXPECT_EQ(a.endpoint, "10.0.0.1:8080");
  EXPECT_FALSE(o.got.has_value());
  EXPECT_EQ(q.inFlight("10.0.0.1:8080"), 1);
  q.release("10.0.0.1:8080");
  EXPECT_EQ(q.inFlight("10.0.0.1:8080"), 0);
}

TEST_F(ActivatorQueueTest, QueuesAtZeroAndReleasesFifoWhenEndpointAppears) {
  ActivatorQueue q({10, seconds(60)});
  q.setContainerConcurrency(1);
  Outcome o1, o2, o3;
  auto a1 = q.acquire(now(), never(), o1.cb());
  auto a2 = q.acquire(now(), never(), o2.cb());
  auto a3 = q.acquire(now(), never(), o3.cb());
  EXPECT_EQ(a1.outcome, ActivatorQueue::Outcome::kQueued);
  EXPECT_TRUE(a1.cold);
  EXPECT_TRUE(a1.first_cold);
  EXPECT_TRUE(a2.cold);
  EXPECT_FALSE(a2.first_cold);
  EXPECT_EQ(q.queued(), 3u);

  q.setEndpoints({"10.0.0.1:8080"});  // cc=1: one slot
  EXPECT_TRUE(o1.granted());
  EXPECT_FALSE(o2.got.has_value());
  EXPECT_FALSE(o3.got.has_value());
  EXPECT_EQ(q.queued(), 2u);

  q.release(o1.endpoint());
  EXPECT_TRUE(o2.granted());
  EXPECT_FALSE(o3.got.has_value());
  q.release(o2.endpoint());
  EXPECT_TRUE(o3.granted());
  EXPECT_EQ(q.queued(), 0u);
}

TEST_F(ActivatorQueueTest, ConcurrencyLimitIsHardPerPod) {
  ActivatorQueue q({100, seconds(60)});
  q.setContainerConcurrency(2);
  q.setEndpoints({"a:1", "b:1"});
  std::vector<ActivatorQueue::Acquired> got;
  Outcome waiting;
  for (int i = 0; i < 4; ++i) got.push_back(q.acquire(now(), never(), waiting.cb()));
  for (const auto& g : got) EXPECT_EQ(g.outcome, ActivatorQueue::Outcome::kGranted);
  EXPECT_EQ(q.inFlight("a:1"), 2);
  EXPECT_EQ(q.inFlight("b:1"), 2);
  auto fifth = q.acquire(now(), never(), waiting.cb());
  EXPECT_EQ(fifth.outcome, ActivatorQueue::Outcome::kQueued);
  EXPECT_FALSE(fifth.cold);  // pods exist, all busy
  q.release("b:1");
  ASSERT_TRUE(waiting.granted());
  EXPECT_EQ(waiting.endpoint(), "b:1");
  EXPECT_EQ(q.inFlight("b:1"), 2);
}

TEST_F(ActivatorQueueTest, LeastInFlightBalancing) {
  ActivatorQueue q({100, seconds(60)});
  q.setEndpoints({"a:1", "b:1", "c:1"});  // cc = 0: unlimited
  Outcome unused;
  for (int i = 0; i < 9; ++i) q.acquire(now(), never(), unused.cb());
  EXPECT_EQ(q.inFlight("a:1"), 3);
  EXPECT_EQ(q.inFlight("b:1"), 3);
  EXPECT_EQ(q.inFlight("c:1"), 3);
  q.release("c:1");
  q.release("c:1");
  auto a = q.acquire(now(), never(), unused.cb());
  EXPECT_EQ(a.endpoint, "c:1");
}

TEST_F(ActivatorQueueTest, DepthLimitRejects) {
  ActivatorQueue q({2, seconds(60)});
  Outcome o;
  EXPECT_EQ(q.acquire(now(), never(), o.cb()).outcome, ActivatorQueue::Outcome::kQueued);
  EXPECT_EQ(q.acquire(now(), never(), o.cb()).outcome, ActivatorQueue::Outcome::kQueued);
  auto third = q.acquire(now(), never(), o.cb());
  EXPECT_EQ(third.outcome, ActivatorQueue::Outcome::kRejected);
  EXPECT_EQ(third.status.code(), Code::kResourceExhausted);
  EXPECT_NE(third.status.message().find("queue full"), std::string::npos);
  EXPECT_EQ(q.queued(), 2u);
}

TEST_F(ActivatorQueueTest, WaitLimitExpiresWithUnavailable) {
  ActivatorQueue q({10, seconds(5)});
  Outcome early, late;
  q.acquire(now(), never(), early.cb());
  clock_.advance(seconds(2));
  q.acquire(now(), never(), late.cb());
  MonoTime next;
  ASSERT_TRUE(q.nextDeadline(&next));
  EXPECT_EQ(next, now() + seconds(3));

  clock_.advance(seconds(2));  // t=4
  EXPECT_EQ(q.expire(now()), 0u);
  clock_.advance(seconds(1));  // t=5: the first waiter's limit
  EXPECT_EQ(q.expire(now()), 1u);
  ASSERT_TRUE(early.got.has_value());
  EXPECT_EQ(early.code(), Code::kUnavailable);
  EXPECT_FALSE(late.got.has_value());
  clock_.advance(seconds(2));  // t=7
  EXPECT_EQ(q.expire(now()), 1u);
  EXPECT_EQ(late.code(), Code::kUnavailable);
  EXPECT_EQ(q.queued(), 0u);
}

TEST_F(ActivatorQueueTest, RequestDeadlineBeforeWaitLimitIsDeadlineExceeded) {
  ActivatorQueue q({10, seconds(60)});
  Outcome o;
  q.acquire(now(), now() + seconds(10), o.cb());
  clock_.advance(seconds(10));
  EXPECT_EQ(q.expire(now()), 1u);
  EXPECT_EQ(o.code(), Code::kDeadlineExceeded);
}

TEST_F(ActivatorQueueTest, NewcomerDoesNotOvertakeWaiters) {
  ActivatorQueue q({10, seconds(60)});
  q.setContainerConcurrency(1);
  q.setEndpoints({"a:1"});
  Outcome first, second, third;
  EXPECT_EQ(q.acquire(now(), never(), first.cb()).outcome, ActivatorQueue::Outcome::kGranted);
  EXPECT_EQ(q.acquire(now(), never(), second.cb()).outcome, ActivatorQueue::Outcome::kQueued);
  q.release("a:1");  // goes to `second`
  EXPECT_TRUE(second.granted());
  EXPECT_EQ(q.acquire(now(), never(), third.cb()).outcome, ActivatorQueue::Outcome::kQueued);
}

TEST_F(ActivatorQueueTest, CancelRemovesWithoutCallback) {
  ActivatorQueue q({10, seconds(60)});
  Outcome o;
  auto a = q.acquire(now(), never(), o.cb());
  EXPECT_TRUE(q.cancel(a.waiter));
  EXPECT_FALSE(q.cancel(a.waiter));
  q.setEndpoints({"a:1"});
  EXPECT_FALSE(o.got.has_value());
  EXPECT_EQ(q.inFlight("a:1"), 0);
}

TEST_F(ActivatorQueueTest, RemovedEndpointDrainsAndIsNotGranted) {
  ActivatorQueue q({10, seconds(60)});
  q.setContainerConcurrency(1);
  q.setEndpoints({"a:1"});
  Outcome unused, waiter;
  ASSERT_EQ(q.acquire(now(), never(), unused.cb()).outcome, ActivatorQueue::Outcome::kGranted);
  q.acquire(now(), never(), waiter.cb());
  q.setEndpoints({"b:1"});  // a:1 goes away, b:1 comes: waiter gets b
  ASSERT_TRUE(waiter.granted());
  EXPECT_EQ(waiter.endpoint(), "b:1");
  EXPECT_EQ(q.inFlight("a:1"), 1);  // still draining
  q.release("a:1");
  EXPECT_EQ(q.inFlight("a:1"), 0);
  EXPECT_EQ(q.endpointCount(), 1u);
}

TEST_F(ActivatorQueueTest, RaisingConcurrencyReleasesWaiters) {
  ActivatorQueue q({10, seconds(60)});
  q.setContainerConcurrency(1);
  q.setEndpoints({"a:1"});
  Outcome unused, w1, w2;
  q.acquire(now(), never(), unused.cb());
  q.acquire(now(), never(), w1.cb());
  q.acquire(now(), never(), w2.cb());
  q.setContainerConcurrency(0);
  EXPECT_TRUE(w1.granted());
  EXPECT_TRUE(w2.granted());
  EXPECT_EQ(q.inFlight("a:1"), 3);
}

TEST_F(ActivatorQueueTest, ShutdownFailsEveryWaiter) {
  ActivatorQueue q({10, seconds(60)});
  Outcome a, b;
  q.acquire(now(), never(), a.cb());
  q.acquire(now(), never(), b.cb());
  q.shutdown(unavailable("revision removed"));
  EXPECT_EQ(a.code(), Code::kUnavailable);
  EXPECT_EQ(b.code(), Code::kUnavailable);
  EXPECT_EQ(q.queued(), 0u);
}

// --- review of b10efdf: ready endpoints held as map iterators ---------------

// Duplicates in setEndpoints count once; a removed-then-readded endpoint
// keeps its in-flight count (same slot, iterator re-pushed).
TEST_F(ActivatorQueueTest, DuplicatesAndReaddWhileDraining) {
  ActivatorQueue q({10, seconds(60)});
  q.setContainerConcurrency(1);
  q.setEndpoints({"a:1", "a:1", "b:1", "a:1"});
  EXPECT_EQ(q.endpointCount(), 2u);
  Outcome x;
  ASSERT_EQ(q.acquire(now(), never(), x.cb()).outcome, ActivatorQueue::Outcome::kGranted);
  ASSERT_EQ(q.acquire(now(), never(), x.cb()).outcome, ActivatorQueue::Outcome::kGranted);
  EXPECT_EQ(q.inFlight("a:1"), 1);
  EXPECT_EQ(q.inFlight("b:1"), 1);
  q.setEndpoints({"b:1"});         // a:1 draining (kept: 1 in flight)
  q.setEndpoints({"a:1", "b:1"});  // a:1 back, same slot
  EXPECT_EQ(q.inFlight("a:1"), 1);
  Outcome w;
  EXPECT_EQ(q.acquire(now(), never(), w.cb()).outcome, ActivatorQueue::Outcome::kQueued);
  q.release("a:1");  // ready again: not erased, waiter gets it
  ASSERT_TRUE(w.granted());
  EXPECT_EQ(w.endpoint(), "a:1");
  q.setEndpoints({});  // a:1 (1) and b:1 (1) draining
  EXPECT_EQ(q.endpointCount(), 0u);
  q.release("a:1");                // erased
  q.release("a:1");                // unknown now: ignored
  q.setEndpoints({"c:1", "a:1"});  // a:1 is a new slot
  EXPECT_EQ(q.inFlight("a:1"), 0);
  EXPECT_EQ(q.inFlight("b:1"), 1);
  EXPECT_EQ(q.totalInFlight(), 1);
  q.release("b:1");
  EXPECT_EQ(q.totalInFlight(), 0);
}

// Random operations against a model (run under ASan to catch a stale map
// iterator in ready_): grants only ever name ready endpoints under the
// limit, in-flight counts match, waiters are served FIFO.
TEST_F(ActivatorQueueTest, RandomOpsMatchModel) {
  std::mt19937 rng(12345);
  const std::vector<std::string> names = {"a:1", "b:1", "c:1", "d:1", "e:1"};
  for (int round = 0; round < 200; ++round) {
    ActivatorQueue q({50, seconds(60)});
    int cc = static_cast<int>(rng() % 3);
    q.setContainerConcurrency(cc);
    std::set<std::string> ready;
    std::map<std::string, int> held;  // granted, not yet released
    std::deque<std::shared_ptr<Outcome>> waiting;
    auto absorb = [&] {
      // Waiters granted since: FIFO (a granted one never follows an ungranted one).
      bool seen_ungranted = false;
      for (auto it = waiting.begin(); it != waiting.end();) {
        if ((*it)->got) {
          EXPECT_FALSE(seen_ungranted) << "not FIFO";
          ASSERT_TRUE((*it)->granted());
          const std::string e = (*it)->endpoint();
          EXPECT_TRUE(ready.count(e)) << e;
          ++held[e];
          it = waiting.erase(it);
        } else {
          seen_ungranted = true;
          ++it;
        }
      }
    };
    for (int step = 0; step < 300; ++step) {
      switch (rng() % 6) {
        case 0: {  // new endpoint set, maybe with duplicates
          std::vector<std::string> eps;
          ready.clear();
          const int k = static_cast<int>(rng() % 6);
          for (int i = 0; i < k; ++i) {
            eps.push_back(names[rng() % names.size()]);
            ready.insert(eps.back());
          }
          q.setEndpoints(eps);
          break;
        }
        case 1:
        case 2: {
          auto o = std::make_shared<Outcome>();
          auto acq = q.acquire(now(), never(), o->cb());
          if (acq.outcome == ActivatorQueue::Outcome::kGranted) {
            EXPECT_TRUE(ready.count(acq.endpoint)) << acq.endpoint;
            ++held[acq.endpoint];
          } else if (acq.outcome == ActivatorQueue::Outcome::kQueued) {
            waiting.push_back(o);
          }
          break;
        }
        case 3:
        case 4: {
          if (held.empty()) break;
          auto it = held.begin();
          std::advance(it, rng() % held.size());
          const std::string e = it->first;
          if (--it->second == 0) held.erase(it);
          q.release(e);
          break;
        }
        case 5:
          cc = static_cast<int>(rng() % 3);
          q.setContainerConcurrency(cc);
          break;
      }
      absorb();
      int total = 0;
      for (const auto& [e, n] : held) {
        EXPECT_EQ(q.inFlight(e), n) << e;
        total += n;
      }
      EXPECT_EQ(q.totalInFlight(), total);
      EXPECT_EQ(q.endpointCount(), ready.size());
      EXPECT_EQ(q.queued(), waiting.size());
      if (::testing::Test::HasFailure()) return;
    }
  }
}
}  // namespace
}  // namespace knap::router
