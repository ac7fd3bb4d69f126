#include "router/fields.h"

#include <gtest/gtest.h>

#include <string>

namespace knap::router {
namespace {

std::string joined(const Fields& f) {
  std::string out;
  for (const Fields::Field& x : f) {
    out += std::string(x.name_string()) + "=" + std::string(x.value()) + ";";
  }
  return out;
}

TEST(FieldsTest, KeepsInsertionOrderAndSpelling) {
  Fields f;
  f.insert("x-Custom", "1");
  f.insert(http::field::host, "Host", "a.example");
  f.insert(http::field::content_type, "text/plain");
  f.insert("X-CUSTOM", "2");
  EXPECT_EQ(joined(f), "x-Custom=1;Host=a.example;Content-Type=text/plain;X-CUSTOM=2;");
  EXPECT_EQ(f.size(), 4u);
  EXPECT_EQ(f.find(http::field::host)->value(), "a.example");
  EXPECT_EQ(f.find("content-TYPE")->value(), "text/plain");
  EXPECT_EQ(f["x-custom"], "1");  // the first of two
  EXPECT_EQ(f["absent"], "");
  EXPECT_EQ(f.find("absent"), f.end());
  // A name beast knows gets its id even when inserted by name.
  EXPECT_EQ(f.begin()->name(), http::field::unknown);
  Fields g;
  g.insert("content-length", "5");
  EXPECT_EQ(g.begin()->name(), http::field::content_length);
}

TEST(FieldsTest, EraseAndSet) {
  Fields f;
  f.insert("A", "1");
  f.insert(http::field::connection, "close");
  f.insert("a", "2");
  f.insert(http::field::connection, "x");
  f.insert("B", "3");
  EXPECT_EQ(f.erase("A"), 2u);
  EXPECT_EQ(joined(f), "Connection=close;Connection=x;B=3;");
  f.set(http::field::connection, "Upgrade");
  EXPECT_EQ(joined(f), "B=3;Connection=Upgrade;");
  auto it = f.erase(f.begin());
  EXPECT_EQ(it->value(), "Upgrade");
  f.clear();
  EXPECT_TRUE(f.empty());
  f.insert("C", "4");
  EXPECT_EQ(joined(f), "C=4;");
}

// Views stay valid across inserts and erases (the router holds a Host view
// while it appends X-Forwarded-*), including past the inline block and for
// a value that is a view into the same Fields.
TEST(FieldsTest, ViewsSurviveGrowth) {
  Fields f;
  f.insert(http::field::host, "svc.default.example.com");
  const std::string_view host = f.find(http::field::host)->value();
  const std::string big(Fields::kInlineBytes * 3, 'v');
  for (int i = 0; i < 50; ++i) f.insert("X-Filler-" + std::to_string(i), big);
  f.insert("X-Forwarded-Host", host);  // a view into f itself
  f.set(http::field::host, host);      // replaces the field the view came from
  EXPECT_EQ(host, "svc.default.example.com");
  EXPECT_EQ(f["x-forwarded-host"], "svc.default.example.com");
  EXPECT_EQ(f["host"], "svc.default.example.com");
  EXPECT_EQ(f["X-Filler-49"], big);
}

TEST(FieldsTest, CopiesOwnTheirBytes) {
  Fields a;
  a.insert("Name", "value");
  Fields b = a;
  Fields c = std::move(a);
  a.clear();
  a.insert("Other", "zzzzz");
  EXPECT_EQ(joined(b), "Name=value;");
  EXPECT_EQ(joined(c), "Name=value;");
  b = c;
  EXPECT_EQ(joined(b), "Name=value;");
}

// erase_if: one pass, the predicate sees every field once and in order,
// the survivors keep their order, and views taken meanwhile stay valid.
TEST(FieldsTest, EraseIfOnePassInOrder) {
  Fields f;
  const std::string big(Fields::kInlineBytes, 'b');
  for (int i = 0; i < 40; ++i) f.insert("F" + std::to_string(i), i % 10 == 0 ? big : std::to_string(i));
  std::string seen;
  std::string_view kept_view;
  const size_t removed = f.erase_if([&](const Fields::Field& x) {
    seen += std::string(x.name_string()) + ",";
    if (x.name_string() == "F30") kept_view = x.value();
    return x.name_string().size() == 2;  // F0..F9
  });
  EXPECT_EQ(removed, 10u);
  std::string want_seen, want_left;
  for (int i = 0; i < 40; ++i) want_seen += "F" + std::to_string(i) + ",";
  for (int i = 10; i < 40; ++i) want_left += "F" + std::to_string(i) + ";";
  EXPECT_EQ(seen, want_seen);
  std::string left;
  for (const Fields::Field& x : f) left += std::string(x.name_string()) + ";";
  EXPECT_EQ(left, want_left);
  EXPECT_EQ(kept_view, big);
  EXPECT_EQ(f["F31"], "31");
  EXPECT_EQ(f.erase_if([](const Fields::Field&) { return false; }), 0u);
  EXPECT_EQ(f.size(), 30u);
}

}  // namespace
}  // namespace knap::router
