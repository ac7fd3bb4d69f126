#include "api/server/tables.h"

#include <gtest/gtest.h>

namespace knap::api {
namespace {

using nlohmann::json;

TEST(TablesTest, RouteColumnsAndRows) {
  const ResourceInfo* route = findResource("routes");
  ASSERT_NE(route, nullptr);
  json obj = json::parse(R"({"metadata":{"name":"r","namespace":"default"},
    "status":{"url":"http://r.default.example.com","conditions":[
      {"type":"AllTrafficAssigned","status":"True"},
      {"type":"Ready","status":"False","reason":"RevisionMissing"}]}})");
  json t = makeTable(*route, {obj}, IncludeObject::kNone, "7");
  EXPECT_EQ(t["kind"], "Table");
  EXPECT_EQ(t["metadata"]["resourceVersion"], "7");
  ASSERT_EQ(t["columnDefinitions"].size(), 4u);
  EXPECT_EQ(t["rows"][0]["cells"],
            json::array({"r", "http://r.default.example.com", "False", "RevisionMissing"}));
  EXPECT_FALSE(t["rows"][0].contains("object"));
  json no_cols = makeTable(*route, {obj}, IncludeObject::kMetadata, "", false);
  EXPECT_TRUE(no_cols["columnDefinitions"].is_null());
  EXPECT_EQ(no_cols["rows"][0]["object"]["kind"], "PartialObjectMetadata");
}

TEST(TablesTest, ConfigurationColumns) {
  json cols = tableColumns(*findResource("configurations"));
  std::vector<std::string> names;
  for (const json& c : cols) names.push_back(c["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"Name", "LatestCreated", "LatestReady", "Ready", "Reason"}));
}

TEST(TablesTest, AcceptAndIncludeObject) {
  EXPECT_TRUE(acceptsTable("application/json;as=Table;v=v1;g=meta.k8s.io,application/json"));
  EXPECT_FALSE(acceptsTable("application/json"));
  EXPECT_EQ(parseIncludeObject("Object"), IncludeObject::kObject);
  EXPECT_EQ(parseIncludeObject("None"), IncludeObject::kNone);
  EXPECT_EQ(parseIncludeObject(""), IncludeObject::kMetadata);
}

}  // namespace
}  // namespace knap::api
