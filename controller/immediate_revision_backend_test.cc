#include "controller/immediate_revision_backend.h"

#include <gtest/gtest.h>

#include "controller/controller.h"
#include "controller/object_util.h"
#include "store/sqlite_store.h"

namespace knap::controller {
namespace {

using nlohmann::json;

json revision(const std::string& name) {
  return json{{"metadata", {{"name", name}, {"namespace", "default"}}}};
}

TEST(ImmediateRevisionBackend, UnknownUntilEnsuredThenReadyAtZero) {
  ImmediateRevisionBackend b;
  std::vector<std::string> changes;
  b.setOnChange([&](const std::string& ns, const std::string& name) { changes.push_back(ns + "/" + name); });
  EXPECT_EQ(b.health("default", "a").resources_available.status, "Unknown");
  b.ensure(revision("a"));
  b.ensure(revision("a"));  // idempotent: one notification
  EXPECT_EQ(changes, std::vector<std::string>{"default/a"});
  RevisionHealth h = b.health("default", "a");
  EXPECT_EQ(h.resources_available.status, "True");
  EXPECT_EQ(h.container_healthy.status, "True");
  EXPECT_EQ(h.active.status, "False");
  EXPECT_EQ(h.active.reason, "NoTraffic");
  EXPECT_EQ(h.actual_replicas, 0);
  EXPECT_EQ(h.desired_replicas, 0);
  b.remove("default", "a");
  EXPECT_EQ(b.health("default", "a").resources_available.status, "Unknown");
}

TEST(ImmediateRevisionBackend, ServiceBecomesReadyWithoutPods) {
  SimulatedTimeSource clock;
  auto s = store::SqliteStore::open(":memory:", clock);
  ASSERT_TRUE(s.isOk());
  auto store = std::move(s).value();
  Config config = defaultConfig();
  ImmediateRevisionBackend backend;
  Controller ctl(*store, backend, clock, config);
  json svc = {{"apiVersion", "serving.knative.dev/v1"},
              {"kind", "Service"},
              {"metadata", {{"name", "hello"}, {"namespace", "default"}}},
              {"spec",
               {{"template",
                 {{"spec", {{"containers", json::array({{{"name", "user-container"}, {"image", "x:1"}}})}}}}},
                {"traffic", json::array({{{"percent", 100}, {"latestRevision", true}}})}}}};
  ASSERT_TRUE(store->create(store::Key{"Service", "default", "hello"}, svc).isOk());
  ASSERT_LT(ctl.runPending(), 10000u);
  auto got = store->get(store::Key{"Service", "default", "hello"});
  ASSERT_TRUE(got.isOk());
  EXPECT_EQ(conditionStateOf(got->body["status"], "Ready").status, "True");
  EXPECT_EQ(got->body["status"]["url"], "http://hello.default.localhost");
  auto rev = store->get(store::Key{"Revision", "default", "hello-00001"});
  ASSERT_TRUE(rev.isOk());
  EXPECT_EQ(conditionStateOf(rev->body["status"], "Active").reason, "NoTraffic");
  EXPECT_EQ(rev->body["status"]["actualReplicas"], 0);
}

}  // namespace
}  // namespace knap::controller
