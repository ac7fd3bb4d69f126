#include "router/routing_table.h"

#include <gtest/gtest.h>

namespace knap::router {
namespace {

RouteSpec helloRoute() {
  RouteSpec r;
  r.namespace_name = "default";
  r.name = "hello";
  r.hosts = {"hello.default.example.com"};
  r.internal_hosts = {"hello.default.svc.cluster.local", "hello.default.svc", "hello.default"};
  r.traffic = {{"default/hello-00001", 80, ""}, {"default/hello-00002", 20, "candidate"}};
  r.tags = {
      {"candidate", "default/hello-00002", {"candidate-hello.default.example.com"}, Visibility::kExternal}};
  return r;
}

TEST(NormalizeHostTest, Cases) {
  EXPECT_EQ(normalizeHost("Hello.Default.Example.COM"), "hello.default.example.com");
  EXPECT_EQ(normalizeHost("hello.default.example.com:8080"), "hello.default.example.com");
  EXPECT_EQ(normalizeHost("hello.default.example.com."), "hello.default.example.com");
  EXPECT_EQ(normalizeHost("[::1]:80"), "[::1]");
  EXPECT_EQ(normalizeHost("127.0.0.1:80"), "127.0.0.1");
  EXPECT_EQ(normalizeHost(""), "");
}

TEST(RoutingTableTest, LookupIgnoresCaseAndPort) {
  auto t = RoutingTable::build({helloRoute()}, "abc");
  ASSERT_TRUE(t.isOk()) << t.status().toString();
  const HostRoute* r = (*t)->lookup("HELLO.default.example.com:31080", ListenerKind::kExternal);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->route_name, "hello");
  EXPECT_EQ(r->namespace_name, "default");
  EXPECT_EQ(r->tag, "");
  ASSERT_EQ(r->splits.size(), 2u);
  EXPECT_EQ(r->total_percent, 100);
  EXPECT_EQ((*t)->networkHash(), "abc");
}

TEST(RoutingTableTest, UnknownHostIsNull) {
  auto t = RoutingTable::build({helloRoute()});
  ASSERT_TRUE(t.isOk());
  EXPECT_EQ((*t)->lookup("nope.example.com", ListenerKind::kInternal), nullptr);
  EXPECT_EQ(RoutingTable::empty()->lookup("hello.default.example.com", ListenerKind::kInternal), nullptr);
}

TEST(RoutingTableTest, TagHostRoutesToItsRevisionOnly) {
  auto t = RoutingTable::build({helloRoute()});
  ASSERT_TRUE(t.isOk());
  const HostRoute* r = (*t)->lookup("candidate-hello.default.example.com", ListenerKind::kExternal);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->tag, "candidate");
  for (int i = 0; i < 20; ++i) EXPECT_EQ(r->pick(), "default/hello-00002");
}

TEST(RoutingTableTest, ClusterLocalHostsOnlyOnInternalListener) {
  auto t = RoutingTable::build({helloRoute()});
  ASSERT_TRUE(t.isOk());
  for (const char* h : {"hello.default.svc.cluster.local", "hello.default.svc", "hello.default"}) {
    EXPECT_EQ((*t)->lookup(h, ListenerKind::kExternal), nullptr) << h;
    EXPECT_NE((*t)->lookup(h, ListenerKind::kInternal), nullptr) << h;
  }
  // External hosts answer on both.
  EXPECT_NE((*t)->lookup("hello.default.example.com", ListenerKind::kInternal), nullptr);
}

TEST(RoutingTableTest, ClusterLocalRouteHidesItsTagsToo) {
  RouteSpec r = helloRoute();
  r.visibility = Visibility::kClusterLocal;
  r.hosts = {"hello.default.svc.cluster.local"};
  r.internal_hosts.clear();
  r.tags = {{"candidate",
             "default/hello-00002",
             {"candidate-hello.default.svc.cluster.local"},
             Visibility::kExternal}};
  auto t = RoutingTable::build({r});
  ASSERT_TRUE(t.isOk());
  EXPECT_EQ((*t)->lookup("candidate-hello.default.svc.cluster.local", ListenerKind::kExternal), nullptr);
  EXPECT_NE((*t)->lookup("candidate-hello.default.svc.cluster.local", ListenerKind::kInternal), nullptr);
}

TEST(RoutingTableTest, ClusterLocalTagOnExternalRoute) {
  RouteSpec r = helloRoute();
  r.tags[0].visibility = Visibility::kClusterLocal;
  auto t = RoutingTable::build({r});
  ASSERT_TRUE(t.isOk());
  EXPECT_EQ((*t)->lookup("candidate-hello.default.example.com", ListenerKind::kExternal), nullptr);
  EXPECT_NE((*t)->lookup("hello.default.example.com", ListenerKind::kExternal), nullptr);
}

