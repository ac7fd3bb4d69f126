// Controller tests: the four reconcilers against a real SqliteStore(":memory:")
// (seen by the controller through a FaultyStore, which can fail like a full
// disk and counts reads), a FakeRevisionBackend and a SimulatedTimeSource. Objects are written the way
// the API server stores them (already defaulted); the queue is drained on the
// test thread with runPending() unless a test starts the worker.
#include "controller/controller.h"

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include "controller/domain_mappings.h"
#include "controller/object_util.h"
#include "controller/route_urls.h"
#include "store/sqlite_store.h"
#include "tests/fakes/fake_revision_backend.h"
#include "tests/fakes/faulty_store.h"

namespace knap::controller {
namespace {

using nlohmann::json;
using store::Key;

constexpr const char* kNs = "default";

json containerSpec(const std::string& image) {
  return json{{"containers", json::array({{{"name", "user-container"}, {"image", image}}})},
              {"containerConcurrency", 0},
              {"timeoutSeconds", 300}};
}

json serviceBody(const std::string& name, const std::string& image) {
  return json{{"apiVersion", "serving.knative.dev/v1"},
              {"kind", "Service"},
              {"metadata", {{"name", name}, {"namespace", kNs}}},
              {"spec",
               {{"template", {{"metadata", json::object()}, {"spec", containerSpec(image)}}},
                {"traffic", json::array({{{"percent", 100}, {"latestRevision", true}}})}}}};
}

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = store::SqliteStore::open(":memory:", clock_);
    ASSERT_TRUE(s.isOk()) << s.status().toString();
    store_ = std::move(s).value();
    faulty_ = std::make_unique<testing::FaultyStore>(*store_);
    config_ = defaultConfig();
    config_.domain.domains = {{"example.com", {}}};
    makeController();
  }
  void makeController() {
    ctl_.reset();
    ctl_ = std::make_unique<Controller>(*faulty_, backend_, clock_, config_, backoff_);
  }

  // Drains the queue on this thread; fails if it does not go quiet.
  void settle() {
    size_t n = ctl_->runPending(5000);
    ASSERT_LT(n, 5000u) << "controller did not converge (hot loop?)";
  }

  json get(const std::string& kind, const std::string& name) {
    auto o = store_->get(Key{kind, kNs, name});
    return o.isOk() ? o->body : json();
  }
  bool exists(const std::string& kind, const std::string& name) {
    return store_->get(Key{kind, kNs, name}).isOk();
  }

  void create(const json& body) {
    Key key{body["kind"], kNs, body["metadata"]["name"]};
    auto o = store_->create(key, body);
    ASSERT_TRUE(o.isOk()) << o.status().toString();
  }
  // A user update through the API server: read, change, write back.
  void update(const std::string& kind, const std::string& name, const std::function<void(json&)>& mutate) {
    auto o = store_->get(Key{kind, kNs, name});
    ASSERT_TRUE(o.isOk()) << o.status().toString();
    json body = o->body;
    mutate(body);
    auto u = store_->update(o->key, body, o->resource_version);
    ASSERT_TRUE(u.isOk()) << u.status().toString();
  }
  void remove(const std::string& kind, const std::string& name) {
    ASSERT_TRUE(store_->remove(Key{kind, kNs, name}).isOk());
  }

  ConditionState cond(const json& obj, const std::string& type) {
    return conditionStateOf(obj.value("status", json::object()), type);
  }
  std::string ready(const json& obj) { return cond(obj, "Ready").status; }

  // Creates a Service and brings its first revision to Ready.
  void createReadyService(const std::string& name, const std::string& image = "ghcr.io/knap/hello:v1") {
    create(serviceBody(name, image));
    settle();
    backend_.setReady(kNs, name + "-00001");
    settle();
  }
  // Changes the service image (a template change) and makes the new revision ready.
  void rollOut(const std::string& name, const std::string& image, const std::string& expect_rev) {
    update("Service", name,
           [&](json& s) { s["spec"]["template"]["spec"]["containers"][0]["image"] = image; });
    settle();
    ASSERT_TRUE(exists("Revision", expect_rev));
    backend_.setReady(kNs, expect_rev);
    settle();
  }

  SimulatedTimeSource clock_;
  std::unique_ptr<store::SqliteStore> store_;     // what the API server writes to
  std::unique_ptr<testing::FaultyStore> faulty_;  // what the controller sees
  BackoffPolicy backoff_{std::chrono::milliseconds(100), std::chrono::seconds(2)};
  testing::FakeRevisionBackend backend_;
  Config config_;
  std::unique_ptr<Controller> ctl_;
};

// ------------------------------------------------------------ Service

TEST_F(ControllerTest, ServiceCreatesConfigurationAndRouteWithOwnerRefsAndPropagatedMetadata) {
  json svc = serviceBody("hello", "ghcr.io/knap/hello:v1");
  svc["metadata"]["labels"] = {{"app", "demo"}};
  svc["metadata"]["annotations"] = {{"example.com/note", "hi"},
                                    {"kubectl.kubernetes.io/last-applied-configuration", "{}"},
                                    {"serving.knative.dev/creator", "alice"}};
  create(svc);
  settle();
  json s = get("Service", "hello");
  json c = get("Configuration", "hello");
  json r = get("Route", "hello");
  ASSERT_FALSE(c.is_null());
  ASSERT_FALSE(r.is_null());

  json owner = {{"apiVersion", "serving.knative.dev/v1"},
                {"kind", "Service"},
                {"name", "hello"},
                {"uid", s["metadata"]["uid"]},
                {"controller", true},
                {"blockOwnerDeletion", true}};
  EXPECT_EQ(c["metadata"]["ownerReferences"], json::array({owner}));
  EXPECT_EQ(r["metadata"]["ownerReferences"], json::array({owner}));

  EXPECT_EQ(c["metadata"]["labels"], (json{{"app", "demo"},
                                           {"serving.knative.dev/service", "hello"},
                                           {"serving.knative.dev/serviceUID", s["metadata"]["uid"]}}));
  EXPECT_EQ(c["metadata"]["annotations"], (json{{"example.com/note", "hi"},
                                                {"serving.knative.dev/creator", "alice"},
                                                {"serving.knative.dev/routes", "hello"}}));
  EXPECT_EQ(r["metadata"]["labels"], (json{{"app", "demo"}, {"serving.knative.dev/service", "hello"}}));
  EXPECT_EQ(r["metadata"]["annotations"],
            (json{{"example.com/note", "hi"}, {"serving.knative.dev/creator", "alice"}}));

  EXPECT_EQ(c["spec"]["template"], s["spec"]["template"]);
  EXPECT_EQ(r["spec"]["traffic"],
            json::array({{{"configurationName", "hello"}, {"percent", 100}, {"latestRevision", true}}}));

  // Labels added later by hand to the child are removed; Service label edits propagate.
  update("Configuration", "hello", [](json& b) { b["metadata"]["labels"]["stray"] = "x"; });
  update("Service", "hello", [](json& b) { b["metadata"]["labels"]["app"] = "demo2"; });
  settle();
  c = get("Configuration", "hello");
  EXPECT_FALSE(c["metadata"]["labels"].contains("stray"));
  EXPECT_EQ(c["metadata"]["labels"]["app"], "demo2");
  EXPECT_EQ(get("Route", "hello")["metadata"]["labels"]["app"], "demo2");
}

TEST_F(ControllerTest, FirstRevisionAndFullConvergence) {
  create(serviceBody("hello", "ghcr.io/knap/hello:v1"));
  settle();
  json rev = get("Revision", "hello-00001");
  ASSERT_FALSE(rev.is_null());
  json c = get("Configuration", "hello");
  json s = get("Service", "hello");
  EXPECT_EQ(rev["metadata"]["labels"]["serving.knative.dev/configuration"], "hello");
  EXPECT_EQ(rev["metadata"]["labels"]["serving.knative.dev/configurationGeneration"], "1");
  EXPECT_EQ(rev["metadata"]["labels"]["serving.knative.dev/configurationUID"], c["metadata"]["uid"]);
  EXPECT_EQ(rev["metadata"]["labels"]["serving.knative.dev/service"], "hello");
  EXPECT_EQ(rev["metadata"]["labels"]["serving.knative.dev/serviceUID"], s["metadata"]["uid"]);
  EXPECT_EQ(rev["metadata"]["labels"]["serving.knative.dev/routingState"], "pending");
  EXPECT_EQ(rev["metadata"]["ownerReferences"][0]["kind"], "Configuration");
  EXPECT_EQ(rev["metadata"]["ownerReferences"][0]["uid"], c["metadata"]["uid"]);
  EXPECT_EQ(rev["spec"], s["spec"]["template"]["spec"]);
  EXPECT_EQ(backend_.ensured(), std::vector<std::string>{"default/hello-00001"});

  // Not ready yet: everything Unknown, nothing routed.
  EXPECT_EQ(ready(rev), "Unknown");
  EXPECT_EQ(cond(rev, "ResourcesAvailable").reason, "Deploying");
  EXPECT_EQ(c["status"]["latestCreatedRevisionName"], "hello-00001");
  EXPECT_FALSE(c["status"].contains("latestReadyRevisionName"));
  EXPECT_EQ(ready(c), "Unknown");
  json r = get("Route", "hello");
  EXPECT_EQ(cond(r, "AllTrafficAssigned").status, "Unknown");
  EXPECT_EQ(cond(r, "AllTrafficAssigned").reason, "RevisionMissing");
  EXPECT_EQ(ready(s), "Unknown");

  backend_.setReady(kNs, "hello-00001", "ghcr.io/knap/hello@sha256:abc");
  settle();
  rev = get("Revision", "hello-00001");
  c = get("Configuration", "hello");
  r = get("Route", "hello");
  s = get("Service", "hello");
  EXPECT_EQ(ready(rev), "True");
  EXPECT_EQ(rev["metadata"]["labels"]["serving.knative.dev/routingState"], "active");
  EXPECT_EQ(rev["metadata"]["annotations"]["serving.knative.dev/routes"], "hello");
  EXPECT_EQ(c["status"]["latestReadyRevisionName"], "hello-00001");
  EXPECT_EQ(ready(c), "True");
  EXPECT_EQ(ready(r), "True");
  EXPECT_EQ(cond(r, "CertificateProvisioned").reason, "TLSNotEnabled");
  EXPECT_EQ(r["status"]["url"], "http://hello.default.example.com");
  EXPECT_EQ(r["status"]["address"]["url"], "http://hello.default.svc.cluster.local");
  EXPECT_EQ(r["status"]["traffic"],
            json::array({{{"revisionName", "hello-00001"}, {"percent", 100}, {"latestRevision", true}}}));
  EXPECT_EQ(ready(s), "True");
  EXPECT_EQ(cond(s, "ConfigurationsReady").status, "True");
  EXPECT_EQ(cond(s, "RoutesReady").status, "True");
  EXPECT_EQ(s["status"]["observedGeneration"], 1);
  EXPECT_EQ(s["status"]["url"], "http://hello.default.example.com");
  EXPECT_EQ(s["status"]["address"]["url"], "http://hello.default.svc.cluster.local");
  EXPECT_EQ(s["status"]["traffic"], r["status"]["traffic"]);
  EXPECT_EQ(s["status"]["latestReadyRevisionName"], "hello-00001");
  EXPECT_EQ(s["status"]["latestCreatedRevisionName"], "hello-00001");
}

