#include "api/quantity.h"

#include <gtest/gtest.h>

namespace knap::api {
namespace {

TEST(QuantityTest, ParsesKubernetesQuantities) {
  struct Case {
    const char* text;
    double want;
  };
  for (const auto& c : std::vector<Case>{{"1", 1},
                                         {"100m", 0.1},
                                         {"1.5", 1.5},
                                         {"128Mi", 134217728},
                                         {"1Gi", 1073741824},
                                         {"500M", 5e8},
                                         {"2k", 2000},
                                         {"1e3", 1000},
                                         {".5", 0.5},
                                         {"250u", 250e-6},
                                         {"+1Ki", 1024},
                                         {"-1", -1}}) {
    auto q = parseQuantity(std::string(c.text));
    ASSERT_TRUE(q.isOk()) << c.text << ": " << q.status().toString();
    EXPECT_DOUBLE_EQ(*q, c.want) << c.text;
  }
}

TEST(QuantityTest, RefusesGarbage) {
  for (const char* bad : {"", "lots", "1KB", "1 Gi", "Mi", "1.2.3", "1ki"}) {
    EXPECT_FALSE(parseQuantity(std::string(bad)).isOk()) << bad;
  }
}

TEST(QuantityTest, AcceptsJsonNumbersAndStrings) {
  EXPECT_DOUBLE_EQ(*parseQuantity(nlohmann::json(2)), 2);
  EXPECT_DOUBLE_EQ(*parseQuantity(nlohmann::json("2")), 2);
  EXPECT_FALSE(parseQuantity(nlohmann::json(true)).isOk());
}

TEST(QuantityTest, SuffixGrammar) {
  for (const char* bad : {"1e", "1e+", "1ex", "1Ki2", "1mi", "1Xi", "+", ".", "-.", "1..", "1e3Mi"}) {
    EXPECT_FALSE(parseQuantity(std::string(bad)).isOk()) << bad;
  }
  EXPECT_DOUBLE_EQ(*parseQuantity(std::string("1E-3")), 1e-3);
  EXPECT_DOUBLE_EQ(*parseQuantity(std::string("5.")), 5);
}

// Was a SIGSEGV: std::regex recursed once per character (issue 9).
TEST(QuantityTest, HugeDigitStringsAreRefusedQuickly) {
  for (size_t n : {65u, 30000u, 1000000u}) {
    auto q = parseQuantity(std::string(n, '9'));
    ASSERT_FALSE(q.isOk()) << n;
    EXPECT_NE(q.status().message().find("too long"), std::string::npos) << q.status().toString();
  }
  EXPECT_TRUE(parseQuantity(std::string(64, '1')).isOk());
}

}  // namespace
}  // namespace knap::api