TEST(RoutingTableTest, SameRevisionTargetsAreMerged) {
  RouteSpec r = helloRoute();
  r.traffic = {{"default/a", 30, ""}, {"default/b", 40, ""}, {"default/a", 30, "x"}, {"default/c", 0, ""}};
  auto t = RoutingTable::build({r});
  ASSERT_TRUE(t.isOk());
  const HostRoute* h = (*t)->lookup("hello.default.example.com", ListenerKind::kExternal);
  ASSERT_NE(h, nullptr);
  ASSERT_EQ(h->splits.size(), 2u);
  EXPECT_EQ(h->splits[0].revision, "default/a");
  EXPECT_EQ(h->splits[0].percent, 60);
  EXPECT_EQ((*t)->revisions(), (std::vector<std::string>{"default/a", "default/b", "default/hello-00002"}));
}

TEST(RoutingTableTest, DuplicateHostFirstRouteKeepsIt) {
  RouteSpec a = helloRoute();
  RouteSpec b = helloRoute();
  b.name = "other";
  b.internal_hosts.clear();
  b.tags.clear();
  b.hosts.push_back("other.default.example.com");
  auto t = RoutingTable::build({a, b});
  ASSERT_TRUE(t.isOk());
  EXPECT_EQ((*t)->lookup("hello.default.example.com", ListenerKind::kExternal)->route_name, "hello");
  EXPECT_EQ((*t)->lookup("other.default.example.com", ListenerKind::kExternal)->route_name, "other");
  ASSERT_EQ((*t)->conflicts().size(), 1u);
  EXPECT_NE((*t)->conflicts()[0].find("hello.default.example.com"), std::string::npos);
}

TEST(RoutingTableTest, BuildsFromFlatHostGroups) {
  std::vector<HostGroup> groups = {
      {"default",
       "hello",
       "",
       Visibility::kClusterLocal,
       {"hello.default.svc.cluster.local", "hello.default.svc", "hello.default"},
       {{"default/hello-00001", 100, ""}}},
      {"default",
       "hello",
       "v2",
       Visibility::kExternal,
       {"v2-hello.default.example.com"},
       {{"default/hello-00002", 100, "v2"}}},
  };
  auto t = RoutingTable::build(groups, "h");
  ASSERT_TRUE(t.isOk());
  EXPECT_EQ((*t)->size(), 4u);
  EXPECT_EQ((*t)->lookup("hello.default", ListenerKind::kExternal), nullptr);
  EXPECT_EQ((*t)->lookup("hello.default:80", ListenerKind::kInternal)->pick(), "default/hello-00001");
  const HostRoute* v2 = (*t)->lookup("V2-hello.default.example.com", ListenerKind::kExternal);
  ASSERT_NE(v2, nullptr);
  EXPECT_EQ(v2->tag, "v2");
}

TEST(RoutingTableTest, RejectsHostWithoutTraffic) {
  RouteSpec r = helloRoute();
  r.traffic = {{"default/a", 0, ""}};
  EXPECT_FALSE(RoutingTable::build({r}).isOk());
  r.traffic = {};
  EXPECT_FALSE(RoutingTable::build({r}).isOk());
  r.traffic = {{"", 100, ""}};
  EXPECT_FALSE(RoutingTable::build({r}).isOk());
}

TEST(RoutingTableTest, PickFollowsSplit) {
  auto t = RoutingTable::build({helloRoute()});
  ASSERT_TRUE(t.isOk());
  const HostRoute* r = (*t)->lookup("hello.default.example.com", ListenerKind::kExternal);
  int first = 0;
  for (int i = 0; i < 1000; ++i) first += r->pick() == "default/hello-00001";
  EXPECT_NEAR(first, 800, 10);
}

// lookup() lowercases short hosts on the stack and long ones (over its
// 256-byte buffer) on the heap: both must find what normalizeHost keys,
// at and around the boundary, with a port, a trailing dot, spaces and
// mixed case.
TEST(RoutingTableTest, LookupOfLongHostsMatchesNormalizeHost) {
  for (size_t len : {1u, 200u, 254u, 255u, 256u, 257u, 258u, 300u, 1000u, 5000u}) {
    std::string host(len, 'a');
    for (size_t i = 0; i < len; i += 3) host[i] = 'B';
    if (len > 2) host[len / 2] = '.';
    if (len > 3) host[1] = '\xC9';  // a byte >= 0x80 (Latin-1 'É'): no case
    RouteSpec r = helloRoute();
    r.hosts = {host};
    r.internal_hosts.clear();
    r.tags.clear();
    auto t = RoutingTable::build({r});
    ASSERT_TRUE(t.isOk()) << t.status().toString();
    for (const std::string& asked : {host, host + ".", host + ":8080", host + ".:80", " " + host + "\t"}) {
      std::string upper = asked;
      for (char& c : upper) c = c >= 'a' && c <= 'z' ? static_cast<char>(c - 'a' + 'A') : c;
      for (const std::string& q : {asked, upper}) {
        const HostRoute* found = (*t)->lookup(q, ListenerKind::kExternal);
        ASSERT_NE(found, nullptr) << "len " << len << " asked " << q.size();
        EXPECT_EQ(found->host, normalizeHost(q));
      }
    }
    // One byte more or less is another host.
    EXPECT_EQ((*t)->lookup(host + "a", ListenerKind::kExternal), nullptr) << len;
    if (len > 1) {
      EXPECT_EQ((*t)->lookup(host.substr(1), ListenerKind::kExternal), nullptr) << len;
    }
  }
}

}  // namespace
}  // namespace knap::router