json domainMappingBody(const std::string& domain, const std::string& ns, const std::string& target);  // below

// With an ingress source (the daemon's data plane), a Route is Ready only
// once the router serves its traffic; the same traffic stays Ready after.
TEST_F(ControllerTest, IngressReadyWaitsForTheRouterToServeTheTraffic) {
  struct FakeIngress : IngressStatus {
    std::set<std::string> served;  // "ns/name\n" + fingerprint
    bool programmed(const std::string& kind, const std::string& ns, const std::string& name,
                    const std::string& fp) const override {
      return served.count(kind + " " + ns + "/" + name + "\n" + fp) > 0;
    }
  } ingress;
  makeController();
  ctl_->setIngressStatus(&ingress);
  createReadyService("hello");
  json r = get("Route", "hello");
  ASSERT_EQ(r["status"]["traffic"][0]["revisionName"], "hello-00001");
  EXPECT_EQ(cond(r, "AllTrafficAssigned").status, "True");
  EXPECT_EQ(cond(r, "IngressReady").status, "Unknown");
  EXPECT_EQ(cond(r, "IngressReady").reason, "IngressNotConfigured");
  EXPECT_EQ(ready(r), "Unknown");
  EXPECT_EQ(ready(get("Service", "hello")), "Unknown");

  ingress.served.insert("Route " + std::string(kNs) + "/hello\n" + programFingerprint(r));
  ctl_->enqueue(Key{"Route", kNs, "hello"});
  settle();
  r = get("Route", "hello");
  EXPECT_EQ(cond(r, "IngressReady").status, "True");
  EXPECT_EQ(ready(r), "True");
  EXPECT_EQ(ready(get("Service", "hello")), "True");

  // A DomainMapping of the Service waits for its own host the same way.
  json mapping = domainMappingBody("app.example.org", kNs, "hello");
  ASSERT_TRUE(store_->create(Key{"DomainMapping", kNs, "app.example.org"}, mapping).isOk());
  settle();
  json dm = get("DomainMapping", "app.example.org");
  EXPECT_EQ(cond(dm, "ReferenceResolved").status, "True");
  EXPECT_EQ(cond(dm, "IngressReady").status, "Unknown");
  EXPECT_EQ(cond(dm, "IngressReady").reason, "IngressNotConfigured");
  EXPECT_EQ(ready(dm), "Unknown");
  ingress.served.insert("DomainMapping " + std::string(kNs) + "/app.example.org\n" + domainFingerprint(dm));
  ctl_->enqueue(Key{"DomainMapping", kNs, "app.example.org"});
  settle();
  EXPECT_EQ(ready(get("DomainMapping", "app.example.org")), "True");

  // The source forgets (a restarted knapd whose router has not reported
  // yet): the same traffic stays Ready.
  ingress.served.clear();
  ctl_->enqueue(Key{"Route", kNs, "hello"});
  ctl_->enqueue(Key{"DomainMapping", kNs, "app.example.org"});
  settle();
  EXPECT_EQ(ready(get("Route", "hello")), "True");
  EXPECT_EQ(ready(get("DomainMapping", "app.example.org")), "True");
}

TEST_F(ControllerTest, SecondReconcileWritesNothing) {
  createReadyService("hello");
  int64_t rv = store_->currentResourceVersion();
  ctl_->enqueueAll();
  settle();
  EXPECT_EQ(store_->currentResourceVersion(), rv);
  for (const char* kind : {"Service", "Configuration", "Route", "Revision"}) {
    auto objs = store_->list(kind, kNs);
    ASSERT_TRUE(objs.isOk());
    for (const auto& o : *objs) ASSERT_TRUE(ctl_->reconcileOnce(o.key).isOk());
  }
  EXPECT_EQ(store_->currentResourceVersion(), rv);
  // A restarted controller adopts everything without rewriting it.
  makeController();
  ctl_->enqueueAll();
  settle();
  EXPECT_EQ(store_->currentResourceVersion(), rv);
}

TEST_F(ControllerTest, TemplateChangeMakesNewRevisionButTrafficAndLabelChangesDoNot) {
  createReadyService("hello");
  rollOut("hello", "ghcr.io/knap/hello:v2", "hello-00002");
  json rev2 = get("Revision", "hello-00002");
  EXPECT_EQ(rev2["metadata"]["labels"]["serving.knative.dev/configurationGeneration"], "2");
  EXPECT_EQ(get("Configuration", "hello")["status"]["latestReadyRevisionName"], "hello-00002");
  EXPECT_EQ(get("Route", "hello")["status"]["traffic"][0]["revisionName"], "hello-00002");
  EXPECT_EQ(get("Revision", "hello-00001")["metadata"]["labels"]["serving.knative.dev/routingState"],
            "reserve");
  EXPECT_EQ(get("Revision", "hello-00001")["metadata"]["annotations"].count("serving.knative.dev/routes"),
            0u);

  // Traffic-only change: no new revision.
  update("Service", "hello", [](json& s) {
    s["spec"]["traffic"] = json::array({{{"revisionName", "hello-00001"}, {"percent", 100}}});
  });
  settle();
  EXPECT_FALSE(exists("Revision", "hello-00003"));
  EXPECT_EQ(generationOf(get("Configuration", "hello")), 2);
  EXPECT_EQ(get("Route", "hello")["status"]["traffic"][0]["revisionName"], "hello-00001");
  EXPECT_EQ(get("Revision", "hello-00001")["metadata"]["labels"]["serving.knative.dev/routingState"],
            "active");

  // Service label / annotation change: copied, no new revision.
  update("Service", "hello", [](json& s) { s["metadata"]["annotations"]["example.com/x"] = "y"; });
  settle();
  EXPECT_FALSE(exists("Revision", "hello-00003"));
  EXPECT_EQ(get("Configuration", "hello")["metadata"]["annotations"]["example.com/x"], "y");

  // Template metadata change counts as a template change.
  update("Service", "hello", [](json& s) { s["spec"]["template"]["metadata"]["labels"]["v"] = "3"; });
  settle();
  json rev3 = get("Revision", "hello-00003");
  ASSERT_FALSE(rev3.is_null());
  EXPECT_EQ(rev3["metadata"]["labels"]["v"], "3");
}

TEST_F(ControllerTest, BringYourOwnRevisionNames) {
  json svc = serviceBody("hello", "ghcr.io/knap/hello:v1");
  svc["spec"]["template"]["metadata"]["name"] = "hello-blue";
  create(svc);
  settle();
  ASSERT_TRUE(exists("Revision", "hello-blue"));
  EXPECT_FALSE(exists("Revision", "hello-00001"));
  backend_.setReady(kNs, "hello-blue");
  settle();
  EXPECT_EQ(get("Configuration", "hello")["status"]["latestReadyRevisionName"], "hello-blue");
  EXPECT_EQ(ready(get("Service", "hello")), "True");

  // A standalone Configuration asking for the same name cannot have it.
  json other = {
      {"apiVersion", "serving.knative.dev/v1"},
      {"kind", "Configuration"},
      {"metadata", {{"name", "other"}, {"namespace", kNs}}},
      {"spec", {{"template", {{"metadata", {{"name", "hello-blue"}}}, {"spec", containerSpec("x:1")}}}}}};
  create(other);
  settle();
  json oc = get("Configuration", "other");
  EXPECT_EQ(cond(oc, "Ready").status, "False");
  EXPECT_EQ(cond(oc, "Ready").reason, "RevisionFailed");
  EXPECT_NE(cond(oc, "Ready").message.find("hello-blue"), std::string::npos) << cond(oc, "Ready").message;
  EXPECT_EQ(oc["status"]["observedGeneration"], 1);
  // The existing revision is untouched.
  EXPECT_EQ(get("Revision", "hello-blue")["metadata"]["labels"]["serving.knative.dev/configuration"],
            "hello");
}

