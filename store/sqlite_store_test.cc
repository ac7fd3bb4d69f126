#include "store/sqlite_store.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace knap::store {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// A fresh directory under /tmp, removed at the end of the test.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/knap-store-test-XXXXXX";
    const char* p = mkdtemp(tmpl);
    EXPECT_NE(p, nullptr);
    path_ = p ? p : "/tmp";
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

Key svc(const std::string& name, const std::string& ns = "default") {
  return {"Service", ns, name};
}

json serviceBody(const std::string& image) {
  return json{{"apiVersion", "serving.knative.dev/v1"},
              {"kind", "Service"},
              {"metadata", {{"labels", {{"app", "x"}}}}},
              {"spec", {{"template", {{"spec", {{"containers", {{{"image", image}}}}}}}}}}};
}

std::unique_ptr<SqliteStore> mustOpen(const std::string& path, TimeSource& clock, int64_t history = 10000) {
  auto s = SqliteStore::open(path, clock, history);
  EXPECT_TRUE(s.isOk()) << s.status().toString();
  return s.isOk() ? std::move(s).value() : nullptr;
}

// Runs a query on a raw connection and returns the first column of the first row.
std::string rawQuery(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  std::string out;
  EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK) << sqlite3_errmsg(db);
  if (stmt && sqlite3_step(stmt) == SQLITE_ROW && sqlite3_column_text(stmt, 0)) {
    out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
  }
  sqlite3_finalize(stmt);
  sqlite3_close(db);
  return out;
}

void rawExec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* err = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  EXPECT_EQ(rc, SQLITE_OK) << (err ? err : "");
  sqlite3_free(err);
  sqlite3_close(db);
}

class SqliteStoreTest : public testing::Test {
 protected:
  void SetUp() override { store_ = mustOpen(":memory:", clock_); }
  SimulatedTimeSource clock_;
  std::unique_ptr<SqliteStore> store_;
};

// --- CRUD -----------------------------------------------------------------

TEST_F(SqliteStoreTest, CreateSetsServerOwnedMetadata) {
  json body = serviceBody("img:1");
  body["metadata"]["name"] = "other";  // forced to the key
  body["metadata"]["namespace"] = "elsewhere";
  body["metadata"]["uid"] = "client-chosen";  // overwritten
  body["metadata"]["generation"] = 7;
  body["metadata"]["resourceVersion"] = "999";
  auto created = store_->create(svc("hello"), body);
  ASSERT_TRUE(created.isOk()) << created.status().toString();
  const json& m = created->body["metadata"];
  EXPECT_EQ(m["name"], "hello");
  EXPECT_EQ(m["namespace"], "default");
  EXPECT_EQ(m["generation"], 1);
  EXPECT_EQ(m["creationTimestamp"], "2026-01-01T00:00:00Z");
  EXPECT_EQ(m["resourceVersion"], "1");
  EXPECT_EQ(created->resource_version, 1);
  std::string uid = m["uid"];
  EXPECT_TRUE(std::regex_match(
      uid, std::regex("[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")))
      << uid;
  EXPECT_EQ(m["labels"]["app"], "x");

  auto got = store_->get(svc("hello"));
  ASSERT_TRUE(got.isOk());
  EXPECT_EQ(got->body, created->body);
  EXPECT_EQ(got->resource_version, 1);
  EXPECT_EQ(store_->currentResourceVersion(), 1);
}

TEST_F(SqliteStoreTest, UidsAreUnique) {
  std::set<std::string> uids;
  for (int i = 0; i < 50; ++i) {
    auto o = store_->create(svc("s" + std::to_string(i)), serviceBody("i"));
    ASSERT_TRUE(o.isOk());
    uids.insert(o->body["metadata"]["uid"].get<std::string>());
  }
  EXPECT_EQ(uids.size(), 50u);
}

TEST_F(SqliteStoreTest, CreateTwiceIsAlreadyExists) {
  ASSERT_TRUE(store_->create(svc("hello"), serviceBody("a")).isOk());
  auto again = store_->create(svc("hello"), serviceBody("b"));
  ASSERT_FALSE(again.isOk());
  EXPECT_EQ(again.status().code(), Code::kAlreadyExists);
  EXPECT_EQ(again.status().message(), "services.serving.knative.dev \"hello\" already exists");
  EXPECT_EQ(store_->currentResourceVersion(), 1);
  // Same name in another namespace or of another kind is a different object.
  EXPECT_TRUE(store_->create(svc("hello", "other"), serviceBody("b")).isOk());
  EXPECT_TRUE(store_->create({"Route", "default", "hello"}, json::object()).isOk());
}

