#include "common/json_path.h"

#include <gtest/gtest.h>

namespace knap {
namespace {

using nlohmann::json;

TEST(JsonPath, FindsNestedMembersAndNeverThrowsOnOtherShapes) {
  const json j = {{"metadata", {{"name", "hello"}, {"generation", 3}}}, {"spec", json::array({1, 2})}};
  EXPECT_EQ(stringAt(j, {"metadata", "name"}), "hello");
  EXPECT_EQ(stringAt(j["metadata"], "name"), "hello");
  EXPECT_EQ(stringAt(j, {"metadata", "generation"}), "");  // not a string
  EXPECT_EQ(stringAt(j, {"metadata", "missing"}), "");
  EXPECT_EQ(stringAt(j, {"spec", "x"}), "");  // an array is not an object
  EXPECT_EQ(stringAt(json("text"), "x"), "");
  EXPECT_EQ(stringAt(json(), {"a", "b"}), "");
  ASSERT_NE(jsonAt(j, {"metadata", "generation"}), nullptr);
  EXPECT_EQ(*jsonAt(j, {"metadata", "generation"}), 3);
  EXPECT_EQ(jsonAt(j, {}), &j);
  EXPECT_EQ(jsonAt(j, {"spec", "0"}), nullptr);
  EXPECT_TRUE(valueAt(j, {"metadata", "missing"}).is_null());
  EXPECT_EQ(valueAt(j, "spec").size(), 2u);
  EXPECT_TRUE(valueAt(json(7), "x").is_null());
  EXPECT_EQ(j.size(), 2u);  // nothing inserted
}

}  // namespace
}  // namespace knap