TEST_F(ControllerTest, ServiceReportsRevisionNameTaken) {
  createReadyService("other");
  // A standalone revision name clash: service "hello" wants other-00001... use a BYO name owned elsewhere.
  json svc = serviceBody("hello", "ghcr.io/knap/hello:v1");
  svc["spec"]["template"]["metadata"]["name"] = "other-00001";
  create(svc);
  settle();
  json s = get("Service", "hello");
  EXPECT_EQ(cond(s, "RoutesReady").status, "False");
  EXPECT_EQ(cond(s, "RoutesReady").reason, "RevisionNameTaken");
  EXPECT_EQ(cond(s, "ConfigurationsReady").reason, "RevisionFailed");
  EXPECT_EQ(ready(s), "False");
}

TEST_F(ControllerTest, LatestReadyOnlyAdvancesAndFailedNewerRevisionLeavesItAlone) {
  createReadyService("hello");
  // Generation 2 comes up but is not ready yet.
  update("Service", "hello",
         [](json& s) { s["spec"]["template"]["spec"]["containers"][0]["image"] = "x:2"; });
  settle();
  json c = get("Configuration", "hello");
  EXPECT_EQ(c["status"]["latestCreatedRevisionName"], "hello-00002");
  EXPECT_EQ(c["status"]["latestReadyRevisionName"], "hello-00001");
  EXPECT_EQ(ready(c), "Unknown");
  EXPECT_EQ(get("Route", "hello")["status"]["traffic"][0]["revisionName"], "hello-00001");
  EXPECT_EQ(ready(get("Route", "hello")), "True");
  EXPECT_EQ(ready(get("Service", "hello")), "Unknown");

  // It fails: Configuration False RevisionFailed, traffic stays on 00001.
  backend_.setFailed(kNs, "hello-00002", "ExitCode1", "Container failed with: boom");
  settle();
  c = get("Configuration", "hello");
  EXPECT_EQ(c["status"]["latestReadyRevisionName"], "hello-00001");
  EXPECT_EQ(cond(c, "Ready").status, "False");
  EXPECT_EQ(cond(c, "Ready").reason, "RevisionFailed");
  EXPECT_EQ(cond(c, "Ready").message,
            "Revision \"hello-00002\" failed with message: Container failed with: boom.");
  json s = get("Service", "hello");
  EXPECT_EQ(cond(s, "ConfigurationsReady").reason, "RevisionFailed");
  EXPECT_EQ(ready(s), "False");
  EXPECT_EQ(get("Route", "hello")["status"]["traffic"][0]["revisionName"], "hello-00001");

  // An older revision becoming ready again does not move latestReady backwards.
  rollOut("hello", "x:3", "hello-00003");
  EXPECT_EQ(get("Configuration", "hello")["status"]["latestReadyRevisionName"], "hello-00003");
  backend_.setReady(kNs, "hello-00002");
  settle();
  c = get("Configuration", "hello");
  EXPECT_EQ(c["status"]["latestReadyRevisionName"], "hello-00003");
  EXPECT_EQ(ready(c), "True");
  EXPECT_EQ(ready(get("Service", "hello")), "True");
}

TEST_F(ControllerTest, LatestReadyDeleted) {
  createReadyService("hello");
  update("Service", "hello",
         [](json& s) { s["spec"]["template"]["spec"]["containers"][0]["image"] = "x:2"; });
  settle();
  remove("Revision", "hello-00001");
  settle();
  json c = get("Configuration", "hello");
  EXPECT_EQ(cond(c, "Ready").status, "False");
  EXPECT_EQ(cond(c, "Ready").reason, "RevisionDeleted");
  json r = get("Route", "hello");
  EXPECT_EQ(cond(r, "AllTrafficAssigned").reason, "RevisionMissing");
  EXPECT_EQ(cond(r, "AllTrafficAssigned").status, "False");
  EXPECT_EQ(backend_.removed(), std::vector<std::string>{"default/hello-00001"});
  backend_.setReady(kNs, "hello-00002");
  settle();
  EXPECT_EQ(ready(get("Configuration", "hello")), "True");
  EXPECT_EQ(ready(get("Service", "hello")), "True");
}

TEST_F(ControllerTest, OutOfDateAndTrafficNotMigrated) {
  createReadyService("hello");
  update("Service", "hello",
         [](json& s) { s["spec"]["template"]["spec"]["containers"][0]["image"] = "x:2"; });
  // Step by step, in an order that exposes the intermediate states.
  ASSERT_TRUE(ctl_->reconcileOnce(Key{"Service", kNs, "hello"}).isOk());
  json s = get("Service", "hello");
  EXPECT_EQ(s["status"]["observedGeneration"], 2);
  EXPECT_EQ(cond(s, "ConfigurationsReady").reason, "OutOfDate");
  EXPECT_EQ(cond(s, "ConfigurationsReady").status, "Unknown");
  ASSERT_TRUE(ctl_->reconcileOnce(Key{"Configuration", kNs, "hello"}).isOk());
  backend_.setReady(kNs, "hello-00002");
  ASSERT_TRUE(ctl_->reconcileOnce(Key{"Revision", kNs, "hello-00002"}).isOk());
  ASSERT_TRUE(ctl_->reconcileOnce(Key{"Configuration", kNs, "hello"}).isOk());
  EXPECT_EQ(get("Configuration", "hello")["status"]["latestReadyRevisionName"], "hello-00002");
  ASSERT_TRUE(ctl_->reconcileOnce(Key{"Service", kNs, "hello"}).isOk());
  s = get("Service", "hello");
  EXPECT_EQ(cond(s, "ConfigurationsReady").status, "True");
  EXPECT_EQ(cond(s, "RoutesReady").status, "Unknown");
  EXPECT_EQ(cond(s, "RoutesReady").reason, "TrafficNotMigrated");
  EXPECT_EQ(cond(s, "Ready").reason, "TrafficNotMigrated");
  settle();
  s = get("Service", "hello");
  EXPECT_EQ(ready(s), "True");
  EXPECT_EQ(s["status"]["traffic"][0]["revisionName"], "hello-00002");
}

TEST_F(ControllerTest, ChildNotOwned) {
  json foreign = {{"apiVersion", "serving.knative.dev/v1"},
                  {"kind", "Route"},
                  {"metadata", {{"name", "hello"}, {"namespace", kNs}}},
                  {"spec", {{"traffic", json::array({{{"revisionName", "nope-00001"}, {"percent", 100}}})}}}};
  create(foreign);
  settle();
  create(serviceBody("hello", "x:1"));
  settle();
  json s = get("Service", "hello");
  EXPECT_EQ(cond(s, "RoutesReady").status, "False");
  EXPECT_EQ(cond(s, "RoutesReady").reason, "NotOwned");
  EXPECT_EQ(ready(s), "False");
  json r = get("Route", "hello");
  EXPECT_FALSE(r["metadata"].contains("ownerReferences"));
  EXPECT_EQ(r["spec"]["traffic"][0]["revisionName"], "nope-00001");
}

// --------------------------------------------------------------- Route

TEST_F(ControllerTest, SplitByRevisionNameWithTags) {
  createReadyService("hello");
  rollOut("hello", "x:2", "hello-00002");
  update("Service", "hello", [](json& s) {
    s["spec"]["traffic"] =
        json::array({{{"tag", "current"}, {"revisionName", "hello-00001"}, {"percent", 50}},
                     {{"tag", "latest"}, {"latestRevision", true}, {"percent", 50}}});
  });
  settle();
  json r = get("Route", "hello");
  EXPECT_EQ(r["status"]["traffic"], json::array({{{"tag", "current"},
                                                  {"revisionName", "hello-00001"},
                                                  {"percent", 50},
                                                  {"latestRevision", false},
                                                  {"url", "http://current-hello.default.example.com"}},
                                                 {{"tag", "latest"},
                                                  {"revisionName", "hello-00002"},
                                                  {"percent", 50},
                                                  {"latestRevision", true},
                                                  {"url", "http://latest-hello.default.example.com"}}}));
  EXPECT_EQ(ready(get("Service", "hello")), "True");
  EXPECT_EQ(get("Revision", "hello-00001")["metadata"]["labels"]["serving.knative.dev/routingState"],
            "active");
  EXPECT_EQ(get("Revision", "hello-00002")["metadata"]["labels"]["serving.knative.dev/routingState"],
            "active");
  auto table = routingTable(config_, r);
  ASSERT_TRUE(table.isOk());
  ASSERT_GE(table->size(), 1u);
  EXPECT_EQ((*table)[0].revisions, (std::vector<RevisionWeight>{{"hello-00001", 50}, {"hello-00002", 50}}));
}

TEST_F(ControllerTest, SameRevisionTargetsMerge) {
  createReadyService("hello");
  update("Service", "hello", [](json& s) {
    s["spec"]["traffic"] = json::array(
        {{{"revisionName", "hello-00001"}, {"percent", 40}}, {{"latestRevision", true}, {"percent", 60}}});
  });
  settle();
  json r = get("Route", "hello");
  ASSERT_EQ(r["status"]["traffic"].size(), 2u);  // status keeps one entry per spec target
  auto table = routingTable(config_, r);
  ASSERT_TRUE(table.isOk());
  EXPECT_EQ((*table)[0].revisions, (std::vector<RevisionWeight>{{"hello-00001", 100}}));
  EXPECT_EQ(ready(get("Service", "hello")), "True");
}

