#include "api/server/patch.h"

#include <gtest/gtest.h>

namespace knap::api {
namespace {

using nlohmann::json;

TEST(JsonPatchTest, AllOperations) {
  json doc = {{"a", {{"b", 1}}}, {"list", {1, 2, 3}}};
  auto out = applyJsonPatch(doc, json::parse(R"([
    {"op":"add","path":"/a/c","value":2},
    {"op":"replace","path":"/a/b","value":10},
    {"op":"remove","path":"/list/0"},
    {"op":"copy","from":"/a/c","path":"/copied"},
    {"op":"move","from":"/a/b","path":"/moved"},
    {"op":"test","path":"/moved","value":10},
    {"op":"add","path":"/list/-","value":4}])"));
  ASSERT_TRUE(out.isOk()) << out.status().toString();
  EXPECT_EQ(*out, json::parse(R"({"a":{"c":2},"list":[2,3,4],"copied":2,"moved":10})"));
}

TEST(JsonPatchTest, Failures) {
  json doc = {{"a", 1}};
  auto failed_test = applyJsonPatch(doc, json::parse(R"([{"op":"test","path":"/a","value":2}])"));
  EXPECT_EQ(failed_test.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(applyJsonPatch(doc, json::parse(R"([{"op":"remove","path":"/nope"}])")).status().code(),
            Code::kInvalidArgument);
  EXPECT_EQ(applyJsonPatch(doc, json::parse(R"({"op":"add"})")).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(applyJsonPatch(doc, json::parse(R"([{"path":"/a"}])")).status().code(),
            Code::kFailedPrecondition);
  EXPECT_FALSE(applyJsonPatch(doc, json::parse(R"([{"op":"frobnicate","path":"/a"}])")).isOk());
}

// Was 10.3 s and 650 MB: each copy doubled the document (issue 9).
TEST(JsonPatchTest, SelfCopyingPatchStopsAtTheBudget) {
  json doc = {{"a", {{"x", std::string(10, 'x')}}}};
  json patch = json::array();
  for (int i = 0; i < 40; ++i)
    patch.push_back({{"op", "copy"}, {"from", "/a"}, {"path", "/a/c" + std::to_string(i)}});
  auto out = applyJsonPatch(doc, patch);
  ASSERT_EQ(out.status().code(), Code::kResourceExhausted) << out.status().toString();
  EXPECT_NE(out.status().message().find("would make the object larger than"), std::string::npos);
  DecodeLimits small;
  small.max_nodes = 10;
  EXPECT_EQ(
      applyJsonPatch(doc, json::parse(R"([{"op":"add","path":"/b","value":[1,2,3,4,5,6,7,8,9]}])"), small)
          .status()
          .code(),
      Code::kResourceExhausted);
  json many = json::array();
  for (int i = 0; i < 10001; ++i) many.push_back({{"op", "test"}, {"path", "/a"}, {"value", 1}});
  EXPECT_EQ(applyJsonPatch(doc, many).status().code(), Code::kResourceExhausted);
}

TEST(RemoveFieldPathTest, NestedAndIndexed) {
  json obj = json::parse(R"({"spec":{"foo":1,"template":{"spec":{"containers":[{"image":"x","bar":2}]}}}})");
  EXPECT_TRUE(removeFieldPath(obj, "spec.foo"));
  EXPECT_TRUE(removeFieldPath(obj, "spec.template.spec.containers[0].bar"));
  EXPECT_FALSE(removeFieldPath(obj, "spec.template.spec.containers[3].bar"));
  EXPECT_FALSE(removeFieldPath(obj, "spec.nothing"));
  EXPECT_EQ(obj, json::parse(R"({"spec":{"template":{"spec":{"containers":[{"image":"x"}]}}}})"));
}

}  // namespace
}  // namespace knap::api
