// Events: the core/v1 shape and its events.k8s.io/v1 view, the store-backed
// recorder's de-duplication and both retention bounds, over a real SqliteStore.
#include "events/events.h"

#include <gtest/gtest.h>

#include "events/store_event_recorder.h"
#include "store/sqlite_store.h"

namespace knap::events {
namespace {

using nlohmann::json;

ObjectRef rev(const std::string& name = "hello-00001") {
  return {"serving.knative.dev/v1", "Revision", "default", name, "uid-" + name};
}

class RecorderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::SqliteStore::open(":memory:", clock_, 10000);
    ASSERT_TRUE(s.isOk()) << s.status().toString();
    store_ = std::move(*s);
  }
  std::vector<store::Object> stored() {
    auto all = store_->list(kStoreKind, "");
    EXPECT_TRUE(all.isOk());
    return all.isOk() ? *all : std::vector<store::Object>{};
  }
  SimulatedTimeSource clock_;
  std::unique_ptr<store::SqliteStore> store_;
};

TEST(EventShape, CoreEventAndItsEventsV1View) {
  SimulatedTimeSource clock;
  json e = makeEvent(rev(), EventType::kWarning, "BackOff", "Back-off restarting failed container",
                     "knap-runtime", clock.now(), "abc");
  EXPECT_EQ(e["apiVersion"], "v1");
  EXPECT_EQ(e["kind"], "Event");
  EXPECT_EQ(e["metadata"]["name"], "hello-00001.abc");
  EXPECT_EQ(e["metadata"]["namespace"], "default");
  EXPECT_EQ(e["involvedObject"]["kind"], "Revision");
  EXPECT_EQ(e["involvedObject"]["uid"], "uid-hello-00001");
  EXPECT_EQ(e["type"], "Warning");
  EXPECT_EQ(e["source"]["component"], "knap-runtime");
  EXPECT_EQ(e["count"], 1);
  EXPECT_EQ(e["firstTimestamp"], "2026-01-01T00:00:00Z");
  EXPECT_EQ(lastSeen(e), clock.now());

  json v1 = toEventsV1(e);
  EXPECT_EQ(v1["apiVersion"], "events.k8s.io/v1");
  EXPECT_EQ(v1["regarding"], e["involvedObject"]);
  EXPECT_EQ(v1["note"], e["message"]);
  EXPECT_EQ(v1["reportingController"], "knap-runtime");
  EXPECT_EQ(v1["eventTime"], "2026-01-01T00:00:00Z");
  EXPECT_EQ(v1["deprecatedCount"], 1);
  EXPECT_FALSE(v1.contains("involvedObject"));

  EXPECT_EQ(coreFieldLabels().at("source"), "source.component");
  EXPECT_EQ(coreFieldLabels().at("involvedObject.uid"), "involvedObject.uid");
  EXPECT_EQ(eventsV1FieldLabels().at("regarding.name"), "involvedObject.name");
  EXPECT_EQ(eventsV1FieldLabels().count("involvedObject.name"), 0u);
}

TEST(EventShape, ObjectRefOfStoredObject) {
  json obj = {{"apiVersion", "serving.knative.dev/v1"},
              {"kind", "Service"},
              {"metadata", {{"name", "hello"}, {"namespace", "ns1"}, {"uid", "u1"}}}};
  EXPECT_EQ(objectRefOf(obj), (ObjectRef{"serving.knative.dev/v1", "Service", "ns1", "hello", "u1"}));
  EXPECT_EQ(objectRefOf(json("x")), ObjectRef{});
}

TEST_F(RecorderTest, RepeatsWithinTheWindowBumpCountAndLastTimestamp) {
  StoreEventRecorder r(*store_, clock_);
  r.record(rev(), EventType::kNormal, "Pulled", "Pulled image x", "knap-images");
  clock_.advance(std::chrono::seconds(5));
  r.record(rev(), EventType::kNormal, "Pulled", "Pulled image x", "knap-images");
  r.record(rev(), EventType::kNormal, "Started", "Started pod p1", "knap-runtime");
  r.flush();
  auto all = stored();
  ASSERT_EQ(all.size(), 2u);
  std::map<std::string, json> by_reason;
  for (auto& o : all) by_reason[o.body["reason"]] = o.body;
  EXPECT_EQ(by_reason["Pulled"]["count"], 2);
  EXPECT_EQ(by_reason["Pulled"]["firstTimestamp"], "2026-01-01T00:00:00Z");
  EXPECT_EQ(by_reason["Pulled"]["lastTimestamp"], "2026-01-01T00:00:05Z");
  EXPECT_EQ(by_reason["Started"]["count"], 1);
  // After the window a repeat is a new Event.
  clock_.advance(std::chrono::minutes(11));
  r.record(rev(), EventType::kNormal, "Pulled", "Pulled image x", "knap-images");
  r.flush();
  EXPECT_EQ(stored().size(), 3u);
}