json routeBody(const std::string& name, json traffic) {
  return json{{"apiVersion", "serving.knative.dev/v1"},
              {"kind", "Route"},
              {"metadata", {{"name", name}, {"namespace", kNs}}},
              {"spec", {{"traffic", traffic}}}};
}

TEST_F(ControllerTest, MissingTargets) {
  create(routeBody(
      "r1", json::array({{{"configurationName", "nope"}, {"percent", 100}, {"latestRevision", true}}})));
  create(routeBody("r2", json::array({{{"revisionName", "nope-00001"}, {"percent", 100}}})));
  settle();
  json r1 = get("Route", "r1");
  EXPECT_EQ(cond(r1, "AllTrafficAssigned").status, "False");
  EXPECT_EQ(cond(r1, "AllTrafficAssigned").reason, "ConfigurationMissing");
  EXPECT_EQ(cond(r1, "Ready").status, "False");
  EXPECT_EQ(cond(r1, "IngressReady").reason, "IngressNotConfigured");
  EXPECT_FALSE(r1["status"].contains("traffic"));
  json r2 = get("Route", "r2");
  EXPECT_EQ(cond(r2, "AllTrafficAssigned").status, "False");
  EXPECT_EQ(cond(r2, "AllTrafficAssigned").reason, "RevisionMissing");

  // The configuration appears: Unknown until it has a ready revision, then True.
  json cfg = {{"apiVersion", "serving.knative.dev/v1"},
              {"kind", "Configuration"},
              {"metadata", {{"name", "nope"}, {"namespace", kNs}}},
              {"spec", {{"template", {{"metadata", json::object()}, {"spec", containerSpec("x:1")}}}}}};
  create(cfg);
  settle();
  r1 = get("Route", "r1");
  EXPECT_EQ(cond(r1, "AllTrafficAssigned").status, "Unknown");
  EXPECT_EQ(cond(r1, "AllTrafficAssigned").reason, "RevisionMissing");
  EXPECT_EQ(annotationOf(get("Configuration", "nope"), "serving.knative.dev/routes"), "r1");
  backend_.setReady(kNs, "nope-00001");
  settle();
  r1 = get("Route", "r1");
  EXPECT_EQ(ready(r1), "True");
  EXPECT_EQ(r1["status"]["url"], "http://r1.default.example.com");
  EXPECT_EQ(r1["status"]["traffic"][0]["revisionName"], "nope-00001");
  // r2 now finds its revision too.
  EXPECT_EQ(ready(get("Route", "r2")), "True");
  EXPECT_EQ(annotationOf(get("Revision", "nope-00001"), "serving.knative.dev/routes"), "r1,r2");
}

TEST_F(ControllerTest, RevisionNotOwnedByServiceRoute) {
  createReadyService("other");
  createReadyService("hello");
  update("Service", "hello", [](json& s) {
    s["spec"]["traffic"] = json::array({{{"revisionName", "other-00001"}, {"percent", 100}}});
  });
  settle();
  json r = get("Route", "hello");
  EXPECT_EQ(cond(r, "AllTrafficAssigned").status, "False");
  EXPECT_EQ(cond(r, "AllTrafficAssigned").reason, "RevisionNotOwned");
  EXPECT_EQ(ready(get("Service", "hello")), "False");
  // The last good traffic keeps being served.
  EXPECT_EQ(r["status"]["traffic"][0]["revisionName"], "hello-00001");
}

TEST_F(ControllerTest, NotReadyRevisionTarget) {
  createReadyService("hello");
  rollOut("hello", "x:2", "hello-00002");
  backend_.setFailed(kNs, "hello-00002", "ExitCode2", "Container failed with: bad");
  settle();
  update("Service", "hello", [](json& s) {
    s["spec"]["traffic"] = json::array({{{"revisionName", "hello-00002"}, {"percent", 100}}});
  });
  settle();
  json r = get("Route", "hello");
  EXPECT_EQ(cond(r, "AllTrafficAssigned").status, "False");
  EXPECT_EQ(cond(r, "AllTrafficAssigned").reason, "RevisionMissing");
}

TEST_F(ControllerTest, DomainSelectorsTagTemplateAndClusterLocal) {
  config_.domain.domains = {{"example.com", {}}, {"prod.example.com", {{"env", "prod"}}}};
  config_.network.domain_template = "{{.Name}}-{{.Namespace}}.{{.Domain}}";
  config_.network.tag_template = "{{.Name}}-{{.Tag}}";
  makeController();
  json prod = serviceBody("shop", "x:1");
  prod["metadata"]["labels"] = {{"env", "prod"}};
  prod["spec"]["traffic"] = json::array({{{"latestRevision", true}, {"percent", 100}, {"tag", "cur"}}});
  create(prod);
  json internal = serviceBody("db", "x:1");
  internal["metadata"]["labels"] = {{"networking.knative.dev/visibility", "cluster-local"}};
  create(internal);
  settle();
  backend_.setReady(kNs, "shop-00001");
  backend_.setReady(kNs, "db-00001");
  settle();
  json shop = get("Service", "shop");
  EXPECT_EQ(shop["status"]["url"], "http://shop-default.prod.example.com");
  EXPECT_EQ(shop["status"]["traffic"][0]["url"], "http://shop-cur-default.prod.example.com");
  json db = get("Service", "db");
  EXPECT_EQ(db["status"]["url"], "http://db.default.svc.cluster.local");
  EXPECT_EQ(ready(db), "True");
}

TEST_F(ControllerTest, BadTagHostIsErrorConfig) {
  createReadyService("hello");
  update("Service", "hello", [](json& s) {
    s["spec"]["traffic"] =
        json::array({{{"latestRevision", true}, {"percent", 100}, {"tag", std::string(60, 't')}}});
  });
  settle();
  json r = get("Route", "hello");
  EXPECT_EQ(cond(r, "AllTrafficAssigned").status, "False");
  EXPECT_EQ(cond(r, "AllTrafficAssigned").reason, "ErrorConfig");
}

TEST_F(ControllerTest, DeletedRouteReleasesItsRevisions) {
  createReadyService("hello");
  create(routeBody("extra", json::array({{{"revisionName", "hello-00001"}, {"percent", 100}}})));
  settle();
  EXPECT_EQ(annotationOf(get("Revision", "hello-00001"), "serving.knative.dev/routes"), "extra,hello");
  remove("Route", "extra");
  settle();
  EXPECT_EQ(annotationOf(get("Revision", "hello-00001"), "serving.knative.dev/routes"), "hello");
  EXPECT_EQ(labelOf(get("Revision", "hello-00001"), "serving.knative.dev/routingState"), "active");
  // The Service and its Route gone (the cascade under way, Configuration not yet): reserve.
  clock_.advance(std::chrono::minutes(5));
  remove("Service", "hello");
  remove("Route", "hello");
  settle();
  json rev = get("Revision", "hello-00001");
  EXPECT_EQ(labelOf(rev, "serving.knative.dev/routingState"), "reserve");
  EXPECT_EQ(annotationOf(rev, "serving.knative.dev/routingStateModified"), formatRfc3339(clock_.now()));
  EXPECT_EQ(annotationOf(get("Configuration", "hello"), "serving.knative.dev/routes"), "");
}

// ------------------------------------------------------------ Revision

TEST_F(ControllerTest, RevisionStatusFromBackend) {
  create(serviceBody("hello", "ghcr.io/knap/hello:v1"));
  settle();
  std::string t0 = formatRfc3339(clock_.now());
  RevisionHealth h;
  h.resources_available = {"True", "", ""};
  h.container_healthy = {"False", "ExitCode1", "Container failed with: oops"};
  h.active = {"False", "NoTraffic", "scaled to zero"};
  h.actual_replicas = 0;
  h.desired_replicas = 1;
  clock_.advance(std::chrono::seconds(10));
  std::string t1 = formatRfc3339(clock_.now());
  backend_.setHealth(kNs, "hello-00001", h);
  settle();
  json rev = get("Revision", "hello-00001");
  EXPECT_EQ(cond(rev, "Ready").status, "False");
  EXPECT_EQ(cond(rev, "Ready").reason, "ExitCode1");
  EXPECT_EQ(cond(rev, "Ready").message, "Container failed with: oops");
  EXPECT_EQ(cond(rev, "ContainerHealthy").reason, "ExitCode1");
  EXPECT_EQ(cond(rev, "ResourcesAvailable").status, "True");
  const json* active = findCondition(rev["status"], "Active");
  ASSERT_NE(active, nullptr);
  EXPECT_EQ((*active)["severity"], "Info");
  EXPECT_EQ((*active)["reason"], "NoTraffic");
  EXPECT_EQ(rev["status"]["actualReplicas"], 0);
  EXPECT_EQ(rev["status"]["desiredReplicas"], 1);
  EXPECT_EQ(rev["status"]["observedGeneration"], 1);
  EXPECT_FALSE(rev["status"].contains("containerStatuses"));
  EXPECT_EQ((*findCondition(rev["status"], "Ready"))["lastTransitionTime"], t1);
  EXPECT_EQ(cond(get("Configuration", "hello"), "Ready").reason, "RevisionFailed");

  // Recovers; a scaled-to-zero revision is still Ready. lastTransitionTime moves only on status change.
  clock_.advance(std::chrono::seconds(10));
  std::string t2 = formatRfc3339(clock_.now());
  h.container_healthy = {"True", "", ""};
  h.image_digest = "ghcr.io/knap/hello@sha256:1234";
  backend_.setHealth(kNs, "hello-00001", h);
  settle();
  rev = get("Revision", "hello-00001");
  EXPECT_EQ(ready(rev), "True");
  EXPECT_EQ((*findCondition(rev["status"], "Ready"))["lastTransitionTime"], t2);
  EXPECT_EQ((*findCondition(rev["status"], "ResourcesAvailable"))["lastTransitionTime"], t1);
  EXPECT_EQ((*findCondition(rev["status"], "Active"))["lastTransitionTime"], t1);
  EXPECT_EQ(rev["status"]["containerStatuses"],
            json::array({{{"name", "user-container"}, {"imageDigest", "ghcr.io/knap/hello@sha256:1234"}}}));
  (void)t0;
  EXPECT_EQ(ready(get("Configuration", "hello")), "True");
}

