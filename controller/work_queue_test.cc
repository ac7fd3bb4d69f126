// WorkQueue on a SimulatedTimeSource: dedup, dirty re-queue while processing,
// lanes, per-key exponential back-off, forget, addAfter.
#include "controller/work_queue.h"

#include <gtest/gtest.h>

namespace knap::controller {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using store::Key;

Key svc(const std::string& name) {
  return Key{"Service", "default", name};
}

std::vector<std::string> drain(WorkQueue& q, MonoTime now) {
  std::vector<std::string> out;
  while (auto k = q.get(now)) {
    out.push_back(k->name);
    q.done(*k);
  }
  return out;
}

TEST(BackoffPolicyTest, DoublesFromBaseUpToMax) {
  BackoffPolicy p{milliseconds(50), seconds(1)};
  EXPECT_EQ(p.delay(1), milliseconds(50));
  EXPECT_EQ(p.delay(2), milliseconds(100));
  EXPECT_EQ(p.delay(3), milliseconds(200));
  EXPECT_EQ(p.delay(5), milliseconds(800));
  EXPECT_EQ(p.delay(6), seconds(1));
  EXPECT_EQ(p.delay(1000), seconds(1));  // no overflow however many failures
  EXPECT_EQ(p.delay(0), milliseconds(50));
}

TEST(WorkQueueTest, AKeyWaitingIsQueuedOnce) {
  SimulatedTimeSource clock;
  WorkQueue q;
  q.add(svc("a"));
  q.add(svc("b"));
  q.add(svc("a"));
  EXPECT_EQ(q.queued(), 2u);
  EXPECT_EQ(drain(q, clock.monotonic()), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(q.idle());
}

TEST(WorkQueueTest, AKeyAddedWhileProcessingIsHandedOutAgainOnlyAfterDone) {
  SimulatedTimeSource clock;
  WorkQueue q;
  q.add(svc("a"));
  auto k = q.get(clock.monotonic());
  ASSERT_TRUE(k);
  q.add(svc("a"));
  q.add(svc("a"));
  EXPECT_FALSE(q.get(clock.monotonic())) << "a key must not be processed twice at once";
  EXPECT_FALSE(q.idle());
  q.done(*k);
  EXPECT_EQ(drain(q, clock.monotonic()), (std::vector<std::string>{"a"}));
  EXPECT_TRUE(q.idle());
}

TEST(WorkQueueTest, EventsGoAheadOfResyncAndPromoteAResyncKey) {
  SimulatedTimeSource clock;
  WorkQueue q;
  for (const char* n : {"r1", "r2", "r3"}) q.addResync(svc(n));
  q.add(svc("new"));
  q.add(svc("r3"));         // an event for a key the resync queued: moves to the front lane
  q.addResync(svc("new"));  // a resync of a front-lane key changes nothing
  EXPECT_EQ(q.queued(), 4u);
  EXPECT_EQ(drain(q, clock.monotonic()), (std::vector<std::string>{"new", "r3", "r1", "r2"}));
  EXPECT_TRUE(q.idle());
}

TEST(WorkQueueTest, ADirtyKeyGoesBackToTheLaneItWasAddedTo) {
  SimulatedTimeSource clock;
  WorkQueue q;
  q.addResync(svc("a"));
  q.addResync(svc("z"));
  auto a = q.get(clock.monotonic());
  q.addResync(svc("a"));
  q.done(*a);
  EXPECT_EQ(drain(q, clock.monotonic()), (std::vector<std::string>{"z", "a"}));

  q.addResync(svc("z"));
  a = std::nullopt;
  q.addResync(svc("b"));
  auto b = q.get(clock.monotonic());  // z
  ASSERT_EQ(b->name, "z");
  q.addResync(svc("z"));
  q.add(svc("z"));  // the event wins
  q.done(*b);
  EXPECT_EQ(drain(q, clock.monotonic()), (std::vector<std::string>{"z", "b"}));
}

TEST(WorkQueueTest, RateLimitedRetriesBackOffExponentiallyPerKeyUntilForgotten) {
  SimulatedTimeSource clock;
  WorkQueue q(BackoffPolicy{milliseconds(100), seconds(2)});
  const Key a = svc("a"), b = svc("b");
  std::vector<Duration> seen;
  for (int i = 0; i < 6; ++i) {
    Duration d = q.addRateLimited(a, clock.monotonic());
    seen.push_back(d);
    EXPECT_EQ(q.nextDelay(clock.monotonic()), d);
    clock.advance(d - milliseconds(1));
    EXPECT_FALSE(q.get(clock.monotonic())) << "retry " << i << " handed out early";
    clock.advance(milliseconds(1));
    auto k = q.get(clock.monotonic());
    ASSERT_TRUE(k) << "retry " << i << " not due on time";
    EXPECT_EQ(*k, a);
    q.done(*k);
  }
  EXPECT_EQ(seen, (std::vector<Duration>{milliseconds(100), milliseconds(200), milliseconds(400),
                                         milliseconds(800), milliseconds(1600), seconds(2)}));
  EXPECT_EQ(q.numRequeues(a), 6);
  // Another key has its own count.
  EXPECT_EQ(q.addRateLimited(b, clock.monotonic()), milliseconds(100));
  q.forget(a);
  EXPECT_EQ(q.numRequeues(a), 0);
  EXPECT_EQ(q.addRateLimited(a, clock.monotonic()), milliseconds(100));
  EXPECT_EQ(q.delayed(), 2u);
  clock.advance(milliseconds(100));
  EXPECT_EQ(drain(q, clock.monotonic()).size(), 2u);
  EXPECT_EQ(q.delayed(), 0u);
  EXPECT_FALSE(q.nextDelay(clock.monotonic()));
}

TEST(WorkQueueTest, AddAfterKeepsTheEarliestTimeAndAnEventDoesNotWaitForIt) {
  SimulatedTimeSource clock;
  WorkQueue q;
  q.addAfter(svc("a"), seconds(5), clock.monotonic());
  q.addAfter(svc("a"), seconds(1), clock.monotonic());
  q.addAfter(svc("a"), seconds(3), clock.monotonic());
  EXPECT_EQ(q.delayed(), 1u);
  EXPECT_EQ(q.nextDelay(clock.monotonic()), seconds(1));
  clock.advance(seconds(1));
  EXPECT_EQ(drain(q, clock.monotonic()), (std::vector<std::string>{"a"}));
  EXPECT_FALSE(q.nextDelay(clock.monotonic())) << "the later times were merged into the first";

  q.addAfter(svc("b"), seconds(10), clock.monotonic());
  q.add(svc("b"));  // an event now: processed now
  EXPECT_EQ(drain(q, clock.monotonic()), (std::vector<std::string>{"b"}));
  clock.advance(seconds(10));
  EXPECT_EQ(drain(q, clock.monotonic()), (std::vector<std::string>{"b"})) << "the delayed add still fires";
  q.addAfter(svc("c"), Duration::zero(), clock.monotonic());
  EXPECT_EQ(q.queued(), 1u);
}

TEST(WorkQueueTest, ADueRetryOfAKeyInTheResyncLaneMovesItToTheFront) {
  SimulatedTimeSource clock;
  WorkQueue q;
  q.addResync(svc("r1"));
  q.addResync(svc("a"));
  q.addRateLimited(svc("a"), clock.monotonic());
  clock.advance(seconds(1));
  EXPECT_EQ(drain(q, clock.monotonic()), (std::vector<std::string>{"a", "r1"}));
}

}  // namespace
}  // namespace knap::controller