// A Revision failing the same way every 30 s: the first occurrences are written
// as they happen, then the count is written about once per interval, and what
// is held in memory is written by flushRepeats() (stop() calls it).
TEST_F(RecorderTest, RepeatsBeyondTheFirstFewAreWrittenOncePerInterval) {
  RetentionOptions o;
  o.repeats_written_at_once = 4;
  o.repeat_write_interval = std::chrono::minutes(15);
  StoreEventRecorder r(*store_, clock_, o);
  auto count = [&] {
    auto all = stored();
    return all.size() == 1 ? all[0].body["count"].get<int>() : -1;
  };
  int64_t rv0 = store_->currentResourceVersion();
  for (int i = 0; i < 20; ++i) {  // 10 minutes of repeats
    r.record(rev(), EventType::kWarning, "Failed", "image not found", "knap-images");
    r.flush();
    clock_.advance(std::chrono::seconds(30));
  }
  EXPECT_EQ(count(), 4);
  EXPECT_EQ(store_->currentResourceVersion() - rv0, 4);  // one create, three updates
  for (int i = 0; i < 20; ++i) {  // ten more minutes: 15 minutes after the last write passes once
    r.record(rev(), EventType::kWarning, "Failed", "image not found", "knap-images");
    r.flush();
    clock_.advance(std::chrono::seconds(30));
  }
  EXPECT_EQ(store_->currentResourceVersion() - rv0, 5);
  EXPECT_EQ(count(), 34);  // written at 16:30, 15 minutes after the write at 1:30
  EXPECT_EQ(r.flushRepeats(), 1u);
  EXPECT_EQ(count(), 40);
  EXPECT_EQ(stored()[0].body["lastTimestamp"], "2026-01-01T00:19:30Z");
  EXPECT_EQ(r.flushRepeats(), 0u);  // nothing more is owed
}

TEST_F(RecorderTest, StopWritesTheRepeatsHeldInMemory) {
  {
    StoreEventRecorder r(*store_, clock_);
    r.start();
    for (int i = 0; i < 10; ++i) r.record(rev(), EventType::kWarning, "BackOff", "crashed", "knap-runtime");
    r.stop();
  }
  auto all = stored();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].body["count"], 10);
}

TEST_F(RecorderTest, ExpiredEventsAreRemoved) {
  RetentionOptions o;
  o.ttl = std::chrono::minutes(30);
  StoreEventRecorder r(*store_, clock_, o);
  r.record(rev("a"), EventType::kNormal, "Old", "old", "c");
  r.flush();
  clock_.advance(std::chrono::minutes(20));
  r.record(rev("b"), EventType::kNormal, "Young", "young", "c");
  r.flush();
  clock_.advance(std::chrono::minutes(15));
  EXPECT_EQ(r.prune(), 1u);
  auto all = stored();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].body["reason"], "Young");
  EXPECT_TRUE(expired(all[0].body, clock_.now() + std::chrono::minutes(20), o.ttl));
  EXPECT_FALSE(expired(all[0].body, clock_.now(), o.ttl));
}

TEST_F(RecorderTest, CountBoundKeepsTheNewest) {
  RetentionOptions o;
  o.max_events = 10;
  StoreEventRecorder r(*store_, clock_, o);
  for (int i = 0; i < 25; ++i) {
    r.record(rev("r" + std::to_string(i)), EventType::kNormal, "Scaled", "to " + std::to_string(i), "c");
    clock_.advance(std::chrono::seconds(1));
  }
  r.flush();
  r.prune();
  auto all = stored();
  ASSERT_EQ(all.size(), 10u);
  std::set<std::string> kept;
  for (auto& o2 : all) kept.insert(o2.body["involvedObject"]["name"]);
  for (int i = 15; i < 25; ++i) EXPECT_TRUE(kept.count("r" + std::to_string(i))) << i;
}

TEST_F(RecorderTest, WriterThreadAndBoundedQueue) {
  RetentionOptions o;
  o.queue_limit = 5;
  StoreEventRecorder r(*store_, clock_, o);
  // Not started: the queue fills and further events are dropped, not blocked on.
  for (int i = 0; i < 8; ++i) r.record(rev(), EventType::kNormal, "R" + std::to_string(i), "m", "c");
  EXPECT_EQ(r.dropped(), 3u);
  r.start();
  r.flush();
  EXPECT_EQ(stored().size(), 5u);
  r.record(rev(), EventType::kWarning, "Late", "m", "c");
  r.stop();  // writes what is queued
  EXPECT_EQ(stored().size(), 6u);
  // An object without a name is ignored.
  r.record(ObjectRef{}, EventType::kNormal, "X", "m", "c");
  r.flush();
  EXPECT_EQ(stored().size(), 6u);
}

}  // namespace
}  // namespace knap::events