TEST_F(ControllerTest, MultiContainerRevisionListsEveryContainersDigest) {
  json svc = serviceBody("multi", "ghcr.io/knap/hello:v1");
  svc["spec"]["template"]["spec"]["containers"][0]["name"] = "main";
  svc["spec"]["template"]["spec"]["containers"].push_back(
      {{"name", "side"}, {"image", "ghcr.io/knap/side:v1"}});
  create(svc);
  settle();
  RevisionHealth h;
  h.resources_available = {"True", "", ""};
  h.container_healthy = {"True", "", ""};
  h.image_digest = "ghcr.io/knap/hello@sha256:1111";
  backend_.setHealth(kNs, "multi-00001", h);
  settle();
  // Until every digest is known: the first container's only.
  EXPECT_EQ(get("Revision", "multi-00001")["status"]["containerStatuses"],
            json::array({{{"name", "main"}, {"imageDigest", "ghcr.io/knap/hello@sha256:1111"}}}));
  h.image_digests = {"ghcr.io/knap/hello@sha256:1111", "ghcr.io/knap/side@sha256:2222"};
  backend_.setHealth(kNs, "multi-00001", h);
  settle();
  EXPECT_EQ(get("Revision", "multi-00001")["status"]["containerStatuses"],
            json::array({{{"name", "main"}, {"imageDigest", "ghcr.io/knap/hello@sha256:1111"}},
                         {{"name", "side"}, {"imageDigest", "ghcr.io/knap/side@sha256:2222"}}}));
}

TEST_F(ControllerTest, EnsureOnlyOnChangeAndRemoveOnDelete) {
  createReadyService("hello");
  // Created, then changed (routingState active): two ensure() calls, never more.
  auto ensured = backend_.ensured();
  EXPECT_EQ(ensured.size(), 2u);
  EXPECT_EQ(labelOf(backend_.lastEnsured(kNs, "hello-00001"), "serving.knative.dev/routingState"), "active");
  backend_.setReady(kNs, "hello-00001");  // a backend notification with nothing new
  settle();
  EXPECT_EQ(backend_.ensured().size(), 2u);
  remove("Revision", "hello-00001");
  settle();
  EXPECT_EQ(backend_.removed(), std::vector<std::string>{"default/hello-00001"});
}

TEST_F(ControllerTest, ServiceDeletionCascadeIsTolerated) {
  createReadyService("hello");
  // The API server deletes owned objects; the controller just cleans up.
  remove("Service", "hello");
  remove("Route", "hello");
  remove("Configuration", "hello");
  remove("Revision", "hello-00001");
  settle();
  EXPECT_FALSE(exists("Configuration", "hello"));
  EXPECT_FALSE(exists("Route", "hello"));
  EXPECT_EQ(backend_.removed(), std::vector<std::string>{"default/hello-00001"});
}

// ------------------------------------------------------------------ GC

TEST_F(ControllerTest, GcQuickCollect) {
  config_.gc.retain_since_create_time = std::nullopt;
  config_.gc.retain_since_last_active_time = std::nullopt;
  config_.gc.min_non_active_revisions = 0;
  config_.gc.max_non_active_revisions = 0;
  makeController();
  createReadyService("hello");
  rollOut("hello", "x:2", "hello-00002");
  rollOut("hello", "x:3", "hello-00003");
  EXPECT_FALSE(exists("Revision", "hello-00001"));
  EXPECT_FALSE(exists("Revision", "hello-00002"));
  EXPECT_TRUE(exists("Revision", "hello-00003"));
  EXPECT_EQ(backend_.removed(), (std::vector<std::string>{"default/hello-00001", "default/hello-00002"}));
  EXPECT_EQ(ready(get("Service", "hello")), "True");
}

TEST_F(ControllerTest, GcKeepsRoutedPinnedAndMinRevisions) {
  config_.gc.retain_since_create_time = std::nullopt;
  config_.gc.retain_since_last_active_time = std::nullopt;
  config_.gc.min_non_active_revisions = 1;
  config_.gc.max_non_active_revisions = 1;
  makeController();
  createReadyService("hello");
  update("Service", "hello", [](json& s) {
    s["spec"]["traffic"] = json::array({{{"revisionName", "hello-00001"}, {"percent", 100}}});
  });
  rollOut("hello", "x:2", "hello-00002");
  rollOut("hello", "x:3", "hello-00003");
  rollOut("hello", "x:4", "hello-00004");
  // 00001 routed (active), 00004 latest ready; of the reserve 00002/00003 one may stay (max 1, min 1).
  EXPECT_TRUE(exists("Revision", "hello-00001"));
  EXPECT_FALSE(exists("Revision", "hello-00002"));
  EXPECT_TRUE(exists("Revision", "hello-00003"));
  EXPECT_TRUE(exists("Revision", "hello-00004"));
}

TEST_F(ControllerTest, GcByAgeWhenTimePasses) {
  config_.gc.retain_since_create_time = Seconds(3600);
  config_.gc.retain_since_last_active_time = Seconds(3600);
  config_.gc.min_non_active_revisions = 0;
  config_.gc.max_non_active_revisions = std::nullopt;
  makeController();
  createReadyService("hello");
  update("Revision", "hello-00001",
         [](json& r) { r["metadata"]["annotations"]["serving.knative.dev/no-gc"] = "true"; });
  rollOut("hello", "x:2", "hello-00002");
  rollOut("hello", "x:3", "hello-00003");
  settle();
  EXPECT_TRUE(exists("Revision", "hello-00002"));  // too young
  clock_.advance(std::chrono::hours(2));
  ctl_->enqueueAll();
  settle();
  EXPECT_TRUE(exists("Revision", "hello-00001"));   // no-gc
  EXPECT_FALSE(exists("Revision", "hello-00002"));  // reserve and stale
  EXPECT_TRUE(exists("Revision", "hello-00003"));   // latest ready
}

// -------------------------------------------------------------- worker

TEST_F(ControllerTest, WorkerThreadConvergesAndGoesQuiet) {
  ctl_->start();
  create(serviceBody("hello", "x:1"));
  ASSERT_TRUE(ctl_->waitIdle(std::chrono::seconds(10)));
  ASSERT_TRUE(exists("Revision", "hello-00001"));
  backend_.setReady(kNs, "hello-00001");
  ASSERT_TRUE(ctl_->waitIdle(std::chrono::seconds(10)));
  EXPECT_EQ(ready(get("Service", "hello")), "True");
  int64_t rv = store_->currentResourceVersion();
  ctl_->enqueueAll();
  ASSERT_TRUE(ctl_->waitIdle(std::chrono::seconds(10)));
  EXPECT_EQ(store_->currentResourceVersion(), rv);
  ctl_->stop();
}

TEST_F(ControllerTest, WorkerWithConcurrentWritersAndBackendCallbacks) {
  ctl_->start();
  constexpr int kServices = 6;
  for (int i = 0; i < kServices; ++i) create(serviceBody("s" + std::to_string(i), "x:1"));
  ASSERT_TRUE(ctl_->waitIdle(std::chrono::seconds(30)));
  std::thread backend_thread([&] {
    for (int i = 0; i < kServices; ++i) backend_.setReady(kNs, "s" + std::to_string(i) + "-00001");
  });
  // Users edit the Services while the controller writes their status: retry on conflict, as kubectl would.
  for (int i = 0; i < kServices; ++i) {
    Key key{"Service", kNs, "s" + std::to_string(i)};
    for (int attempt = 0;; ++attempt) {
      ASSERT_LT(attempt, 50);
      auto o = store_->get(key);
      ASSERT_TRUE(o.isOk());
      json body = o->body;
      body["metadata"]["labels"]["edited"] = "yes";
      auto u = store_->update(key, body, o->resource_version);
      if (u.isOk()) break;
      ASSERT_EQ(u.status().code(), Code::kConflict);
    }
  }
  backend_thread.join();
  ASSERT_TRUE(ctl_->waitIdle(std::chrono::seconds(30)));
  ctl_->stop();
  for (int i = 0; i < kServices; ++i) {
    std::string name = "s" + std::to_string(i);
    json s = get("Service", name);
    EXPECT_EQ(ready(s), "True") << s.dump();
    EXPECT_EQ(labelOf(get("Route", name), "edited"), "yes");
    EXPECT_FALSE(exists("Revision", name + "-00002"));
  }
  // Nothing left to do.
  int64_t rv = store_->currentResourceVersion();
  EXPECT_EQ(ctl_->runPending(), 0u);
  EXPECT_EQ(store_->currentResourceVersion(), rv);
}