TEST_F(SqliteStoreTest, RejectsBadInput) {
  EXPECT_EQ(store_->create(svc(""), serviceBody("a")).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(store_->create({"", "default", "x"}, serviceBody("a")).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(store_->create(svc("x"), json::array()).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(store_->create(svc("x"), json{{"metadata", 5}}).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(store_->currentResourceVersion(), 0);
}

TEST_F(SqliteStoreTest, MissingObjectsAreNotFound) {
  auto g = store_->get(svc("nope"));
  EXPECT_EQ(g.status().code(), Code::kNotFound);
  EXPECT_EQ(g.status().message(), "services.serving.knative.dev \"nope\" not found");
  EXPECT_EQ(store_->update(svc("nope"), serviceBody("a"), 0).status().code(), Code::kNotFound);
  EXPECT_EQ(store_->remove(svc("nope")).status().code(), Code::kNotFound);
  EXPECT_EQ(store_->currentResourceVersion(), 0);
}

TEST_F(SqliteStoreTest, ListIsSortedAndFiltered) {
  ASSERT_TRUE(store_->create(svc("b", "ns2"), serviceBody("a")).isOk());
  ASSERT_TRUE(store_->create(svc("z", "ns1"), serviceBody("a")).isOk());
  ASSERT_TRUE(store_->create(svc("a", "ns2"), serviceBody("a")).isOk());
  ASSERT_TRUE(store_->create(svc("m", "ns1"), serviceBody("a")).isOk());
  ASSERT_TRUE(store_->create({"Route", "ns1", "r"}, json::object()).isOk());

  auto all = store_->list("Service", "");
  ASSERT_TRUE(all.isOk());
  std::vector<std::string> names;
  for (const Object& o : *all) names.push_back(o.key.ns + "/" + o.key.name);
  EXPECT_EQ(names, (std::vector<std::string>{"ns1/m", "ns1/z", "ns2/a", "ns2/b"}));

  auto ns1 = store_->list("Service", "ns1");
  ASSERT_TRUE(ns1.isOk());
  ASSERT_EQ(ns1->size(), 2u);
  EXPECT_EQ((*ns1)[0].key, svc("m", "ns1"));
  EXPECT_EQ((*ns1)[0].resource_version, 4);
  EXPECT_EQ((*ns1)[0].body["metadata"]["resourceVersion"], "4");

  auto routes = store_->list("Route", "");
  ASSERT_TRUE(routes.isOk());
  ASSERT_EQ(routes->size(), 1u);
  EXPECT_EQ((*routes)[0].key.kind, "Route");
  EXPECT_TRUE(store_->list("Revision", "").value().empty());
}

TEST_F(SqliteStoreTest, RemoveReturnsLastStateWithDeletionRv) {
  auto c = store_->create(svc("hello"), serviceBody("a"));
  ASSERT_TRUE(c.isOk());
  auto r = store_->remove(svc("hello"));
  ASSERT_TRUE(r.isOk()) << r.status().toString();
  EXPECT_EQ(r->resource_version, 2);
  EXPECT_EQ(r->body["metadata"]["resourceVersion"], "2");
  EXPECT_EQ(r->body["metadata"]["uid"], c->body["metadata"]["uid"]);
  EXPECT_EQ(r->body["spec"], c->body["spec"]);
  EXPECT_EQ(store_->get(svc("hello")).status().code(), Code::kNotFound);
  // A new object under the same name is a new object: new uid, generation 1.
  clock_.advance(10s);
  auto again = store_->create(svc("hello"), serviceBody("b"));
  ASSERT_TRUE(again.isOk());
  EXPECT_NE(again->body["metadata"]["uid"], c->body["metadata"]["uid"]);
  EXPECT_EQ(again->body["metadata"]["generation"], 1);
  EXPECT_EQ(again->body["metadata"]["creationTimestamp"], "2026-01-01T00:00:10Z");
}

// --- generation semantics ---------------------------------------------------

TEST_F(SqliteStoreTest, GenerationBumpsOnlyOnSpecChange) {
  auto c = store_->create(svc("hello"), serviceBody("img:1"));
  ASSERT_TRUE(c.isOk());
  json body = c->body;

  struct Step {
    const char* what;
    std::function<void(json&)> edit;
    int want_generation;
  };
  std::vector<Step> steps = {
      {"label change", [](json& b) { b["metadata"]["labels"]["tier"] = "web"; }, 1},
      {"annotation change", [](json& b) { b["metadata"]["annotations"]["a"] = "1"; }, 1},
      {"status change", [](json& b) { b["status"]["observedGeneration"] = 1; }, 1},
      {"identical body", [](json&) {}, 1},
      {"image change", [](json& b) { b["spec"]["template"]["spec"]["containers"][0]["image"] = "img:2"; }, 2},
      {"traffic added",
       [](json& b) {
         b["spec"]["traffic"] = json::array({{{"percent", 100}}});
       },
       3},
      {"integer vs float same value", [](json& b) { b["spec"]["traffic"][0]["percent"] = 100.0; }, 3},
      {"spec removed", [](json& b) { b.erase("spec"); }, 4},
      {"spec null (same as absent)", [](json& b) { b["spec"] = nullptr; }, 4},
      {"spec back",
       [](json& b) {
         b["spec"] = json{{"x", 1}};
       },
       5},
  };
  int64_t rv = c->resource_version;
  for (const Step& s : steps) {
    s.edit(body);
    auto u = store_->update(svc("hello"), body, rv);
    ASSERT_TRUE(u.isOk()) << s.what << ": " << u.status().toString();
    EXPECT_EQ(u->body["metadata"]["generation"], s.want_generation) << s.what;
    EXPECT_GT(u->resource_version, rv) << s.what;
    rv = u->resource_version;
    body = u->body;
  }
  auto got = store_->get(svc("hello"));
  ASSERT_TRUE(got.isOk());
  EXPECT_EQ(got->body["metadata"]["generation"], 5);
}

TEST_F(SqliteStoreTest, UpdateKeepsUidAndCreationTimestamp) {
  auto c = store_->create(svc("hello"), serviceBody("img:1"));
  ASSERT_TRUE(c.isOk());
  clock_.advance(1h);
  json body = serviceBody("img:2");  // a body without any server metadata, as a PUT might send
  body["metadata"]["uid"] = "forged";
  body["metadata"]["creationTimestamp"] = "1999-01-01T00:00:00Z";
  body["metadata"]["generation"] = 42;
  auto u = store_->update(svc("hello"), body, 0);
  ASSERT_TRUE(u.isOk());
  EXPECT_EQ(u->body["metadata"]["uid"], c->body["metadata"]["uid"]);
  EXPECT_EQ(u->body["metadata"]["creationTimestamp"], "2026-01-01T00:00:00Z");
  EXPECT_EQ(u->body["metadata"]["generation"], 2);
  EXPECT_EQ(u->body["metadata"]["name"], "hello");
  EXPECT_EQ(u->body["metadata"]["namespace"], "default");
}

// --- optimistic concurrency -------------------------------------------------

TEST_F(SqliteStoreTest, StaleResourceVersionIsConflict) {
  auto c = store_->create(svc("hello"), serviceBody("img:1"));
  ASSERT_TRUE(c.isOk());
  auto u1 = store_->update(svc("hello"), serviceBody("img:2"), c->resource_version);
  ASSERT_TRUE(u1.isOk());
  auto stale = store_->update(svc("hello"), serviceBody("img:3"), c->resource_version);
  ASSERT_FALSE(stale.isOk());
  EXPECT_EQ(stale.status().code(), Code::kConflict);
  EXPECT_EQ(stale.status().message(),
            "Operation cannot be fulfilled on services.serving.knative.dev \"hello\": the object has been "
            "modified; please apply your changes to the latest version and try again");
  // Nothing changed.
  auto got = store_->get(svc("hello"));
  EXPECT_EQ(got->body["spec"]["template"]["spec"]["containers"][0]["image"], "img:2");
  EXPECT_EQ(store_->currentResourceVersion(), u1->resource_version);
  // The current RV works; 0 means unconditional.
  EXPECT_TRUE(store_->update(svc("hello"), serviceBody("img:3"), u1->resource_version).isOk());
  EXPECT_TRUE(store_->update(svc("hello"), serviceBody("img:4"), 0).isOk());
}

TEST_F(SqliteStoreTest, ResourceVersionsStrictlyIncreaseAcrossKinds) {
  int64_t last = 0;
  for (int i = 0; i < 20; ++i) {
    Key k = i % 2 ? svc("s" + std::to_string(i)) : Key{"Route", "default", "r" + std::to_string(i)};
    auto o = store_->create(k, json::object());
    ASSERT_TRUE(o.isOk());
    EXPECT_EQ(o->resource_version, last + 1);
    last = o->resource_version;
  }
  EXPECT_EQ(store_->currentResourceVersion(), last);
}

// --- transactions -------------------------------------------------------------

TEST_F(SqliteStoreTest, TransactionCommitsAllAndNotifiesInOrderAfterCommit) {
  std::vector<std::pair<std::string, int64_t>> seen;
  bool visible_in_listener = false;
  store_->addListener([&](const Event& e) {
    seen.emplace_back(std::string(eventTypeName(e.type)) + " " + e.object.key.toString(), e.resource_version);
    // Called after commit, without locks: the store can be read from the listener.
    auto g = store_->get(svc("a"));
    visible_in_listener = g.isOk();
  });
  ASSERT_TRUE(store_->create(svc("victim"), serviceBody("x")).isOk());
  seen.clear();
  Status st = store_->transact([&](Txn& txn) -> Status {
    KNAP_RETURN_IF_ERROR(txn.create(svc("a"), serviceBody("1")).status());
    KNAP_RETURN_IF_ERROR(txn.create(svc("b"), serviceBody("1")).status());
    // Reads inside the transaction see its own writes.
    KNAP_ASSIGN_OR_RETURN(Object a, txn.get(svc("a")));
    KNAP_RETURN_IF_ERROR(txn.update(svc("a"), serviceBody("2"), a.resource_version).status());
    KNAP_RETURN_IF_ERROR(txn.remove(svc("victim")).status());
    KNAP_ASSIGN_OR_RETURN(auto list, txn.list("Service", "default"));
    if (list.size() != 2) return internalError("want 2 services in txn, got " + std::to_string(list.size()));
    EXPECT_TRUE(seen.empty()) << "listener ran before commit";
    return Status::ok();
  });
  ASSERT_TRUE(st.isOk()) << st.toString();
  std::vector<std::pair<std::string, int64_t>> want = {{"ADDED Service default/a", 2},
                                                       {"ADDED Service default/b", 3},
                                                       {"MODIFIED Service default/a", 4},
                                                       {"DELETED Service default/victim", 5}};
  EXPECT_EQ(seen, want);
  EXPECT_TRUE(visible_in_listener);
  EXPECT_EQ(store_->currentResourceVersion(), 5);
}

TEST_F(SqliteStoreTest, FailedTransactionLeavesNoTrace) {
  ASSERT_TRUE(store_->create(svc("keep"), serviceBody("1")).isOk());
  int events = 0;
  store_->addListener([&](const Event&) { ++events; });
  Status st = store_->transact([&](Txn& txn) -> Status {
    KNAP_RETURN_IF_ERROR(txn.create(svc("a"), serviceBody("1")).status());
    KNAP_RETURN_IF_ERROR(txn.update(svc("keep"), serviceBody("2"), 0).status());
    KNAP_RETURN_IF_ERROR(txn.remove(svc("keep")).status());
    return failedPrecondition("changed my mind");
  });
  EXPECT_EQ(st.code(), Code::kFailedPrecondition);
  EXPECT_EQ(st.message(), "changed my mind");
  EXPECT_EQ(events, 0);
  EXPECT_EQ(store_->get(svc("a")).status().code(), Code::kNotFound);
  auto keep = store_->get(svc("keep"));
  ASSERT_TRUE(keep.isOk());
  EXPECT_EQ(keep->body["spec"], serviceBody("1")["spec"]);
  EXPECT_EQ(keep->resource_version, 1);
  EXPECT_EQ(store_->currentResourceVersion(), 1);
  auto ev = store_->eventsSince(0, "");
  ASSERT_TRUE(ev.isOk());
  EXPECT_EQ(ev->size(), 1u);
  // The next write takes the next RV: nothing was burnt by the rollback.
  auto next = store_->create(svc("n"), serviceBody("1"));
  ASSERT_TRUE(next.isOk());
  EXPECT_EQ(next->resource_version, 2);
}

TEST_F(SqliteStoreTest, ExceptionInTransactionRollsBack) {
  Status st = store_->transact([&](Txn& txn) -> Status {
    (void)txn.create(svc("a"), serviceBody("1"));
    json j = json::object();
    (void)j.at("missing");  // throws nlohmann::out_of_range
    return Status::ok();
  });
  EXPECT_EQ(st.code(), Code::kInternal);
  EXPECT_NE(st.message().find("exception"), std::string::npos);
  EXPECT_EQ(store_->get(svc("a")).status().code(), Code::kNotFound);
  EXPECT_EQ(store_->currentResourceVersion(), 0);
}

TEST_F(SqliteStoreTest, CallingTheStoreInsideItsTransactionFailsInsteadOfDeadlocking) {
  Status inner;
  Status st = store_->transact([&](Txn&) -> Status {
    inner = store_->get(svc("x")).status();
    return Status::ok();
  });
  EXPECT_TRUE(st.isOk());
  EXPECT_EQ(inner.code(), Code::kFailedPrecondition);
  Status nested =
      store_->transact([&](Txn&) -> Status { return store_->create(svc("y"), json::object()).status(); });
  EXPECT_EQ(nested.code(), Code::kFailedPrecondition);
  EXPECT_EQ(store_->get(svc("y")).status().code(), Code::kNotFound);
}

TEST_F(SqliteStoreTest, ReadOnlyTransactionAdvancesNothing) {
  ASSERT_TRUE(store_->create(svc("a"), json::object()).isOk());
  int events = 0;
  store_->addListener([&](const Event&) { ++events; });
  Status st = store_->transact([&](Txn& txn) -> Status {
    KNAP_RETURN_IF_ERROR(txn.get(svc("a")).status());
    EXPECT_EQ(txn.get(svc("b")).status().code(), Code::kNotFound);
    return Status::ok();
  });
  EXPECT_TRUE(st.isOk()) << st.toString();
  EXPECT_EQ(events, 0);
  EXPECT_EQ(store_->currentResourceVersion(), 1);
}

TEST_F(SqliteStoreTest, CreateThenRemoveInOneTransactionRecordsBoth) {
  Status st = store_->transact([&](Txn& txn) -> Status {
    KNAP_RETURN_IF_ERROR(txn.create(svc("tmp"), json::object()).status());
    KNAP_RETURN_IF_ERROR(txn.remove(svc("tmp")).status());
    return Status::ok();
  });
  ASSERT_TRUE(st.isOk()) << st.toString();
  EXPECT_EQ(store_->get(svc("tmp")).status().code(), Code::kNotFound);
  auto ev = store_->eventsSince(0, "Service");
  ASSERT_TRUE(ev.isOk());
  ASSERT_EQ(ev->size(), 2u);
  EXPECT_EQ((*ev)[0].type, EventType::kAdded);
  EXPECT_EQ((*ev)[1].type, EventType::kDeleted);
  EXPECT_EQ((*ev)[1].resource_version, 2);
}

// --- listeners --------------------------------------------------------------

TEST_F(SqliteStoreTest, RemovedListenerIsNotCalled) {
  int a = 0, b = 0;
  int ida = store_->addListener([&](const Event&) { ++a; });
  store_->addListener([&](const Event&) { ++b; });
  ASSERT_TRUE(store_->create(svc("1"), json::object()).isOk());
  store_->removeListener(ida);
  ASSERT_TRUE(store_->create(svc("2"), json::object()).isOk());
  EXPECT_EQ(a, 1);
  EXPECT_EQ(b, 2);
}

TEST_F(SqliteStoreTest, ListenerMayWriteToTheStore) {
  // A controller-style listener: reacts to a Service by creating its Route.
  store_->addListener([&](const Event& e) {
    if (e.type == EventType::kAdded && e.object.key.kind == "Service") {
      EXPECT_TRUE(store_->create({"Route", e.object.key.ns, e.object.key.name}, json::object()).isOk());
    }
  });
  std::vector<std::string> order;
  store_->addListener(
      [&](const Event& e) { order.push_back(e.object.key.kind + std::to_string(e.resource_version)); });
  ASSERT_TRUE(store_->create(svc("hello"), serviceBody("a")).isOk());
  EXPECT_TRUE(store_->get({"Route", "default", "hello"}).isOk());
  EXPECT_EQ(order, (std::vector<std::string>{"Service1", "Route2"}));
}

TEST_F(SqliteStoreTest, ConcurrentWritersGetUniqueRvsAndOrderedEvents) {
  std::mutex mu;
  std::vector<int64_t> seen;
  store_->addListener([&](const Event& e) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(e.resource_version);
  });
  constexpr int kThreads = 4, kPerThread = 50;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        Key k = svc("t" + std::to_string(t) + "-" + std::to_string(i));
        if (!store_->create(k, json::object()).isOk()) ++failures;
        if (!store_->update(k, json{{"spec", {{"i", i}}}}, 0).isOk()) ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  ASSERT_EQ(seen.size(), static_cast<size_t>(2 * kThreads * kPerThread));
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], static_cast<int64_t>(i + 1));
  EXPECT_EQ(store_->currentResourceVersion(), 2 * kThreads * kPerThread);
}

// --- watch history ------------------------------------------------------------

TEST_F(SqliteStoreTest, EventsSinceReplaysInOrderWithKindFilter) {
  ASSERT_TRUE(store_->create(svc("a"), serviceBody("1")).isOk());                 // 1
  ASSERT_TRUE(store_->create({"Route", "default", "a"}, json::object()).isOk());  // 2
  ASSERT_TRUE(store_->update(svc("a"), serviceBody("2"), 0).isOk());              // 3
  ASSERT_TRUE(store_->remove({"Route", "default", "a"}).isOk());                  // 4

  auto all = store_->eventsSince(0, "");
  ASSERT_TRUE(all.isOk());
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ((*all)[0].type, EventType::kAdded);
  EXPECT_EQ((*all)[2].type, EventType::kModified);
  EXPECT_EQ((*all)[3].type, EventType::kDeleted);
  EXPECT_EQ((*all)[3].resource_version, 4);
  EXPECT_EQ((*all)[3].object.body["metadata"]["resourceVersion"], "4");
  EXPECT_EQ((*all)[2].object.body["spec"], serviceBody("2")["spec"]);
  EXPECT_EQ((*all)[2].object.resource_version, 3);

  auto svcs = store_->eventsSince(1, "Service");
  ASSERT_TRUE(svcs.isOk());
  ASSERT_EQ(svcs->size(), 1u);
  EXPECT_EQ((*svcs)[0].resource_version, 3);
  EXPECT_TRUE(store_->eventsSince(4, "").value().empty());
  EXPECT_TRUE(store_->eventsSince(100, "").value().empty());
  EXPECT_EQ(store_->eventsSince(-1, "").status().code(), Code::kInvalidArgument);
}

TEST(SqliteStoreHistory, OldResourceVersionsAreGone) {
  SimulatedTimeSource clock;
  auto store = mustOpen(":memory:", clock, /*history=*/5);
  ASSERT_NE(store, nullptr);
  for (int i = 0; i < 12; ++i)
    ASSERT_TRUE(store->create(svc("s" + std::to_string(i)), json::object()).isOk());
  // RVs 1..12; the newest 5 (8..12) are kept, so since_rv >= 7 is answerable.
  auto ok = store->eventsSince(7, "");
  ASSERT_TRUE(ok.isOk()) << ok.status().toString();
  ASSERT_EQ(ok->size(), 5u);
  EXPECT_EQ(ok->front().resource_version, 8);
  EXPECT_EQ(ok->back().resource_version, 12);
  auto gone = store->eventsSince(6, "");
  ASSERT_FALSE(gone.isOk());
  EXPECT_EQ(gone.status().code(), Code::kGone);
  EXPECT_EQ(gone.status().message(), "too old resource version: 6 (7)");
  EXPECT_EQ(store->eventsSince(0, "Service").status().code(), Code::kGone);
  EXPECT_EQ(store->eventsSince(12, "").value().size(), 0u);
}

TEST(SqliteStoreHistory, SmallerHistoryOnReopenPrunesAndGoneSurvivesReopen) {
  TempDir dir;
  SimulatedTimeSource clock;
  std::string path = dir.file("knap.db");
  {
    auto store = mustOpen(path, clock, 100);
    for (int i = 0; i < 20; ++i)
      ASSERT_TRUE(store->create(svc("s" + std::to_string(i)), json::object()).isOk());
    EXPECT_TRUE(store->eventsSince(0, "").isOk());
  }
  {
    auto store = mustOpen(path, clock, 3);
    EXPECT_EQ(store->eventsSince(16, "").status().code(), Code::kGone);
    auto ev = store->eventsSince(17, "");
    ASSERT_TRUE(ev.isOk());
    EXPECT_EQ(ev->size(), 3u);
  }
  EXPECT_EQ(rawQuery(path, "SELECT COUNT(*) FROM events"), "3");
  {
    auto store = mustOpen(path, clock, 100);
    EXPECT_EQ(store->eventsSince(16, "").status().code(), Code::kGone);  // pruned history does not come back
    EXPECT_TRUE(store->eventsSince(17, "").isOk());
  }
}

TEST(SqliteStoreOpen, RejectsBadHistoryAndUnopenablePath) {
  SimulatedTimeSource clock;
  EXPECT_EQ(SqliteStore::open(":memory:", clock, 0).status().code(), Code::kInvalidArgument);
  auto bad = SqliteStore::open("/nonexistent-dir/x/knap.db", clock);
  ASSERT_FALSE(bad.isOk());
  EXPECT_EQ(bad.status().code(), Code::kUnavailable);
  EXPECT_NE(bad.status().message().find("/nonexistent-dir/x/knap.db"), std::string::npos);
}

TEST(SqliteStoreOpen, UsesWalAndSyncsEveryAcknowledgedCommit) {
  TempDir dir;
  SimulatedTimeSource clock;
  std::string path = dir.file("knap.db");
  auto store = mustOpen(path, clock);
  EXPECT_EQ(rawQuery(path, "PRAGMA journal_mode"), "wal");
  // One writer at a time: each commit waits for an fdatasync of its own.
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(store->create(svc("a" + std::to_string(i)), json::object()).isOk());
  EXPECT_TRUE(std::filesystem::exists(path + "-wal"));
  SqliteStore::SyncStats stats = store->syncStats();
  EXPECT_EQ(stats.commits, 5);
  EXPECT_EQ(stats.syncs, 5);
  // A transaction that changes nothing has nothing to sync.
  ASSERT_TRUE(store->transact([](Txn& t) { return t.get(svc("a0")).status(); }).isOk());
  EXPECT_EQ(store->syncStats().syncs, 5);
}

TEST(SqliteStoreOpen, CheckpointsRunInTheBackgroundAndKeepTheWalBounded) {
  TempDir dir;
  SimulatedTimeSource clock;
  std::string path = dir.file("knap.db");
  auto store = mustOpen(path, clock);
  ASSERT_NE(store, nullptr);
  store->setCheckpointPagesForTest(50);
  json body = {{"spec", {{"pad", std::string(3000, 'x')}}}};  // about a page per write
  auto writeSome = [&](int from, int n) {
    for (int i = from; i < from + n; ++i)
      ASSERT_TRUE(store->create(svc("s" + std::to_string(i)), body).isOk());
  };
  writeSome(0, 200);
  // The checkpointer runs on its own thread: wait for it (generously, for a loaded machine).
  for (int i = 0; i < 3000 && store->syncStats().checkpoints == 0; ++i) std::this_thread::sleep_for(10ms);
  ASSERT_GT(store->syncStats().checkpoints, 0);
  for (int round = 1; round <= 5; ++round) writeSome(round * 200, 200);
  // Once the writers pause, the checkpointer catches up and the next commit
  // starts the WAL over: it then holds that commit's frames, not the
  // thousands written before.
  int64_t pages = -1;
  for (int i = 0; i < 300; ++i) {
    writeSome(10000 + i, 1);
    pages = store->syncStats().wal_pages;
    if (pages < 50) break;
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_LT(pages, 50) << "the WAL never started over";
  // Everything is there after a reopen.
  store.reset();
  store = mustOpen(path, clock);
  ASSERT_NE(store, nullptr);
  auto all = store->list("Service", "default");
  ASSERT_TRUE(all.isOk());
  EXPECT_GE(all->size(), 1201u);
  EXPECT_EQ(rawQuery(path, "PRAGMA integrity_check"), "ok");
}

// --- group commit -------------------------------------------------------------

// A sync that blocks until released, counting its calls.
struct GatedSync {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  int calls = 0;
  Status result = Status::ok();
  Status operator()() {
    std::unique_lock<std::mutex> lock(mu);
    ++calls;
    cv.notify_all();
    cv.wait(lock, [&] { return open; });
    return result;
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
  bool waitForCalls(int n) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, 30s, [&] { return calls >= n; });
  }
};

// Polls until `key` is readable (its writer committed), for up to 30 s.
bool waitVisible(Store& store, const Key& key) {
  for (int i = 0; i < 3000; ++i) {
    if (store.get(key).isOk()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return false;
}

TEST_F(SqliteStoreTest, WritersThatCommitDuringASyncShareTheNextAndAreToldOnlyAfterIt) {
  auto gate = std::make_shared<GatedSync>();
  store_->setSyncForTest([gate] { return (*gate)(); });
  std::mutex mu;
  std::vector<std::string> heard;
  store_->addListener([&](const Event& e) {
    std::lock_guard<std::mutex> lock(mu);
    heard.push_back(e.object.key.name);
  });
  std::atomic<int> answered{0};
  auto create = [&](const std::string& name) {
    return std::thread([&, name] {
      EXPECT_TRUE(store_->create(svc(name), json::object()).isOk()) << name;
      ++answered;
    });
  };
  std::thread a = create("a");
  ASSERT_TRUE(gate->waitForCalls(1));  // a committed and leads a sync, which blocks
  std::thread b = create("b");
  std::thread c = create("c");
  // b and c commit (readers see them) while a's sync runs, but nobody is answered or told.
  ASSERT_TRUE(waitVisible(*store_, svc("b")));
  ASSERT_TRUE(waitVisible(*store_, svc("c")));
  EXPECT_EQ(answered.load(), 0);
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(heard.empty());
  }
  gate->release();
  a.join();
  b.join();
  c.join();
  EXPECT_EQ(answered.load(), 3);
  SqliteStore::SyncStats stats = store_->syncStats();
  EXPECT_EQ(stats.commits, 3);
  EXPECT_EQ(stats.syncs, 2);  // a's own, then one for both b and c
  EXPECT_EQ(gate->calls, 2);
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(heard.size(), 3u);
  EXPECT_EQ(heard[0], "a");  // commit order
}

TEST_F(SqliteStoreTest, AFailedSyncFailsItsWritersButKeepsTheStoreAndWatchersConsistent) {
  auto gate = std::make_shared<GatedSync>();
  gate->result = Status(Code::kUnavailable, "fdatasync of /x/knap.db-wal: Input/output error");
  gate->release();
  store_->setSyncForTest([gate] { return (*gate)(); });
  std::vector<std::string> heard;
  store_->addListener([&](const Event& e) { heard.push_back(e.object.key.name); });
  auto r = store_->create(svc("a"), json::object());
  ASSERT_FALSE(r.isOk());
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_NE(r.status().message().find("knap.db-wal"), std::string::npos) << r.status().toString();
  // Committed all the same: readers and watchers agree on what the database holds.
  EXPECT_TRUE(store_->get(svc("a")).isOk());
  EXPECT_EQ(heard, std::vector<std::string>{"a"});
  // The next sync that works acknowledges the next write.
  gate->result = Status::ok();
  EXPECT_TRUE(store_->create(svc("b"), json::object()).isOk());
  EXPECT_EQ(heard, (std::vector<std::string>{"a", "b"}));
}

// --- persistence ------------------------------------------------------------------

TEST(SqliteStorePersistence, EverythingSurvivesCloseAndReopen) {
  TempDir dir;
  SimulatedTimeSource clock;
  std::string path = dir.file("knap.db");
  std::map<std::string, json> want;
  int64_t rv = 0;
  {
    auto store = mustOpen(path, clock);
    for (int i = 0; i < 30; ++i) {
      Key k = {i % 3 == 0 ? "Route" : "Service", "ns" + std::to_string(i % 4), "o" + std::to_string(i)};
      ASSERT_TRUE(store->create(k, serviceBody("v0")).isOk());
      clock.advance(1s);
    }
    for (int i = 0; i < 30; i += 2) {
      Key k = {i % 3 == 0 ? "Route" : "Service", "ns" + std::to_string(i % 4), "o" + std::to_string(i)};
      ASSERT_TRUE(store->update(k, serviceBody("v1"), 0).isOk());  // generation 2
    }
    ASSERT_TRUE(store->remove({"Service", "ns1", "o1"}).isOk());
    for (const char* kind : {"Service", "Route"}) {
      std::vector<Object> objects = store->list(kind, "").value();
      for (const Object& o : objects) want[o.key.toString()] = o.body;
    }
    rv = store->currentResourceVersion();
    EXPECT_EQ(rv, 30 + 15 + 1);
  }
  auto store = mustOpen(path, clock);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->currentResourceVersion(), rv);
  std::map<std::string, json> got;
  for (const char* kind : {"Service", "Route"}) {
    std::vector<Object> objects = store->list(kind, "").value();
    for (const Object& o : objects) {
      got[o.key.toString()] = o.body;
      EXPECT_EQ(std::to_string(o.resource_version), o.body["metadata"]["resourceVersion"].get<std::string>());
    }
  }
  EXPECT_EQ(got.size(), 29u);
  EXPECT_EQ(got, want);
  EXPECT_EQ(got["Service ns2/o2"]["metadata"]["generation"], 2);
  EXPECT_EQ(got["Service ns1/o5"]["metadata"]["generation"], 1);
  // RV keeps counting from where it was; the generation keeps counting too.
  auto u = store->update({"Service", "ns2", "o2"}, serviceBody("v2"), 0);
  ASSERT_TRUE(u.isOk());
  EXPECT_EQ(u->resource_version, rv + 1);
  EXPECT_EQ(u->body["metadata"]["generation"], 3);
  auto ev = store->eventsSince(rv - 1, "");
  ASSERT_TRUE(ev.isOk());
  ASSERT_EQ(ev->size(), 2u);
  EXPECT_EQ((*ev)[0].type, EventType::kDeleted);
}

TEST(SqliteStorePersistence, TwoStoresOnOneFileNeverReuseResourceVersions) {
  TempDir dir;
  SimulatedTimeSource clock;
  std::string path = dir.file("knap.db");
  auto a = mustOpen(path, clock);
  auto b = mustOpen(path, clock);
  std::set<int64_t> rvs;
  for (int i = 0; i < 10; ++i) {
    auto x = a->create(svc("a" + std::to_string(i)), json::object());
    auto y = b->create(svc("b" + std::to_string(i)), json::object());
    ASSERT_TRUE(x.isOk()) << x.status().toString();
    ASSERT_TRUE(y.isOk()) << y.status().toString();
    rvs.insert(x->resource_version);
    rvs.insert(y->resource_version);
  }
  EXPECT_EQ(rvs.size(), 20u);
  EXPECT_EQ(*rvs.rbegin(), 20);
  auto ev = a->eventsSince(0, "");
  ASSERT_TRUE(ev.isOk());
  EXPECT_EQ(ev->size(), 20u);
}

TEST(SqliteStorePersistence, StorageFailureInsideTransactionForcesRollback) {
  TempDir dir;
  SimulatedTimeSource clock;
  std::string path = dir.file("knap.db");
  auto store = mustOpen(path, clock);
  ASSERT_TRUE(store->create(svc("ok"), json::object()).isOk());
  // A row whose body is not JSON, as a damaged file might hold.
  rawExec(path,
          "INSERT INTO objects(kind, namespace, name, uid, resource_version, generation, body) "
          "VALUES ('Service', 'default', 'broken', 'u', 1, 1, '{not json')");
  auto g = store->get(svc("broken"));
  ASSERT_FALSE(g.isOk());
  EXPECT_EQ(g.status().code(), Code::kInternal);
  EXPECT_NE(g.status().message().find("Service default/broken"), std::string::npos) << g.status().message();
  EXPECT_EQ(store->list("Service", "").status().code(), Code::kInternal);
  // fn ignores the failed read and returns OK: the transaction must still not commit.
  Status st = store->transact([&](Txn& txn) -> Status {
    EXPECT_TRUE(txn.create(svc("new"), json::object()).isOk());
    (void)txn.get(svc("broken"));
    return Status::ok();
  });
  EXPECT_EQ(st.code(), Code::kInternal);
  rawExec(path, "DELETE FROM objects WHERE name = 'broken'");
  EXPECT_EQ(store->get(svc("new")).status().code(), Code::kNotFound);
  EXPECT_EQ(store->currentResourceVersion(), 1);
}

TEST(SqliteStorePersistence, ResourceVersionNeverReusedAfterDeletingNewest) {
  TempDir dir;
  SimulatedTimeSource clock;
  std::string path = dir.file("knap.db");
  {
    auto store = mustOpen(path, clock);
    ASSERT_TRUE(store->create(svc("a"), json::object()).isOk());
    ASSERT_TRUE(store->create(svc("b"), json::object()).isOk());
    ASSERT_TRUE(store->remove(svc("b")).isOk());
  }
  auto store = mustOpen(path, clock);
  auto c = store->create(svc("c"), json::object());
  ASSERT_TRUE(c.isOk());
  EXPECT_EQ(c->resource_version, 4);
}

// --- migrations -----------------------------------------------------------------

TEST(SqliteStoreMigration, FreshDatabaseIsAtLatestVersion) {
  TempDir dir;
  SimulatedTimeSource clock;
  std::string path = dir.file("knap.db");
  auto store = mustOpen(path, clock);
  EXPECT_EQ(store->schemaVersion().value(), SqliteStore::kLatestSchemaVersion);
  EXPECT_EQ(rawQuery(path, "SELECT version FROM schema_version"),
            std::to_string(SqliteStore::kLatestSchemaVersion));
}

// Builds a database at each earlier schema version, fills it the way that
// version's code did, and checks the migrated store serves the same data.
class MigrationFrom : public testing::TestWithParam<int> {};

TEST_P(MigrationFrom, MigratesToLatestKeepingData) {
  int from = GetParam();
  TempDir dir;
  SimulatedTimeSource clock;
  std::string path = dir.file("knap.db");
  ASSERT_TRUE(SqliteStore::createAtSchemaVersionForTest(path, from).isOk());
  EXPECT_EQ(rawQuery(path, "SELECT version FROM schema_version"), std::to_string(from));

  const std::string body =
      R"({"apiVersion":"serving.knative.dev/v1","kind":"Service","metadata":{"name":"old","namespace":"default",)"
      R"("uid":"11111111-2222-4333-8444-555555555555","generation":3,"creationTimestamp":"2025-06-01T00:00:00Z",)"
      R"("resourceVersion":"7"},"spec":{"template":{"spec":{"containers":[{"image":"img:old"}]}}}})";
  if (from >= 1) {
    rawExec(path,
            "INSERT INTO objects(kind, namespace, name, uid, resource_version, generation, body) VALUES "
            "('Service', 'default', 'old', '11111111-2222-4333-8444-555555555555', 7, 3, '" +
                body +
                "');"
                "UPDATE meta SET value = 9 WHERE key = 'resource_version';");
  }
  if (from >= 2) {
    // Version 2 databases have history; the migration to 2 set compacted_rv to the counter then (0).
    rawExec(path,
            "INSERT INTO events(rv, type, kind, namespace, name, body) VALUES (7, 'MODIFIED', 'Service', "
            "'default', 'old', '" +
                body + "');");
  }

  auto store = mustOpen(path, clock);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->schemaVersion().value(), SqliteStore::kLatestSchemaVersion);
  EXPECT_EQ(rawQuery(path, "PRAGMA integrity_check"), "ok");

  if (from == 0) {
    EXPECT_EQ(store->currentResourceVersion(), 0);
    EXPECT_TRUE(store->list("Service", "").value().empty());
    EXPECT_TRUE(store->eventsSince(0, "").isOk());
    return;
  }
  EXPECT_EQ(store->currentResourceVersion(), 9);
  auto old = store->get(svc("old"));
  ASSERT_TRUE(old.isOk()) << old.status().toString();
  EXPECT_EQ(old->resource_version, 7);
  EXPECT_EQ(old->body, json::parse(body));

  if (from == 1) {
    // History starts at the migration: older RVs are gone, newer ones replay.
    EXPECT_EQ(store->eventsSince(8, "").status().code(), Code::kGone);
    EXPECT_TRUE(store->eventsSince(9, "").value().empty());
  } else {
    auto ev = store->eventsSince(0, "");
    ASSERT_TRUE(ev.isOk());
    ASSERT_EQ(ev->size(), 1u);
    EXPECT_EQ((*ev)[0].resource_version, 7);
  }

  // The migrated store works normally: RV continues, generation bumps, uid kept.
  auto u = store->update(svc("old"), serviceBody("img:new"), 7);
  ASSERT_TRUE(u.isOk()) << u.status().toString();
  EXPECT_EQ(u->resource_version, 10);
  EXPECT_EQ(u->body["metadata"]["generation"], 4);
  EXPECT_EQ(u->body["metadata"]["uid"], "11111111-2222-4333-8444-555555555555");
  EXPECT_EQ(u->body["metadata"]["creationTimestamp"], "2025-06-01T00:00:00Z");
  auto ev = store->eventsSince(9, "Service");
  ASSERT_TRUE(ev.isOk());
  ASSERT_EQ(ev->size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(EveryEarlierVersion, MigrationFrom,
                         testing::Range(0, SqliteStore::kLatestSchemaVersion),
                         [](const testing::TestParamInfo<int>& info) {
                           return "V" + std::to_string(info.param);
                         });

std::vector<std::string> dependentNames(SqliteStore& store, const std::string& ns, const std::string& uid) {
  std::vector<std::string> names;
  EXPECT_TRUE(store
                  .transact([&](Txn& txn) -> Status {
                    KNAP_ASSIGN_OR_RETURN(auto keys, txn.dependentsOf(ns, uid));
                    for (const Key& k : keys) names.push_back(k.kind + "/" + k.ns + "/" + k.name);
                    return Status::ok();
                  })
                  .isOk());
  return names;
}

json ownedBody(const std::vector<std::string>& owner_uids) {
  json b = serviceBody("img");
  json refs = json::array();
  for (const auto& u : owner_uids)
    refs.push_back({{"apiVersion", "v1"}, {"kind", "X"}, {"name", "o"}, {"uid", u}});
  b["metadata"]["ownerReferences"] = refs;
  return b;
}

// listRaw gives what list gives, as text, with the labels beside it.
TEST(SqliteStoreListRaw, SameObjectsAsListWithTheirLabels) {
  TempDir dir;
  SimulatedTimeSource clock;
  auto store = mustOpen(dir.file("knap.db"), clock);
  json labelled = serviceBody("img");
  labelled["metadata"]["labels"] = {{"app", "x"}, {"tier", "web"}};
  ASSERT_TRUE(store->create(svc("b"), labelled).isOk());
  ASSERT_TRUE(store->create(svc("a"), serviceBody("img")).isOk());
  ASSERT_TRUE(store->create(svc("c", "other"), serviceBody("img")).isOk());
  auto listed = store->list("Service", "default");
  auto raw = store->listRaw("Service", "default");
  ASSERT_TRUE(listed.isOk() && raw.isOk());
  ASSERT_EQ(raw->size(), 2u);
  for (size_t i = 0; i < raw->size(); ++i) {
    EXPECT_EQ((*raw)[i].key.name, (*listed)[i].key.name);
    EXPECT_EQ((*raw)[i].resource_version, (*listed)[i].resource_version);
    EXPECT_EQ(json::parse((*raw)[i].json), (*listed)[i].body);
    EXPECT_EQ((*raw)[i].json, (*listed)[i].body.dump());  // compact, keys sorted: the API sends it as is
  }
  EXPECT_EQ(json::parse((*raw)[1].labels), json({{"app", "x"}, {"tier", "web"}}));
  // Without labels (a list with no selector): the same objects and text, no labels read.
  auto bare = store->listRaw("Service", "default", /*with_labels=*/false);
  ASSERT_TRUE(bare.isOk());
  ASSERT_EQ(bare->size(), 2u);
  for (size_t i = 0; i < bare->size(); ++i) {
    EXPECT_EQ((*bare)[i].key.name, (*raw)[i].key.name);
    EXPECT_EQ((*bare)[i].json, (*raw)[i].json);
    EXPECT_EQ((*bare)[i].labels, "");
  }
  json unlabelled = serviceBody("img");
  unlabelled["metadata"].erase("labels");
  ASSERT_TRUE(store->update(svc("a"), unlabelled, 0).isOk());
  EXPECT_EQ(store->listRaw("Service", "default").value()[0].labels, "");
  EXPECT_EQ(store->listRaw("Service", "").value().size(), 3u);
}

// The owner index follows every write: create, an update that changes the
// references, and remove.
TEST(SqliteStoreOwnerIndex, FollowsCreateUpdateAndRemove) {
  TempDir dir;
  SimulatedTimeSource clock;
  auto store = mustOpen(dir.file("knap.db"), clock);
  ASSERT_TRUE(store->create(svc("a"), ownedBody({"u1"})).isOk());
  ASSERT_TRUE(store->create(svc("b"), ownedBody({"u1", "u2"})).isOk());
  ASSERT_TRUE(store->create(svc("c", "other"), ownedBody({"u1"})).isOk());
  ASSERT_TRUE(store->create(svc("d"), serviceBody("img")).isOk());
  EXPECT_EQ(dependentNames(*store, "default", "u1"),
            (std::vector<std::string>{"Service/default/a", "Service/default/b"}));
  EXPECT_EQ(dependentNames(*store, "", "u1"),
            (std::vector<std::string>{"Service/default/a", "Service/default/b", "Service/other/c"}));
  EXPECT_EQ(dependentNames(*store, "default", "u2"), (std::vector<std::string>{"Service/default/b"}));

  ASSERT_TRUE(store->update(svc("b"), ownedBody({"u2"}), 0).isOk());
  EXPECT_EQ(dependentNames(*store, "default", "u1"), (std::vector<std::string>{"Service/default/a"}));
  ASSERT_TRUE(store->remove(svc("a")).isOk());
  EXPECT_TRUE(dependentNames(*store, "default", "u1").empty());
  EXPECT_EQ(dependentNames(*store, "default", "u2"), (std::vector<std::string>{"Service/default/b"}));
}

// Migrating to the owner index reads the references of every stored body,
// whatever shape a client gave them, and marks bodies it cannot read
// (sealed) as "may name any owner".
TEST(SqliteStoreOwnerIndex, MigrationIndexesExistingObjects) {
  TempDir dir;
  SimulatedTimeSource clock;
  std::string path = dir.file("knap.db");
  ASSERT_TRUE(SqliteStore::createAtSchemaVersionForTest(path, 3).isOk());
  auto row = [](const std::string& name, const std::string& body) {
    return "INSERT INTO objects(kind, namespace, name, uid, resource_version, generation, body) VALUES "
           "('Service', 'default', '" +
           name + "', 'uid-" + name + "', 1, 1, '" + body + "');";
  };
  rawExec(path, row("owned", R"({"metadata":{"ownerReferences":[{"uid":"u1"},{"uid":"u2"}]}})") +
                    row("string-refs", R"({"metadata":{"ownerReferences":["u1", 7, null]}})") +
                    row("object-refs", R"({"metadata":{"ownerReferences":{"uid":"u1"}}})") +
                    row("number-uid", R"({"metadata":{"ownerReferences":[{"uid":1}]}})") +
                    row("none", R"({"metadata":{}})") + row("sealed", "knap:enc:not-json") +
                    "UPDATE meta SET value = 1 WHERE key = 'resource_version';");
  auto store = mustOpen(path, clock);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(dependentNames(*store, "default", "u1"),
            (std::vector<std::string>{"Service/default/owned", "Service/default/sealed"}));
  EXPECT_EQ(dependentNames(*store, "default", "u2"),
            (std::vector<std::string>{"Service/default/owned", "Service/default/sealed"}));
  EXPECT_EQ(rawQuery(path, "PRAGMA integrity_check"), "ok");
}

// --- labels index (label-selector lists) -------------------------------------

json labelledBody(const json& labels) {
  json b = serviceBody("img");
  b["metadata"]["labels"] = labels;
  return b;
}

// "ns/name" of what listRawWithLabel gives, in its order.
std::vector<std::string> withLabel(Store& store, const std::string& ns, const std::string& key,
                                   const std::vector<std::string>& values,
                                   const std::string& kind = "Service") {
  auto raw = store.listRawWithLabel(kind, ns, key, values);
  EXPECT_TRUE(raw.isOk()) << raw.status().toString();
  std::vector<std::string> out;
  if (!raw.isOk()) return out;
  for (const auto& r : *raw) out.push_back(r.key.ns + "/" + r.key.name);
  return out;
}

using Names = std::vector<std::string>;

// The index follows every write: create, updates that change, add and drop
// labels, remove; and a listed object is exactly what listRaw gives for it.
TEST(SqliteStoreLabelIndex, FollowsCreateUpdateAndRemove) {
  TempDir dir;
  SimulatedTimeSource clock;
  auto store = mustOpen(dir.file("knap.db"), clock);
  ASSERT_TRUE(store->create(svc("a"), labelledBody({{"app", "x"}, {"tier", "web"}})).isOk());
  ASSERT_TRUE(store->create(svc("b"), labelledBody({{"app", "y"}})).isOk());
  ASSERT_TRUE(store->create(svc("c", "other"), labelledBody({{"app", "x"}})).isOk());
  ASSERT_TRUE(store->create(svc("d"), labelledBody({{"app", 7}, {"n", nullptr}})).isOk());  // not strings
  ASSERT_TRUE(store->create(Key{"Route", "default", "a"}, labelledBody({{"app", "x"}})).isOk());

  EXPECT_EQ(withLabel(*store, "default", "app", {"x"}), (Names{"default/a"}));
  EXPECT_EQ(withLabel(*store, "", "app", {"x"}), (Names{"default/a", "other/c"}));
  EXPECT_EQ(withLabel(*store, "", "app", {"y", "x"}), (Names{"default/a", "default/b", "other/c"}));
  EXPECT_EQ(withLabel(*store, "", "app", {}), (Names{"default/a", "default/b", "other/c"}));
  EXPECT_EQ(withLabel(*store, "default", "tier", {}), (Names{"default/a"}));
  EXPECT_TRUE(withLabel(*store, "", "app", {"z"}).empty());
  EXPECT_TRUE(withLabel(*store, "", "n", {}).empty());
  EXPECT_EQ(withLabel(*store, "", "app", {"x"}, "Route"), (Names{"default/a"}));

  auto raw = store->listRawWithLabel("Service", "default", "app", {"x"});
  auto all = store->listRaw("Service", "default");
  ASSERT_TRUE(raw.isOk() && all.isOk());
  ASSERT_EQ(raw->size(), 1u);
  EXPECT_EQ((*raw)[0].json, (*all)[0].json);
  EXPECT_EQ((*raw)[0].labels, (*all)[0].labels);
  EXPECT_EQ((*raw)[0].resource_version, (*all)[0].resource_version);

  // Change a value, drop a label, add one.
  ASSERT_TRUE(store->update(svc("a"), labelledBody({{"app", "y"}}), 0).isOk());
  ASSERT_TRUE(store->update(svc("d"), labelledBody({{"app", "x"}}), 0).isOk());
  EXPECT_EQ(withLabel(*store, "default", "app", {"x"}), (Names{"default/d"}));
  EXPECT_EQ(withLabel(*store, "default", "app", {"y"}), (Names{"default/a", "default/b"}));
  EXPECT_TRUE(withLabel(*store, "", "tier", {}).empty());
  json none = serviceBody("img");
  none["metadata"].erase("labels");
  ASSERT_TRUE(store->update(svc("b"), none, 0).isOk());
  EXPECT_EQ(withLabel(*store, "default", "app", {"y"}), (Names{"default/a"}));

  // Remove, and a rolled-back transaction leaves the index as it was.
  ASSERT_TRUE(store->remove(svc("a")).isOk());
  EXPECT_TRUE(withLabel(*store, "default", "app", {"y"}).empty());
  Status st = store->transact([&](Txn& txn) -> Status {
    KNAP_RETURN_IF_ERROR(txn.create(svc("e"), labelledBody({{"app", "x"}})).status());
    KNAP_RETURN_IF_ERROR(txn.remove(svc("d")).status());
    return invalidArgument("roll back");
  });
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_EQ(withLabel(*store, "default", "app", {"x"}), (Names{"default/d"}));
}

// The index is in the database: a reopened store (knapd restarted) answers
// the same, and keeps it up to date.
TEST(SqliteStoreLabelIndex, SurvivesReopen) {
  TempDir dir;
  SimulatedTimeSource clock;
  std::string path = dir.file("knap.db");
  {
    auto store = mustOpen(path, clock);
    for (int i = 0; i < 20; ++i) {
      std::string name = "s" + std::to_string(10 + i);
      ASSERT_TRUE(store->create(svc(name), labelledBody({{"group", i % 4 == 0 ? "g0" : "other"}})).isOk());
    }
  }
  auto store = mustOpen(path, clock);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(withLabel(*store, "default", "group", {"g0"}),
            (Names{"default/s10", "default/s14", "default/s18", "default/s22", "default/s26"}));
  ASSERT_TRUE(store->remove(svc("s14")).isOk());
  ASSERT_TRUE(store->update(svc("s11"), labelledBody({{"group", "g0"}}), 0).isOk());
  EXPECT_EQ(withLabel(*store, "default", "group", {"g0"}),
            (Names{"default/s10", "default/s11", "default/s18", "default/s22", "default/s26"}));
  EXPECT_EQ(rawQuery(path, "PRAGMA integrity_check"), "ok");
}

// More values than the statement shape allows read every object with the key.
TEST(SqliteStoreLabelIndex, ManyValuesReadTheKey) {
  SimulatedTimeSource clock;
  auto store = mustOpen(":memory:", clock);
  ASSERT_TRUE(store->create(svc("a"), labelledBody({{"app", "v3"}})).isOk());
  ASSERT_TRUE(store->create(svc("b"), labelledBody({{"app", "zz"}})).isOk());
  ASSERT_TRUE(store->create(svc("c"), labelledBody({{"other", "v3"}})).isOk());
  std::vector<std::string> values;
  for (int i = 0; i < 40; ++i) values.push_back("v" + std::to_string(i));
  Names got = withLabel(*store, "default", "app", values);
  // A superset: a and maybe b (callers match the labels), never c.
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got[0], "default/a");
  EXPECT_EQ(std::count(got.begin(), got.end(), "default/c"), 0);
}

// Migrating indexes what is stored: string values only; a body that is not
// JSON (sealed) is a candidate for every label.
TEST(SqliteStoreLabelIndex, MigrationIndexesExistingObjects) {
  TempDir dir;
  SimulatedTimeSource clock;
  std::string path = dir.file("knap.db");
  ASSERT_TRUE(SqliteStore::createAtSchemaVersionForTest(path, 4).isOk());
  auto row = [](const std::string& name, const std::string& body) {
    return "INSERT INTO objects(kind, namespace, name, uid, resource_version, generation, body) VALUES "
           "('Service', 'default', '" +
           name + "', 'uid-" + name + "', 1, 1, '" + body + "');";
  };
  rawExec(path, row("x", R"({"metadata":{"labels":{"app":"x","tier":"web"}}})") +
                    row("y", R"({"metadata":{"labels":{"app":"y"}}})") +
                    row("number", R"({"metadata":{"labels":{"app":1}}})") +
                    row("list", R"({"metadata":{"labels":["app"]}})") + row("none", R"({"metadata":{}})") +
                    row("sealed", "knap:enc:not-json") +
                    "UPDATE meta SET value = 1 WHERE key = 'resource_version';");
  auto store = mustOpen(path, clock);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(rawQuery(path, "SELECT count(*) FROM labels WHERE key = ''"), "1");
  // The sealed row is a candidate too; reading it without a key is the error it always was.
  auto raw = store->listRawWithLabel("Service", "default", "app", {"x"});
  EXPECT_FALSE(raw.isOk());
  EXPECT_EQ(
      rawQuery(path,
               "SELECT group_concat(name) FROM (SELECT name FROM labels WHERE key = 'app' ORDER BY name)"),
      "x,y");
  EXPECT_EQ(rawQuery(path, "SELECT group_concat(name) FROM labels WHERE key = 'tier'"), "x");
  EXPECT_EQ(rawQuery(path, "PRAGMA integrity_check"), "ok");
}

// Sealed kinds keep their labels out of the index (encrypted at rest): a
// Secret is indexed as "labels unknown", listed for every selector, and its
// labels come from the opened body.
TEST(SqliteStoreLabelIndex, SealedBodiesKeepTheirLabelsEncrypted) {
  TempDir dir;
  SimulatedTimeSource clock;
  std::string path = dir.file("knap.db");
  Key plain{"Secret", "default", "before"};
  {
    auto store = mustOpen(path, clock);
    ASSERT_TRUE(
        store->create(plain, labelledBody({{"app", "secret-label"}})).isOk());  // written before encryption
  }
  EXPECT_EQ(rawQuery(path, "SELECT value FROM labels WHERE kind = 'Secret' AND key = 'app'"), "secret-label");
  auto store = mustOpen(path, clock);
  ASSERT_TRUE(store
                  ->setCipher(std::make_shared<KeyringCipher>(
                      std::map<std::string, std::string>{{"1", std::string(32, 'k')}}, "1"))
                  .isOk());
  ASSERT_TRUE(
      store->create(Key{"Secret", "default", "after"}, labelledBody({{"app", "secret-label"}})).isOk());
  ASSERT_TRUE(store->create(Key{"Secret", "default", "other"}, labelledBody({{"app", "z"}})).isOk());
  EXPECT_EQ(rawQuery(path, "SELECT count(*) FROM labels WHERE kind = 'Secret' AND key <> ''"), "0");
  EXPECT_EQ(rawQuery(path, "SELECT count(*) FROM labels WHERE kind = 'Secret' AND key = ''"), "3");
  auto raw = store->listRawWithLabel("Secret", "default", "app", {"secret-label"});
  ASSERT_TRUE(raw.isOk()) << raw.status().toString();
  ASSERT_EQ(raw->size(), 3u);  // every Secret: the caller matches the labels
  EXPECT_EQ((*raw)[0].key.name, "after");
  EXPECT_EQ(json::parse((*raw)[0].labels), json({{"app", "secret-label"}}));
  EXPECT_EQ(json::parse((*raw)[2].labels), json({{"app", "z"}}));
  ASSERT_TRUE(store->remove(Key{"Secret", "default", "other"}).isOk());
  EXPECT_EQ(rawQuery(path, "SELECT count(*) FROM labels WHERE kind = 'Secret'"), "2");
}

// Several processes opening one fresh file at once must all succeed: each
// migration step re-checks the version under the write lock.
TEST(SqliteStoreMigration, ConcurrentOpenersOfAFreshFileAllSucceed) {
  TempDir dir;
  for (int round = 0; round < 5; ++round) {
    std::string path = dir.file("race" + std::to_string(round) + ".db");
    int gate[2];
    ASSERT_EQ(pipe(gate), 0);
    std::vector<pid_t> children;
    for (int i = 0; i < 4; ++i) {
      pid_t pid = fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        close(gate[1]);
        char c;
        (void)!read(gate[0], &c, 1);  // returns 0 when the parent closes the pipe: all start together
        SimulatedTimeSource clock;
        auto s = SqliteStore::open(path, clock);
        if (!s.isOk()) {
          std::fprintf(stderr, "child open failed: %s\n", s.status().toString().c_str());
          _exit(1);
        }
        _exit(s.value()->schemaVersion().isOk() ? 0 : 2);
      }
      children.push_back(pid);
    }
    close(gate[0]);
    close(gate[1]);
    for (pid_t pid : children) {
      int wstatus = 0;
      ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
      EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)
          << "round " << round << " status " << wstatus;
    }
    EXPECT_EQ(rawQuery(path, "SELECT version FROM schema_version"),
              std::to_string(SqliteStore::kLatestSchemaVersion));
    EXPECT_EQ(rawQuery(path, "SELECT COUNT(*) FROM schema_version"), "1");
  }
}

