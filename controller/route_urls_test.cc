#include "controller/route_urls.h"

#include <gtest/gtest.h>

namespace knap::controller {
namespace {

using nlohmann::json;

TemplateData data() {
  TemplateData d;
  d.name = "hello";
  d.ns = "default";
  d.domain = "example.com";
  d.tag = "canary";
  d.annotations = {{"sub", "blue"}};
  d.labels = {{"team", "red"}};
  return d;
}

struct RenderCase {
  const char* name;
  const char* tmpl;
  TemplateKind kind;
  const char* want;  // nullptr: must fail
};

class RenderTest : public ::testing::TestWithParam<RenderCase> {};

TEST_P(RenderTest, Renders) {
  const RenderCase& c = GetParam();
  auto got = renderTemplate(c.tmpl, c.kind, data());
  if (c.want == nullptr) {
    ASSERT_FALSE(got.isOk()) << *got;
    EXPECT_EQ(got.status().code(), Code::kInvalidArgument);
  } else {
    ASSERT_TRUE(got.isOk()) << got.status().toString();
    EXPECT_EQ(*got, c.want);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Templates, RenderTest,
    ::testing::Values(
        RenderCase{"DefaultDomain", "{{.Name}}.{{.Namespace}}.{{.Domain}}", TemplateKind::kDomain,
                   "hello.default.example.com"},
        RenderCase{"Spaces", "{{ .Name }}-{{ .Namespace }}.{{.Domain}}", TemplateKind::kDomain,
                   "hello-default.example.com"},
        RenderCase{"IndexAnnotation", "{{.Name}}.{{index .Annotations \"sub\"}}.{{.Domain}}",
                   TemplateKind::kDomain, "hello.blue.example.com"},
        RenderCase{"IndexLabel", "{{index .Labels \"team\"}}-{{.Name}}.{{.Domain}}", TemplateKind::kDomain,
                   "red-hello.example.com"},
        RenderCase{"IndexMissingKeyIsEmpty", "{{.Name}}{{index .Labels \"nope\"}}.{{.Domain}}",
                   TemplateKind::kDomain, "hello.example.com"},
        RenderCase{"DefaultTag", "{{.Tag}}-{{.Name}}", TemplateKind::kTag, "canary-hello"},
        RenderCase{"TagFieldInDomainTemplateRejected", "{{.Tag}}.{{.Domain}}", TemplateKind::kDomain,
                   nullptr},
        RenderCase{"DomainFieldInTagTemplateRejected", "{{.Domain}}", TemplateKind::kTag, nullptr},
        RenderCase{"UnknownField", "{{.Host}}.{{.Domain}}", TemplateKind::kDomain, nullptr},
        RenderCase{"Pipeline", "{{.Name | lower}}", TemplateKind::kDomain, nullptr},
        RenderCase{"Function", "{{printf \"%s\" .Name}}", TemplateKind::kDomain, nullptr},
        RenderCase{"TrimMarker", "{{- .Name}}", TemplateKind::kDomain, nullptr},
        RenderCase{"Unclosed", "{{.Name", TemplateKind::kDomain, nullptr},
        RenderCase{"StrayClose", ".Name}}", TemplateKind::kDomain, nullptr},
        RenderCase{"IndexOtherMap", "{{index .Spec \"x\"}}", TemplateKind::kDomain, nullptr},
        RenderCase{"IndexUnquotedKey", "{{index .Labels team}}", TemplateKind::kDomain, nullptr}),
    [](const ::testing::TestParamInfo<RenderCase>& i) { return std::string(i.param.name); });

TEST(RenderTemplate, ErrorNamesTheActionAndWhatIsSupported) {
  auto got = renderTemplate("{{.Host}}", TemplateKind::kDomain, data());
  ASSERT_FALSE(got.isOk());
  EXPECT_NE(got.status().message().find("{{.Host}}"), std::string::npos) << got.status().message();
  EXPECT_NE(got.status().message().find("knap supports"), std::string::npos);
}

TEST(ValidateTemplate, DomainMustBeAHost) {
  EXPECT_TRUE(validateTemplate("{{.Name}}.{{.Namespace}}.{{.Domain}}", TemplateKind::kDomain).isOk());
  EXPECT_FALSE(validateTemplate("{{.Name}}.{{.Domain}}/path", TemplateKind::kDomain).isOk());
  EXPECT_TRUE(validateTemplate("{{.Tag}}-{{.Name}}", TemplateKind::kTag).isOk());
  EXPECT_FALSE(validateTemplate("{{.Tag}}.{{.Name}}", TemplateKind::kTag).isOk());
}

struct DomainCase {
  const char* name;
  std::vector<DomainEntry> domains;
  std::map<std::string, std::string> labels;
  const char* want;
};

class SelectDomainTest : public ::testing::TestWithParam<DomainCase> {};

TEST_P(SelectDomainTest, Selects) {
  DomainConfig cfg{GetParam().domains};
  EXPECT_EQ(selectDomain(cfg, GetParam().labels), GetParam().want);
}

INSTANTIATE_TEST_SUITE_P(
    Domains, SelectDomainTest,
    ::testing::Values(DomainCase{"DefaultEntry", {{"example.com", {}}}, {}, "example.com"},
                      DomainCase{"NoEntriesIsClusterLocal", {}, {{"app", "x"}}, "svc.cluster.local"},
                      DomainCase{"NoDefaultAndNoMatch",
                                 {{"prod.com", {{"env", "prod"}}}},
                                 {{"env", "dev"}},
                                 "svc.cluster.local"},
                      DomainCase{"SelectorMatches",
                                 {{"example.com", {}}, {"prod.com", {{"env", "prod"}}}},
                                 {{"env", "prod"}},
                                 "prod.com"},
                      DomainCase{"SelectorDoesNotMatch",
                                 {{"example.com", {}}, {"prod.com", {{"env", "prod"}}}},
                                 {{"env", "dev"}},
                                 "example.com"},
                      DomainCase{"MostSpecificWins",
                                 {{"example.com", {}},
                                  {"prod.com", {{"env", "prod"}}},
                                  {"red.prod.com", {{"env", "prod"}, {"team", "red"}}}},
                                 {{"env", "prod"}, {"team", "red"}},
                                 "red.prod.com"},
                      DomainCase{"TieGoesToLexicallySmaller",
                                 {{"zzz.com", {{"env", "prod"}}}, {"aaa.com", {{"team", "red"}}}},
                                 {{"env", "prod"}, {"team", "red"}},
                                 "aaa.com"},
                      DomainCase{"ClusterLocalLabelWins",
                                 {{"example.com", {}}},
                                 {{"networking.knative.dev/visibility", "cluster-local"}},
                                 "svc.cluster.local"}),
    [](const ::testing::TestParamInfo<DomainCase>& i) { return std::string(i.param.name); });

Config configWithDomain(const std::string& domain) {
  Config c;
  c.domain.domains = {{domain, {}}};
  return c;
}

TEST(RouteHost, DefaultTemplates) {
  Config c = configWithDomain("example.com");
  auto h = routeHost(c, "hello", "default", {}, {});
  ASSERT_TRUE(h.isOk()) << h.status().toString();
  EXPECT_EQ(h->host, "hello.default.example.com");
  EXPECT_FALSE(h->cluster_local);
  EXPECT_EQ(h->url(), "http://hello.default.example.com");
  auto t = routeHost(c, "hello", "default", {}, {}, "canary");
  ASSERT_TRUE(t.isOk());
  EXPECT_EQ(t->url(), "http://canary-hello.default.example.com");
}

TEST(RouteHost, CustomDomainAndTagTemplatesAndScheme) {
  Config c = configWithDomain("example.com");
  c.network.domain_template = "{{.Name}}-{{.Namespace}}.{{.Domain}}";
  c.network.tag_template = "{{.Name}}-{{.Tag}}";
  c.network.default_external_scheme = "https";
  auto h = routeHost(c, "hello", "ns1", {}, {}, "v2");
  ASSERT_TRUE(h.isOk()) << h.status().toString();
  EXPECT_EQ(h->url(), "https://hello-v2-ns1.example.com");
}

TEST(RouteHost, ExternalDomainTlsMakesExternalUrlsHttps) {
  Config c = configWithDomain("example.com");
  c.network.other["external-domain-tls"] = "Enabled";
  auto h = routeHost(c, "hello", "ns1", {}, {}, "");
  ASSERT_TRUE(h.isOk()) << h.status().toString();
  EXPECT_EQ(h->url(), "https://hello.ns1.example.com");
  std::map<std::string, std::string> lbls = {{"networking.knative.dev/visibility", "cluster-local"}};
  auto local = routeHost(c, "hello", "ns1", lbls, {}, "");
  ASSERT_TRUE(local.isOk());
  EXPECT_EQ(local->scheme, "http");  // cluster-local-domain-tls is not served
  c.network.other["external-domain-tls"] = "Disabled";
  EXPECT_EQ(routeHost(c, "hello", "ns1", {}, {}, "")->url(), "http://hello.ns1.example.com");
}

TEST(RouteHost, ClusterLocalIgnoresCustomTemplateAndUsesHttp) {
  Config c = configWithDomain("example.com");
  c.network.domain_template = "{{.Name}}-{{.Namespace}}.{{.Domain}}";
  c.network.default_external_scheme = "https";
  std::map<std::string, std::string> lbls = {{"networking.knative.dev/visibility", "cluster-local"}};
  auto h = routeHost(c, "hello", "default", lbls, {}, "");
  ASSERT_TRUE(h.isOk());
  EXPECT_EQ(h->url(), "http://hello.default.svc.cluster.local");
  EXPECT_TRUE(h->cluster_local);
  auto t = routeHost(c, "hello", "default", lbls, {}, "beta");
  ASSERT_TRUE(t.isOk());
  EXPECT_EQ(t->host, "beta-hello.default.svc.cluster.local");
}

TEST(RouteHost, EmptyDomainConfigMakesEveryRouteClusterLocal) {
  Config c;
  c.domain.domains.clear();
  auto h = routeHost(c, "hello", "default", {}, {});
  ASSERT_TRUE(h.isOk());
  EXPECT_TRUE(h->cluster_local);
  EXPECT_EQ(h->host, "hello.default.svc.cluster.local");
}

TEST(RouteHost, TooLongTagHostIsAnError) {
  Config c = configWithDomain("example.com");
  std::string name(40, 'a');
  std::string tag(30, 'b');
  auto h = routeHost(c, name, "default", {}, {}, tag);
  ASSERT_FALSE(h.isOk());
  EXPECT_NE(h.status().message().find("63"), std::string::npos) << h.status().message();
}

TEST(RouteHost, BadTemplateIsAnError) {
  Config c = configWithDomain("example.com");
  c.network.domain_template = "{{.Name}}.{{.Nope}}";
  EXPECT_FALSE(routeHost(c, "hello", "default", {}, {}).isOk());
}

TEST(MergeTargets, SumsSameRevisionAndSingleGets100) {
  EXPECT_EQ(mergeTargets({{"a", 50}, {"b", 30}, {"a", 20}}),
            (std::vector<RevisionWeight>{{"a", 70}, {"b", 30}}));
  EXPECT_EQ(mergeTargets({{"a", 60}, {"a", 40}}), (std::vector<RevisionWeight>{{"a", 100}}));
  EXPECT_EQ(mergeTargets({{"a", 0}}), (std::vector<RevisionWeight>{{"a", 100}}));
}

json routeWithTraffic(json traffic, json labels = json::object()) {
  return json{{"metadata", {{"name", "hello"}, {"namespace", "default"}, {"labels", labels}}},
              {"status", {{"traffic", traffic}}}};
}

TEST(RoutingTable, MainSplitInternalAliasAndTags) {
  Config c = configWithDomain("example.com");
  json route = routeWithTraffic(json::array({
      {{"revisionName", "hello-00001"}, {"percent", 50}},
      {{"revisionName", "hello-00002"}, {"percent", 30}, {"tag", "candidate"}},
      {{"revisionName", "hello-00001"}, {"percent", 20}, {"tag", "current"}},
      {{"revisionName", "hello-00003"}, {"percent", 0}, {"tag", "next"}},
  }));
  auto table = routingTable(c, route);
  ASSERT_TRUE(table.isOk()) << table.status().toString();
  ASSERT_EQ(table->size(), 5u);
  const HostSplit& main = (*table)[0];
  EXPECT_EQ(main.hosts, (std::vector<std::string>{"hello.default.example.com"}));
  EXPECT_FALSE(main.cluster_local);
  EXPECT_EQ(main.revisions, (std::vector<RevisionWeight>{{"hello-00001", 70}, {"hello-00002", 30}}));
  const HostSplit& internal = (*table)[1];
  EXPECT_EQ(internal.hosts, (std::vector<std::string>{"hello.default.svc.cluster.local", "hello.default.svc",
                                                      "hello.default"}));
  EXPECT_TRUE(internal.cluster_local);
  EXPECT_EQ(internal.revisions, main.revisions);
  // Tags sorted by name: candidate, current, next.
  EXPECT_EQ((*table)[2].tag, "candidate");
  EXPECT_EQ((*table)[2].hosts[0], "candidate-hello.default.example.com");
  EXPECT_EQ((*table)[2].revisions, (std::vector<RevisionWeight>{{"hello-00002", 100}}));
  EXPECT_EQ((*table)[3].revisions, (std::vector<RevisionWeight>{{"hello-00001", 100}}));
  EXPECT_EQ((*table)[4].tag, "next");
  EXPECT_EQ((*table)[4].revisions, (std::vector<RevisionWeight>{{"hello-00003", 100}}));
}

TEST(RoutingTable, ClusterLocalRouteHasNoExternalHost) {
  Config c = configWithDomain("example.com");
  json route = routeWithTraffic(json::array({{{"revisionName", "hello-00001"}, {"percent", 100}}}),
                                json{{"networking.knative.dev/visibility", "cluster-local"}});
  auto table = routingTable(c, route);
  ASSERT_TRUE(table.isOk());
  ASSERT_EQ(table->size(), 1u);
  EXPECT_TRUE((*table)[0].cluster_local);
  EXPECT_EQ((*table)[0].hosts[0], "hello.default.svc.cluster.local");
}

TEST(RoutingTable, EmptyWithoutStatusTraffic) {
  Config c = configWithDomain("example.com");
  auto table = routingTable(c, json{{"metadata", {{"name", "hello"}, {"namespace", "default"}}}});
  ASSERT_TRUE(table.isOk());
  EXPECT_TRUE(table->empty());
}

TEST(HostTable, MapsEveryHostAndFirstCreatedRouteKeepsAClaimedHost) {
  Config c = configWithDomain("example.com");
  json a =
      routeWithTraffic(json::array({{{"revisionName", "hello-00001"}, {"percent", 100}, {"tag", "v1"}}}));
  a["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z";
  // A route created later that claims the same hosts does not take them.
  json b = routeWithTraffic(json::array({{{"revisionName", "hello-00002"}, {"percent", 100}}}));
  b["metadata"]["creationTimestamp"] = "2026-01-02T00:00:00Z";
  json other = routeWithTraffic(json::array({{{"revisionName", "web-00001"}, {"percent", 100}}}));
  other["metadata"]["name"] = "web";
  other["metadata"]["namespace"] = "shop";
  auto table = hostTable(c, {b, other, a});
  ASSERT_EQ(table.count("hello.default.example.com"), 1u);
  EXPECT_EQ(table["hello.default.example.com"].split.revisions,
            (std::vector<RevisionWeight>{{"hello-00001", 100}}));
  EXPECT_EQ(table["hello.default"].route, "hello");
  EXPECT_EQ(table["v1-hello.default.example.com"].split.tag, "v1");
  EXPECT_EQ(table["web.shop.example.com"].ns, "shop");
  EXPECT_EQ(table["web.shop.svc.cluster.local"].split.revisions,
            (std::vector<RevisionWeight>{{"web-00001", 100}}));
  EXPECT_TRUE(table["web.shop.svc"].split.cluster_local);
  EXPECT_EQ(table.count("nothing.default.example.com"), 0u);
}

}  // namespace
}  // namespace knap::controller