// Objects written straight into the store, bypassing admission (issue 15's
// exception policy): each fails its own reconcile — no exception reaches the
// worker — and every other object keeps reconciling.
constexpr int kMalformedObjects = 9;
json malformedObjects(int i) {
  switch (i) {
    case 0: {  // a Service whose spec.template is a string
      json svc = serviceBody("bad-template", "x:1");
      svc["spec"]["template"] = "a string";
      return svc;
    }
    case 1: {  // a Service whose spec is a number and metadata.labels a list
      json svc = serviceBody("bad-spec", "x:1");
      svc["spec"] = 42;
      svc["metadata"]["labels"] = json::array({1, 2});
      return svc;
    }
    case 2: {  // a Revision whose annotations are a number and spec a string
      return json{{"apiVersion", "serving.knative.dev/v1"},
                  {"kind", "Revision"},
                  {"metadata", {{"name", "bad-rev"}, {"namespace", kNs}, {"annotations", 7}}},
                  {"spec", "a string"}};
    }
    case 3: {  // a Configuration whose controller ownerReference has a string "controller" and a numeric kind
      json cfg = {{"apiVersion", "serving.knative.dev/v1"},
                  {"kind", "Configuration"},
                  {"metadata",
                   {{"name", "bad-owner"},
                    {"namespace", kNs},
                    {"ownerReferences", json::array({{{"kind", 5}, {"name", "x"}, {"controller", "yes"}}})}}},
                  {"spec", {{"template", json::array()}}}};
      return cfg;
    }
    case 4: {  // a Route whose traffic is an object of numbers
      return json{{"apiVersion", "serving.knative.dev/v1"},
                  {"kind", "Route"},
                  {"metadata", {{"name", "bad-route"}, {"namespace", kNs}}},
                  {"spec", {{"traffic", {{"percent", 100}}}}}};
    }
    case 5: {  // a Route whose traffic targets have the wrong types
      return json{
          {"apiVersion", "serving.knative.dev/v1"},
          {"kind", "Route"},
          {"metadata", {{"name", "bad-targets"}, {"namespace", kNs}, {"labels", "x"}}},
          {"spec",
           {{"traffic", json::array({{{"percent", "100"}, {"revisionName", 5}, {"tag", 7}},
                                     {{"latestRevision", "yes"}, {"configurationName", json::array()}}})}}},
          {"status", "x"}};
    }
    case 6: {  // a Service whose metadata fields and traffic have the wrong types
      json svc = serviceBody("bad-meta", "x:1");
      svc["metadata"]["annotations"] = 5;
      svc["metadata"]["generation"] = "one";
      svc["spec"]["template"]["metadata"] = "x";
      svc["spec"]["traffic"] = json::array({{{"percent", "all"}, {"latestRevision", 1}}});
      svc["status"] = json::array();
      return svc;
    }
    case 7: {  // a Configuration whose containers are a string
      return json{{"apiVersion", "serving.knative.dev/v1"},
                  {"kind", "Configuration"},
                  {"metadata", {{"name", "bad-containers"}, {"namespace", kNs}, {"ownerReferences", "x"}}},
                  {"spec", {{"template", {{"metadata", {{"labels", 3}}}, {"spec", {{"containers", "x"}}}}}}}};
    }
    default: {  // a DomainMapping whose spec is a string
      return json{{"apiVersion", "serving.knative.dev/v1beta1"},
                  {"kind", "DomainMapping"},
                  {"metadata", {{"name", "bad.example.com"}, {"namespace", kNs}}},
                  {"spec", "x"}};
    }
  }
}

TEST_F(ControllerTest, MalformedStoredObjectsFailAloneAndOthersKeepReconciling) {
  for (int i = 0; i < kMalformedObjects; ++i) create(malformedObjects(i));
  ASSERT_NO_THROW(createReadyService("good"));
  EXPECT_EQ(ready(get("Service", "good")), "True");
  EXPECT_TRUE(exists("Route", "good"));
  // The malformed objects are still there, and retried with back-off rather than in a hot loop.
  EXPECT_TRUE(exists("Service", "bad-template"));
  ASSERT_NO_THROW(settle());
  clock_.advance(std::chrono::minutes(10));
  ASSERT_NO_THROW(settle());
}

TEST_F(ControllerTest, WorkerSurvivesMalformedStoredObjects) {
  ctl_->start();
  for (int i = 0; i < kMalformedObjects; ++i) create(malformedObjects(i));
  create(serviceBody("good", "x:1"));
  // Keys waiting for a back-off retry do not count as busy.
  ASSERT_TRUE(ctl_->waitIdle(std::chrono::seconds(10)));
  ASSERT_TRUE(exists("Revision", "good-00001"));
  backend_.setReady(kNs, "good-00001");
  ASSERT_TRUE(ctl_->waitIdle(std::chrono::seconds(10)));
  EXPECT_EQ(ready(get("Service", "good")), "True");
  ctl_->stop();
}

// A backend whose ensure() raises the nlohmann::json type_error a third-party
// call raises on a stored object of an unexpected shape, for one revision.
class ThrowingBackend final : public RevisionBackend {
 public:
  ThrowingBackend(RevisionBackend& inner, std::string throw_for)
      : inner_(inner), throw_for_(std::move(throw_for)) {}
  void ensure(const json& revision) override {
    if (metaString(revision, "name") == throw_for_) {
      json not_an_object = "a string";
      (void)not_an_object.value("spec", json::object());  // throws type_error 306
    }
    inner_.ensure(revision);
  }
  void remove(const std::string& ns, const std::string& name) override { inner_.remove(ns, name); }
  RevisionHealth health(const std::string& ns, const std::string& name) override {
    return inner_.health(ns, name);
  }
  void setOnChange(std::function<void(const std::string&, const std::string&)> fn) override {
    inner_.setOnChange(std::move(fn));
  }

 private:
  RevisionBackend& inner_;
  std::string throw_for_;
};

// An exception inside one reconcile fails that key alone (kInternal, retried
// with back-off) instead of unwinding out of the worker: the other Service
// still becomes Ready.
TEST_F(ControllerTest, ReconcileThatThrowsFailsItsKeyAlone) {
  ctl_.reset();
  ThrowingBackend throwing(backend_, "boom-00001");
  Controller ctl(*faulty_, throwing, clock_, config_, backoff_);
  create(serviceBody("boom", "x:1"));
  create(serviceBody("good", "x:1"));
  ASSERT_NO_THROW(ctl.runPending(5000));
  backend_.setReady(kNs, "good-00001");
  ASSERT_NO_THROW(ctl.runPending(5000));
  EXPECT_EQ(ready(get("Service", "good")), "True");
  EXPECT_TRUE(exists("Revision", "boom-00001"));
  EXPECT_GT(ctl.stats().failures, 0u);
  // Retried after the back-off, and failing alone again.
  uint64_t failures = ctl.stats().failures;
  clock_.advance(std::chrono::seconds(5));
  ASSERT_NO_THROW(ctl.runPending(5000));
  EXPECT_GT(ctl.stats().failures, failures);
  EXPECT_EQ(ready(get("Service", "good")), "True");
}

// A Store that lets a test slip a competing write in before the next transaction.
class InterferingStore final : public store::Store {
 public:
  explicit InterferingStore(store::Store& inner) : inner_(inner) {}
  std::function<void()> before_next_transact;
  int transactions = 0;
  int conflicts = 0;

  StatusOr<store::Object> get(const Key& key) override { return inner_.get(key); }
  StatusOr<std::vector<store::Object>> list(const std::string& kind, const std::string& ns) override {
    return inner_.list(kind, ns);
  }
  int64_t currentResourceVersion() override { return inner_.currentResourceVersion(); }
  Status transact(const std::function<Status(store::Txn&)>& fn) override {
    ++transactions;
    if (before_next_transact) {
      auto hook = std::move(before_next_transact);
      before_next_transact = nullptr;
      hook();
    }
    Status st = inner_.transact(fn);
    if (st.code() == Code::kConflict) ++conflicts;
    return st;
  }
  StatusOr<std::vector<store::Event>> eventsSince(int64_t since_rv, const std::string& kind) override {
    return inner_.eventsSince(since_rv, kind);
  }
  int addListener(std::function<void(const store::Event&)> fn) override {
    return inner_.addListener(std::move(fn));
  }
  void removeListener(int id) override { inner_.removeListener(id); }

 private:
  store::Store& inner_;
};

TEST_F(ControllerTest, ConflictingWriteIsRetriedNotOverwritten) {
  createReadyService("hello");
  InterferingStore interfering(*store_);
  ctl_.reset();
  ctl_ = std::make_unique<Controller>(interfering, backend_, clock_, config_);
  update("Service", "hello", [](json& s) { s["metadata"]["labels"]["app"] = "v2"; });
  // Someone else changes the Configuration between our read and our write.
  interfering.before_next_transact = [&] {
    update("Configuration", "hello",
           [](json& c) { c["metadata"]["annotations"]["example.com/other"] = "1"; });
  };
  ASSERT_TRUE(ctl_->reconcileOnce(Key{"Service", kNs, "hello"}).isOk());
  EXPECT_EQ(interfering.conflicts, 1);  // the first write hit kConflict and the reconcile was redone
  json c = get("Configuration", "hello");
  EXPECT_EQ(labelOf(c, "app"), "v2");
  // Redone from a fresh read: the Service's labels won and the stray annotation was pruned.
  EXPECT_EQ(annotationOf(c, "example.com/other"), "");
  ctl_.reset();  // unregister from `interfering` before it goes away
}

