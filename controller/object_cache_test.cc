// ObjectCache: indexes follow updates and deletions; out-of-order events do
// not bring stale state back; prime() lists the store.
#include "controller/object_cache.h"

#include <gtest/gtest.h>

#include "store/sqlite_store.h"

namespace knap::controller {
namespace {

using nlohmann::json;
using store::Event;
using store::EventType;
using store::Key;
using store::Object;

Object revision(const std::string& name, const std::string& config, int64_t rv,
                const std::string& routes = "") {
  json body = {{"kind", "Revision"},
               {"metadata",
                {{"name", name},
                 {"namespace", "default"},
                 {"resourceVersion", std::to_string(rv)},
                 {"labels", {{"serving.knative.dev/configuration", config}}}}}};
  if (!routes.empty()) body["metadata"]["annotations"] = {{"serving.knative.dev/routes", routes}};
  return Object{Key{"Revision", "default", name}, body, rv};
}

Object route(const std::string& name, json spec_traffic, json status_traffic, int64_t rv) {
  json body = {
      {"kind", "Route"},
      {"metadata", {{"name", name}, {"namespace", "default"}, {"resourceVersion", std::to_string(rv)}}},
      {"spec", {{"traffic", spec_traffic}}},
      {"status", {{"traffic", status_traffic}}}};
  return Object{Key{"Route", "default", name}, body, rv};
}

Event ev(EventType t, Object o) {
  return Event{t, o.resource_version, std::move(o)};
}

std::vector<std::string> names(const std::vector<Object>& v) {
  std::vector<std::string> out;
  for (const auto& o : v) out.push_back(o.key.name);
  return out;
}
std::vector<std::string> names(const std::vector<Key>& v) {
  std::vector<std::string> out;
  for (const auto& k : v) out.push_back(k.name);
  return out;
}

const std::vector<std::string> kKinds = {"Service", "Configuration", "Revision", "Route"};

TEST(ObjectCacheTest, RevisionsOfAConfigurationFollowTheirLabel) {
  ObjectCache c(kKinds);
  c.apply(ev(EventType::kAdded, revision("a-1", "a", 1)));
  c.apply(ev(EventType::kAdded, revision("a-2", "a", 2)));
  c.apply(ev(EventType::kAdded, revision("b-1", "b", 3)));
  EXPECT_EQ(names(c.revisionsOf("default", "a")), (std::vector<std::string>{"a-1", "a-2"}));
  EXPECT_TRUE(c.revisionsOf("other", "a").empty());
  c.apply(ev(EventType::kModified, revision("a-2", "b", 4)));  // relabelled
  EXPECT_EQ(names(c.revisionsOf("default", "a")), (std::vector<std::string>{"a-1"}));
  EXPECT_EQ(names(c.revisionsOf("default", "b")), (std::vector<std::string>{"a-2", "b-1"}));
  Object gone = revision("a-1", "a", 5);
  c.apply(Event{EventType::kDeleted, 5, gone});
  EXPECT_TRUE(c.revisionsOf("default", "a").empty());
  EXPECT_FALSE(c.get(gone.key));
  EXPECT_EQ(c.size(), 2u);
}

TEST(ObjectCacheTest, RoutesAreFoundBySpecAndStatusTrafficAndObjectsByTheirRoutesAnnotation) {
  ObjectCache c(kKinds);
  c.apply(ev(EventType::kAdded,
             route("r", json::array({{{"configurationName", "cfg"}}, {{"revisionName", "pinned"}}}),
                   json::array({{{"revisionName", "cfg-7"}}}), 1)));
  EXPECT_EQ(names(c.routesReferencing("default", "Configuration", "cfg")), (std::vector<std::string>{"r"}));
  EXPECT_EQ(names(c.routesReferencing("default", "Revision", "pinned")), (std::vector<std::string>{"r"}));
  EXPECT_EQ(names(c.routesReferencing("default", "Revision", "cfg-7")), (std::vector<std::string>{"r"}));
  EXPECT_TRUE(c.routesReferencing("default", "Configuration", "pinned").empty());
  c.apply(ev(EventType::kAdded, revision("x-1", "x", 2, "r,s")));
  c.apply(ev(EventType::kAdded, revision("x-2", "x", 3, "s")));
  EXPECT_EQ(names(c.annotatedWith("Revision", "default", "r")), (std::vector<std::string>{"x-1"}));
  EXPECT_EQ(names(c.annotatedWith("Revision", "default", "s")), (std::vector<std::string>{"x-1", "x-2"}));
  EXPECT_TRUE(c.annotatedWith("Configuration", "default", "s").empty());
}

TEST(ObjectCacheTest, AnOlderEventNeverReplacesANewerStateAndADeletionIsNotUndone) {
  ObjectCache c(kKinds);
  c.apply(ev(EventType::kModified, revision("a-1", "new", 10)));
  c.apply(ev(EventType::kModified, revision("a-1", "old", 9)));  // a slower writer's listener
  EXPECT_EQ(names(c.revisionsOf("default", "new")), (std::vector<std::string>{"a-1"}));
  c.apply(Event{EventType::kDeleted, 11, revision("a-1", "new", 11)});
  c.apply(ev(EventType::kModified, revision("a-1", "new", 10)));  // late
  EXPECT_FALSE(c.get(Key{"Revision", "default", "a-1"}));
  c.apply(ev(EventType::kAdded, revision("a-1", "again", 12)));  // recreated
  ASSERT_TRUE(c.get(Key{"Revision", "default", "a-1"}));
  EXPECT_EQ(names(c.revisionsOf("default", "again")), (std::vector<std::string>{"a-1"}));
  c.apply(Event{EventType::kDeleted, 11, revision("a-1", "new", 11)});  // the old deletion again
  EXPECT_TRUE(c.get(Key{"Revision", "default", "a-1"}));
}

TEST(ObjectCacheTest, PrimeListsTheStoreAndIgnoresOtherKinds) {
  SimulatedTimeSource clock;
  auto s = store::SqliteStore::open(":memory:", clock);
  ASSERT_TRUE(s.isOk());
  auto& store = **s;
  ASSERT_TRUE(store.create(Key{"Revision", "default", "a-1"}, revision("a-1", "a", 0).body).isOk());
  ASSERT_TRUE(
      store.create(Key{"Secret", "default", "x"}, json{{"kind", "Secret"}, {"metadata", {{"name", "x"}}}})
          .isOk());
  ObjectCache c(kKinds);
  EXPECT_FALSE(c.primed());
  std::vector<Key> listed;
  ASSERT_TRUE(c.prime(store, &listed).isOk());
  EXPECT_TRUE(c.primed());
  EXPECT_EQ(names(listed), (std::vector<std::string>{"a-1"}));
  EXPECT_EQ(names(c.revisionsOf("default", "a")), (std::vector<std::string>{"a-1"}));
  c.apply(ev(EventType::kAdded, Object{Key{"Secret", "default", "y"}, json::object(), 99}));
  EXPECT_EQ(c.size(), 1u);
}

// prime() keeps each stored text whole (it parses only the fields its
// indexes read): lookups return the full body, and every index is built as
// from an event.
TEST(ObjectCacheTest, PrimeKeepsWholeBodiesAndIndexesFromTheStoredText) {
  SimulatedTimeSource clock;
  auto s = store::SqliteStore::open(":memory:", clock);
  ASSERT_TRUE(s.isOk());
  auto& store = **s;
  json rev = revision("a-1", "a", 0, "r").body;
  rev["spec"] = {{"containers", {{{"image", "img"}}}}};
  rev["status"] = {{"conditions", json::array()}};
  ASSERT_TRUE(store.create(Key{"Revision", "default", "a-1"}, rev).isOk());
  json cfg = {{"kind", "Configuration"},
              {"metadata", {{"annotations", {{"serving.knative.dev/routes", "r"}}}}},
              {"spec", {{"template", {{"spec", json::object()}}}}}};
  ASSERT_TRUE(store.create(Key{"Configuration", "default", "a"}, cfg).isOk());
  ASSERT_TRUE(
      store
          .create(Key{"Route", "default", "r"}, route("r", json::array({{{"configurationName", "a"}}}),
                                                      json::array({{{"revisionName", "a-1"}}}), 0)
                                                    .body)
          .isOk());
  json svc = {{"kind", "Service"}, {"spec", {{"template", {{"spec", json::object()}}}}}};
  ASSERT_TRUE(store.create(Key{"Service", "default", "a"}, svc).isOk());

  ObjectCache c(kKinds);
  ASSERT_TRUE(c.prime(store).isOk());
  EXPECT_EQ(c.size(), 4u);
  auto got = c.get(Key{"Revision", "default", "a-1"});
  ASSERT_TRUE(got);
  auto stored = store.get(Key{"Revision", "default", "a-1"});
  ASSERT_TRUE(stored.isOk());
  EXPECT_EQ(got->body, stored->body);
  EXPECT_EQ(got->resource_version, stored->resource_version);
  ASSERT_TRUE(c.get(Key{"Service", "default", "a"}));
  EXPECT_EQ(c.get(Key{"Service", "default", "a"})->body, store.get(Key{"Service", "default", "a"})->body);
  EXPECT_EQ(names(c.revisionsOf("default", "a")), (std::vector<std::string>{"a-1"}));
  EXPECT_EQ(names(c.annotatedWith("Revision", "default", "r")), (std::vector<std::string>{"a-1"}));
  EXPECT_EQ(names(c.annotatedWith("Configuration", "default", "r")), (std::vector<std::string>{"a"}));
  EXPECT_EQ(names(c.routesReferencing("default", "Configuration", "a")), (std::vector<std::string>{"r"}));
  EXPECT_EQ(names(c.routesReferencing("default", "Revision", "a-1")), (std::vector<std::string>{"r"}));
  // A later event replaces a primed entry; an older one does not.
  Object older = revision("a-1", "b", 1);
  c.apply(ev(EventType::kModified, older));
  EXPECT_EQ(names(c.revisionsOf("default", "a")), (std::vector<std::string>{"a-1"}));
  c.apply(ev(EventType::kModified, revision("a-1", "b", 100)));
  EXPECT_TRUE(c.revisionsOf("default", "a").empty());
  EXPECT_EQ(names(c.revisionsOf("default", "b")), (std::vector<std::string>{"a-1"}));
}

}  // namespace
}  // namespace knap::controller
