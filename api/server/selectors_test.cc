#include "api/server/selectors.h"

#include <gtest/gtest.h>

namespace knap::api {
namespace {

using nlohmann::json;

struct Case {
  const char* selector;
  json labels;
  bool match;
};

TEST(LabelSelectorTest, Table) {
  json l = {{"app", "x"}, {"env", "prod"}};
  const Case cases[] = {
      {"", l, true},
      {"app=x", l, true},
      {"app==x", l, true},
      {"app = x", l, true},
      {"app=y", l, false},
      {"app!=y", l, true},
      {"app!=x", l, false},
      {"missing!=x", l, true},
      {"env in (prod,dev)", l, true},
      {"env in (dev)", l, false},
      {"env notin (dev)", l, true},
      {"env notin (prod)", l, false},
      {"missing notin (prod)", l, true},
      {"app", l, true},
      {"missing", l, false},
      {"!missing", l, true},
      {"!app", l, false},
      {"app=x,env in (prod),!gone", l, true},
      {"app=x,env=dev", l, false},
      {"app=x", nullptr, false},
      {"!app", nullptr, true},
      {"example.com/key=v", {{"example.com/key", "v"}}, true},
  };
  for (const Case& c : cases) {
    auto sel = LabelSelector::parse(c.selector);
    ASSERT_TRUE(sel.isOk()) << c.selector << ": " << sel.status().toString();
    EXPECT_EQ(sel->matches(c.labels), c.match) << c.selector;
  }
}

TEST(LabelSelectorTest, RejectsMalformed) {
  for (const char* bad : {"app in (x", "app in x", "=x", "app=x y", "a,,b", "app in (x))", "!"}) {
    EXPECT_FALSE(LabelSelector::parse(bad).isOk()) << bad;
  }
}

TEST(FieldSelectorTest, NameAndNamespace) {
  json obj = {{"metadata", {{"name", "hello"}, {"namespace", "default"}}}};
  auto eq = FieldSelector::parse("metadata.name=hello");
  ASSERT_TRUE(eq.isOk());
  EXPECT_TRUE(eq->matches(obj));
  auto ne = FieldSelector::parse("metadata.name!=hello");
  ASSERT_TRUE(ne.isOk());
  EXPECT_FALSE(ne->matches(obj));
  auto both = FieldSelector::parse("metadata.name==hello,metadata.namespace=other");
  ASSERT_TRUE(both.isOk());
  EXPECT_FALSE(both->matches(obj));
  auto unsupported = FieldSelector::parse("involvedObject.name=x");
  ASSERT_FALSE(unsupported.isOk());
  EXPECT_EQ(unsupported.status().message(), "field label not supported: involvedObject.name");
  EXPECT_FALSE(FieldSelector::parse("metadata.name").isOk());
}

}  // namespace
}  // namespace knap::api