// ------------------------------------------- work queue, cache and faults

TEST_F(ControllerTest, AStoreErrorIsRetriedWithBackoffUntilTheObjectIsReconciled) {
  using std::chrono::milliseconds;
  faulty_->fail_writes = true;  // the disk fills right after the API acknowledged the Service
  create(serviceBody("hello", "ghcr.io/knap/hello:v1"));
  settle();
  EXPECT_FALSE(exists("Configuration", "hello"));
  EXPECT_EQ(ctl_->stats().failures, 1u);
  EXPECT_EQ(ctl_->stats().delayed, 1u) << "the failed key waits for its back-off, it is not dropped";
  // While writes keep failing the retries come 100ms, 200ms, 400ms apart.
  for (int step : {100, 200}) {
    clock_.advance(milliseconds(step - 1));
    EXPECT_EQ(ctl_->runPending(), 0u) << "retried before its back-off of " << step << "ms";
    clock_.advance(milliseconds(1));
    EXPECT_EQ(ctl_->runPending(), 1u) << "not retried after " << step << "ms";
  }
  EXPECT_EQ(ctl_->stats().failures, 3u);
  // Space returns; no event arrives, the next retry does the work.
  faulty_->fail_writes = false;
  clock_.advance(milliseconds(400));
  settle();
  EXPECT_TRUE(exists("Configuration", "hello"));
  EXPECT_TRUE(exists("Route", "hello"));
  EXPECT_TRUE(exists("Revision", "hello-00001"));
  backend_.setReady(kNs, "hello-00001");
  settle();
  EXPECT_EQ(ready(get("Service", "hello")), "True");
  EXPECT_EQ(ctl_->stats().delayed, 0u);
  EXPECT_EQ(ctl_->stats().failures, 3u);
}

TEST_F(ControllerTest, AFailedStatusWriteOfAReadyRevisionIsRetried) {
  create(serviceBody("hello", "ghcr.io/knap/hello:v1"));
  settle();
  faulty_->fail_writes = true;
  backend_.setReady(kNs, "hello-00001");  // the backend says so once; the write fails
  settle();
  EXPECT_NE(ready(get("Revision", "hello-00001")), "True");
  faulty_->fail_writes = false;
  clock_.advance(std::chrono::seconds(2));  // the longest back-off
  settle();
  EXPECT_EQ(ready(get("Revision", "hello-00001")), "True");
  EXPECT_EQ(ready(get("Service", "hello")), "True");
}

TEST_F(ControllerTest, UnreadableStoreAtStartIsRetriedToo) {
  createReadyService("hello");
  faulty_->fail_reads = true;
  makeController();  // cannot fill its cache
  ctl_->enqueueAll();
  ctl_->enqueue(Key{"Service", kNs, "hello"});
  settle();
  EXPECT_GE(ctl_->stats().failures, 1u);
  faulty_->fail_reads = false;
  update("Service", "hello",
         [](json& s) { s["spec"]["template"]["spec"]["containers"][0]["image"] = "x:v2"; });
  clock_.advance(std::chrono::seconds(2));
  settle();
  EXPECT_TRUE(exists("Revision", "hello-00002"));
}

TEST_F(ControllerTest, ANewServiceIsNotQueuedBehindAResync) {
  for (int i = 0; i < 20; ++i) createReadyService("s" + std::to_string(i));
  ctl_->enqueueAll();
  EXPECT_GE(ctl_->stats().queued, 80u);
  create(serviceBody("new", "ghcr.io/knap/hello:v1"));
  // Service -> Configuration -> Revision: a handful of reconciles, not 80.
  ctl_->runPending(3);
  EXPECT_TRUE(exists("Revision", "new-00001"));
  settle();
}

TEST_F(ControllerTest, AChangeReadsNoListAndARestartListsEachKindOnce) {
  for (int i = 0; i < 30; ++i) createReadyService("s" + std::to_string(i));
  faulty_->resetCounters();
  rollOut("s7", "ghcr.io/knap/hello:v2", "s7-00002");
  EXPECT_EQ(faulty_->lists, 0) << "a reconcile must not list a kind";
  const int gets_for_a_rollout = faulty_->gets;
  EXPECT_LT(gets_for_a_rollout, 60) << "reads grow with the change, not with the 30 Services";
  update("Service", "s7", [](json& s) { s["metadata"]["labels"] = {{"team", "a"}}; });
  faulty_->resetCounters();
  update("Service", "s7", [](json& s) { s["metadata"]["labels"] = {{"team", "b"}}; });
  settle();
  EXPECT_EQ(faulty_->lists, 0);
  EXPECT_LT(faulty_->gets, 30);

  faulty_->resetCounters();
  int64_t rv = store_->currentResourceVersion();
  makeController();
  ctl_->enqueueAll();
  settle();
  EXPECT_EQ(store_->currentResourceVersion(), rv) << "a restart rewrites nothing";
  EXPECT_EQ(faulty_->lists, 6)
      << "6 kinds listed once, by the cache; the start-up resync takes its keys from it";
  // Each object reconciled once: nothing changed, so nothing sets off another reconcile (the Routes were
  // once re-reconciled after every Configuration and Revision: ~1.75 reconciles per object).
  size_t objects = 0;
  for (const char* kind : {"Service", "Configuration", "Revision", "Route"})
    objects += store_->list(kind, "")->size();
  EXPECT_EQ(ctl_->stats().reconciles, objects);
  // The next resync (the daemon's hourly one) lists again: the safety net for a missed event.
  faulty_->resetCounters();
  ctl_->enqueueAll();
  settle();
  EXPECT_EQ(faulty_->lists, 6);
  // One get per reconciled key plus the few children each reads: linear.
  EXPECT_LT(faulty_->gets, 30 * 4 * 4);
}

TEST_F(ControllerTest, DeletingARouteReleasesOnlyTheRevisionsItAnnotated) {
  createReadyService("a");
  createReadyService("b");
  ASSERT_EQ(labelOf(get("Revision", "b-00001"), "serving.knative.dev/routingState"), "active");
  remove("Route", "a");
  settle();
  // The Service recreates its Route; in between "a" was released, "b" never touched.
  EXPECT_EQ(annotationOf(get("Revision", "b-00001"), "serving.knative.dev/routes"), "b");
  EXPECT_EQ(annotationOf(get("Revision", "a-00001"), "serving.knative.dev/routes"), "a");
  EXPECT_EQ(labelOf(get("Revision", "a-00001"), "serving.knative.dev/routingState"), "active");
}

// ------------------------------------------------------------ DomainMapping

json domainMappingBody(const std::string& domain, const std::string& ns, const std::string& target) {
  return json{{"apiVersion", "serving.knative.dev/v1beta1"},
              {"kind", "DomainMapping"},
              {"metadata", {{"name", domain}, {"namespace", ns}, {"generation", 1}}},
              {"spec",
               {{"ref",
                 {{"apiVersion", "serving.knative.dev/v1"},
                  {"kind", "Service"},
                  {"name", target},
                  {"namespace", ns}}}}}};
}

TEST_F(ControllerTest, DomainMappingTakesTheClaimAndFollowsItsService) {
  createReadyService("hello");
  ASSERT_TRUE(store_
                  ->create(Key{"DomainMapping", kNs, "app.example.org"},
                           domainMappingBody("app.example.org", kNs, "hello"))
                  .isOk());
  settle();
  json dm = get("DomainMapping", "app.example.org");
  EXPECT_EQ(dm["status"]["url"], "http://app.example.org");
  EXPECT_EQ(dm["status"]["address"]["url"], "http://app.example.org");
  EXPECT_EQ(dm["status"]["observedGeneration"], 1);
  for (const char* c :
       {"DomainClaimed", "ReferenceResolved", "IngressReady", "CertificateProvisioned", "Ready"})
    EXPECT_EQ(cond(dm, c).status, "True") << c << " " << dm["status"].dump();
  auto claim = store_->get(Key{"ClusterDomainClaim", "", "app.example.org"});
  ASSERT_TRUE(claim.isOk());
  EXPECT_EQ(claim->body["spec"]["namespace"], kNs);

  // The router's entry: the Service's Route main split.
  std::vector<json> routes = {get("Route", "hello")};
  auto targets = domainTargets(config_, {dm}, routes);
  ASSERT_EQ(targets.size(), 1u);
  EXPECT_EQ(targets[0].host, "app.example.org");
  EXPECT_EQ(targets[0].route, "hello");
  ASSERT_EQ(targets[0].split.revisions.size(), 1u);
  EXPECT_EQ(targets[0].split.revisions[0].revision, "hello-00001");

  // Deleting the Service: the reference no longer resolves.
  remove("Service", "hello");
  remove("Route", "hello");
  settle();
  dm = get("DomainMapping", "app.example.org");
  EXPECT_EQ(cond(dm, "ReferenceResolved").status, "False");
  EXPECT_EQ(cond(dm, "ReferenceResolved").reason, "ResolveFailed");
  EXPECT_NE(cond(dm, "ReferenceResolved").message.find("services.serving.knative.dev \"hello\" not found"),
            std::string::npos);
  EXPECT_EQ(cond(dm, "Ready").status, "False");
  EXPECT_TRUE(domainTargets(config_, {dm}, {}).empty());

  // Deleting the mapping releases the claim.
  remove("DomainMapping", "app.example.org");
  settle();
  EXPECT_FALSE(store_->get(Key{"ClusterDomainClaim", "", "app.example.org"}).isOk());
}