TEST(SqliteStoreMigration, RefusesNewerSchema) {
  TempDir dir;
  SimulatedTimeSource clock;
  std::string path = dir.file("knap.db");
  ASSERT_NE(mustOpen(path, clock), nullptr);
  rawExec(path, "UPDATE schema_version SET version = 99");
  auto s = SqliteStore::open(path, clock);
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(s.status().message().find("schema version 99 is newer"), std::string::npos)
      << s.status().message();
}

// --- crash safety -------------------------------------------------------------------

// A child process writes a stream of creates and updates and reports each
// acknowledged write (key and RV) on a pipe only after the store returned OK.
// The parent kills it with SIGKILL mid-stream; every acknowledged write must
// be in the reopened database, which must pass integrity_check.
TEST(SqliteStoreCrash, AcknowledgedWritesSurviveSigkill) {
  TempDir dir;
  std::string path = dir.file("knap.db");
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    SimulatedTimeSource clock;
    auto opened = SqliteStore::open(path, clock, 1000);
    if (!opened.isOk()) _exit(2);
    auto& store = *opened.value();
    for (int i = 0;; ++i) {
      std::string name = "svc-" + std::to_string(i % 97);
      json body = {{"spec", {{"n", i}, {"pad", std::string(200, 'x')}}}};
      auto r = i < 97 ? store.create(svc(name), body) : store.update(svc(name), body, 0);
      if (!r.isOk()) _exit(3);
      std::string line = name + " " + std::to_string(r->resource_version) + " " + std::to_string(i) + "\n";
      if (write(fds[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(4);
    }
  }
  close(fds[1]);
  FILE* in = fdopen(fds[0], "r");
  ASSERT_NE(in, nullptr);
  std::map<std::string, std::pair<int64_t, int>> acked;  // name -> (rv, n)
  char buf[256];
  int lines = 0;
  const int kill_after = 300 + static_cast<int>(getpid() % 200);  // somewhere in the middle of the stream
  while (lines < kill_after && fgets(buf, sizeof buf, in)) {
    std::istringstream ls(buf);
    std::string name;
    int64_t rv;
    int n;
    ls >> name >> rv >> n;
    acked[name] = {rv, n};
    ++lines;
  }
  ASSERT_EQ(lines, kill_after) << "child stopped early";
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  // Anything the child acknowledged before dying must be durable too.
  while (fgets(buf, sizeof buf, in)) {
    std::istringstream ls(buf);
    std::string name;
    int64_t rv;
    int n;
    if (ls >> name >> rv >> n) acked[name] = {rv, n};
  }
  fclose(in);
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL) << "child exited with " << wstatus;

  EXPECT_EQ(rawQuery(path, "PRAGMA integrity_check"), "ok");
  SimulatedTimeSource clock;
  auto store = mustOpen(path, clock, 1000);
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(rawQuery(path, "PRAGMA integrity_check"), "ok");
  int64_t max_acked = 0;
  for (const auto& [name, ack] : acked) {
    auto o = store->get(svc(name));
    ASSERT_TRUE(o.isOk()) << name << ": " << o.status().toString();
    EXPECT_GE(o->resource_version, ack.first) << name;
    if (o->resource_version == ack.first) {
      EXPECT_EQ(o->body["spec"]["n"], ack.second) << name;
    }
    max_acked = std::max(max_acked, ack.first);
  }
  EXPECT_GE(store->currentResourceVersion(), max_acked);
  // The reopened store keeps working.
  auto next = store->create(svc("after-crash"), json::object());
  ASSERT_TRUE(next.isOk());
  EXPECT_GT(next->resource_version, max_acked);
}

// knapd's soak: SQLite's page cache grows with the database up to its cap,
// then stays there however much more is written and read (a plateau, not a
// leak).
TEST(SqliteStoreMemoryTest, PageCacheStopsGrowingAtItsCap) {
  TempDir dir;
  SimulatedTimeSource clock;
  auto store = mustOpen(dir.file("knap.db"), clock);
  ASSERT_NE(store, nullptr);
  const int64_t cap = int64_t{SqliteStore::kPageCacheKiB} * 1024;
  const std::string filler(16000, 'x');
  auto writeAndRead = [&](int from, int to) {
    for (int i = from; i < to; ++i) {
      json body = serviceBody("img");
      body["metadata"]["annotations"] = {{"filler", filler}};
      ASSERT_TRUE(store->create(svc("s" + std::to_string(i)), body).isOk());
    }
    ASSERT_TRUE(store->list("Service", "").isOk());
  };
  writeAndRead(0, 20);  // ~0.7 MiB with the watch history: below the cap
  const int64_t small = store->memoryUse().page_cache_bytes;
  EXPECT_GT(small, 0);
  EXPECT_LT(small, cap);
  writeAndRead(20, 250);  // ~8 MiB: well past it
  const int64_t full = store->memoryUse().page_cache_bytes;
  EXPECT_GT(full, small);
  // The cap counts page content; SQLITE_DBSTATUS_CACHE_USED adds each page's header.
  EXPECT_LE(full, cap + cap / 4);
  writeAndRead(250, 350);
  EXPECT_LE(store->memoryUse().page_cache_bytes, cap + cap / 4);
  EXPECT_GE(store->memoryUse().sqlite_bytes, store->memoryUse().page_cache_bytes);
}

}  // namespace
}  // namespace knap::store
