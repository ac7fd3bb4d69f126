#include "router/activator_queue.h"

#include <gtest/gtest.h>

#include <optional>

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

}  // namespace
}  // namespace knap::router