TEST_F(ControllerTest, SecondNamespaceGetsDomainAlreadyClaimedUntilTheFirstGoes) {
  createReadyService("hello");
  ASSERT_TRUE(store_
                  ->create(Key{"DomainMapping", kNs, "app.example.org"},
                           domainMappingBody("app.example.org", kNs, "hello"))
                  .isOk());
  settle();
  ASSERT_TRUE(store_
                  ->create(Key{"DomainMapping", "other", "app.example.org"},
                           domainMappingBody("app.example.org", "other", "hello"))
                  .isOk());
  settle();
  auto other = store_->get(Key{"DomainMapping", "other", "app.example.org"});
  ASSERT_TRUE(other.isOk());
  EXPECT_EQ(cond(other->body, "DomainClaimed").status, "False");
  EXPECT_EQ(cond(other->body, "DomainClaimed").reason, "DomainAlreadyClaimed");
  EXPECT_EQ(cond(other->body, "DomainClaimed").message,
            "The domain name is already in use by another DomainMapping");
  EXPECT_EQ(cond(other->body, "Ready").reason, "DomainAlreadyClaimed");
  // Only the holder gets a router entry.
  auto targets =
      domainTargets(config_, {get("DomainMapping", "app.example.org"), other->body}, {get("Route", "hello")});
  ASSERT_EQ(targets.size(), 1u);
  EXPECT_EQ(targets[0].ns, kNs);

  remove("DomainMapping", "app.example.org");
  settle();
  auto claim = store_->get(Key{"ClusterDomainClaim", "", "app.example.org"});
  ASSERT_TRUE(claim.isOk());
  EXPECT_EQ(claim->body["spec"]["namespace"], "other");
  other = store_->get(Key{"DomainMapping", "other", "app.example.org"});
  EXPECT_EQ(cond(other->body, "DomainClaimed").status, "True");
  // No Service "hello" in "other": the reference does not resolve there.
  EXPECT_EQ(cond(other->body, "ReferenceResolved").status, "False");
}

TEST_F(ControllerTest, WithoutAutocreateADomainMappingNeedsAClaim) {
  config_.network.autocreate_cluster_domain_claims = false;
  makeController();
  createReadyService("hello");
  ASSERT_TRUE(store_
                  ->create(Key{"DomainMapping", kNs, "app.example.org"},
                           domainMappingBody("app.example.org", kNs, "hello"))
                  .isOk());
  settle();
  EXPECT_EQ(cond(get("DomainMapping", "app.example.org"), "DomainClaimed").status, "False");
  EXPECT_FALSE(store_->get(Key{"ClusterDomainClaim", "", "app.example.org"}).isOk());
  ASSERT_TRUE(store_
                  ->create(Key{"ClusterDomainClaim", "", "app.example.org"},
                           json{{"apiVersion", "networking.internal.knative.dev/v1alpha1"},
                                {"kind", "ClusterDomainClaim"},
                                {"metadata", {{"name", "app.example.org"}}},
                                {"spec", {{"namespace", kNs}}}})
                  .isOk());
  settle();
  EXPECT_EQ(ready(get("DomainMapping", "app.example.org")), "True");
  remove("DomainMapping", "app.example.org");
  settle();
  EXPECT_TRUE(
      store_->get(Key{"ClusterDomainClaim", "", "app.example.org"}).isOk());  // the operator's to delete
}

// ------------------------------------------------------------ Certificates

// With external-domain-tls Enabled and a certificate source (the built-in
// ACME client): the hosts' certificate states the source reports.
class CertificateSourceTest : public ControllerTest {
 protected:
  struct FakeCerts : CertificateStatus {
    std::map<std::string, CertificateCondition> states;
    std::optional<CertificateCondition> certificateFor(const std::string& host) const override {
      auto it = states.find(host);
      if (it == states.end()) return std::nullopt;
      return it->second;
    }
  };
  void SetUp() override {
    ControllerTest::SetUp();
    config_.network.other["external-domain-tls"] = "Enabled";
    makeController();
    ctl_->setCertificateStatus(&certs_);
  }
  void createDomainMapping(const std::string& domain) {
    ASSERT_TRUE(
        store_->create(Key{"DomainMapping", kNs, domain}, domainMappingBody(domain, kNs, "hello")).isOk());
  }
  FakeCerts certs_;
};

// An object whose one external host has a certificate: a Route, or a
// DomainMapping (whose target Route's own certificate is issued).
struct CertifiedKind {
  std::string kind, name, host, address_url;
};

class CertificateProvisionedTest : public CertificateSourceTest,
                                   public ::testing::WithParamInterface<CertifiedKind> {};

// The object's url is https:// and its CertificateProvisioned (and Ready)
// follow its host's certificate: pending, failed, issued.
TEST_P(CertificateProvisionedTest, FollowsTheCertificateSource) {
  const CertifiedKind& k = GetParam();
  const bool mapping = k.kind == "DomainMapping";
  certs_.states["hello.default.example.com"] = {CertificateCondition::State::kIssued, ""};
  certs_.states[k.host] = {CertificateCondition::State::kPending, ""};
  createReadyService("hello");
  if (mapping) createDomainMapping(k.host);
  settle();
  json o = get(k.kind, k.name);
  EXPECT_EQ(o["status"]["url"], "https://" + k.host);
  EXPECT_EQ(o["status"]["address"]["url"], k.address_url);
  EXPECT_EQ(cond(o, "CertificateProvisioned").status, "Unknown");
  EXPECT_EQ(cond(o, "CertificateProvisioned").reason, "CertificateNotReady");
  EXPECT_NE(cond(o, "CertificateProvisioned").message.find(k.host), std::string::npos);
  EXPECT_EQ(ready(o), "Unknown");

  certs_.states[k.host] = {CertificateCondition::State::kFailed,
                           "urn:ietf:params:acme:error:connection: refused"};
  ctl_->enqueue(Key{k.kind, kNs, k.name});
  settle();
  o = get(k.kind, k.name);
  EXPECT_EQ(cond(o, "CertificateProvisioned").status, "False");
  EXPECT_EQ(cond(o, "CertificateProvisioned").reason, "CertificateProvisionFailed");
  EXPECT_NE(
      cond(o, "CertificateProvisioned").message.find(k.host + ": urn:ietf:params:acme:error:connection"),
      std::string::npos);
  EXPECT_EQ(ready(o), "False");
  if (mapping) {
    EXPECT_EQ(cond(o, "IngressReady").status, "True");  // the host is served meanwhile (for HTTP-01 too)
    EXPECT_EQ(ready(get("Route", "hello")), "True");    // the target's own certificate is unaffected
  }

  certs_.states[k.host] = {CertificateCondition::State::kIssued, ""};
  ctl_->enqueue(Key{k.kind, kNs, k.name});
  settle();
  o = get(k.kind, k.name);
  EXPECT_EQ(cond(o, "CertificateProvisioned").status, "True");
  EXPECT_EQ(cond(o, "CertificateProvisioned").reason, "CertificateProvisioned");
  EXPECT_EQ(ready(o), "True");
  EXPECT_EQ(ready(get("Service", "hello")), "True");
}

INSTANTIATE_TEST_SUITE_P(RouteAndDomainMapping, CertificateProvisionedTest,
                         ::testing::Values(CertifiedKind{"Route", "hello", "hello.default.example.com",
                                                         "http://hello.default.svc.cluster.local"},
                                           CertifiedKind{"DomainMapping", "app.example.org",
                                                         "app.example.org", "https://app.example.org"}),
                         [](const ::testing::TestParamInfo<CertifiedKind>& info) { return info.param.kind; });

// A DomainMapping with spec.tls (the user's own Secret) needs no certificate
// from the source; a host the source has not been handed yet (the router
// does not serve it yet) is pending, not True.
TEST_F(CertificateSourceTest, DomainMappingWithItsOwnSecretOrANewHost) {
  certs_.states["hello.default.example.com"] = {CertificateCondition::State::kIssued, ""};
  createReadyService("hello");
  json own = domainMappingBody("own.example.org", kNs, "hello");
  own["spec"]["tls"] = {{"secretName", "own-tls"}};
  certs_.states["own.example.org"] = {CertificateCondition::State::kFailed, "not asked"};
  ASSERT_TRUE(store_->create(Key{"DomainMapping", kNs, "own.example.org"}, own).isOk());
  settle();
  json dm = get("DomainMapping", "own.example.org");
  EXPECT_EQ(dm["status"]["url"], "https://own.example.org");
  EXPECT_EQ(cond(dm, "CertificateProvisioned").status, "True");
  EXPECT_EQ(cond(dm, "CertificateProvisioned").reason, "CertificateNotRequired");
  EXPECT_EQ(ready(dm), "True");

  createDomainMapping("new.example.org");
  settle();
  dm = get("DomainMapping", "new.example.org");
  EXPECT_EQ(cond(dm, "CertificateProvisioned").status, "Unknown");
  EXPECT_EQ(cond(dm, "CertificateProvisioned").reason, "CertificateNotReady");
  EXPECT_EQ(ready(dm), "Unknown");
}

}  // namespace
}  // namespace knap::controller
