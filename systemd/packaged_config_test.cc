// The packaged /etc/knap/config.yaml (systemd/config.yaml) cannot drift from
// knapd: uncommenting every commented default must give exactly
// defaultConfig(), and every key knapd accepts must be named in the file.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/config.h"

namespace knap {
namespace {

std::string readPackagedConfig() {
  std::ifstream in(KNAP_PACKAGED_CONFIG);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Commented defaults are "#section:" and "#  key: value"; prose is "# text".
std::string uncommentDefaults(const std::string& text) {
  std::istringstream in(text);
  std::string out;
  for (std::string line; std::getline(in, line);) {
    if (line.size() > 1 && line[0] == '#' && (line[1] != ' ' || line.rfind("#  ", 0) == 0))
      out += line.substr(1);
    out += "\n";
  }
  return out;
}

TEST(PackagedConfig, AsShippedIsTheDefault) {
  std::string text = readPackagedConfig();
  ASSERT_FALSE(text.empty()) << "cannot read " << KNAP_PACKAGED_CONFIG;
  auto c = parseConfig(text);
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_TRUE(*c == defaultConfig());
}

TEST(PackagedConfig, UncommentedDefaultsAreTheBuiltInDefaults) {
  std::string yaml = uncommentDefaults(readPackagedConfig());
  auto c = parseConfig(yaml);
  ASSERT_TRUE(c.isOk()) << c.status().toString() << "\n" << yaml;
  Config d = defaultConfig();
  // Per section, so a failure says where the file and knapd disagree.
  EXPECT_TRUE(c->autoscaler == d.autoscaler) << "autoscaler section differs from common/config.h";
  EXPECT_TRUE(c->defaults == d.defaults) << "defaults section differs from common/config.h";
  EXPECT_TRUE(c->network == d.network) << "network section differs from common/config.h";
  EXPECT_TRUE(c->domain == d.domain) << "domain section differs from common/config.h";
  EXPECT_TRUE(c->gc == d.gc) << "gc section differs from common/config.h";
  EXPECT_TRUE(c->deployment == d.deployment) << "deployment section differs from common/config.h";
  EXPECT_TRUE(c->knap == d.knap) << "knap section differs from common/config.h";
  EXPECT_TRUE(*c == d);
}

TEST(PackagedConfig, NamesEveryKeyKnapdAccepts) {
  std::string text = readPackagedConfig();
  std::vector<std::string> keys = configKeys();
  ASSERT_GT(keys.size(), 60u);
  for (const std::string& key : keys) {
    std::string name = key.substr(key.find('.') + 1);
    // As a commented default ("#  key:") or named in a prose comment.
    bool named = text.find("#  " + name + ":") != std::string::npos ||
                 text.find(" " + name + " ") != std::string::npos ||
                 text.find(" " + name + ",") != std::string::npos ||
                 text.find(" " + name + ".") != std::string::npos ||
                 text.find(" " + name + ")") != std::string::npos ||
                 text.find(" " + name + ":") != std::string::npos ||
                 text.find(" " + name + "\n") != std::string::npos;
    EXPECT_TRUE(named) << key << " is accepted by knapd but not in systemd/config.yaml";
  }
}

// The check itself: a drifted default is caught.
TEST(PackagedConfig, ADriftedDefaultIsCaught) {
  std::string yaml = uncommentDefaults(readPackagedConfig());
  size_t at = yaml.find("stable-window: \"60s\"");
  ASSERT_NE(at, std::string::npos);
  yaml.replace(at, std::string("stable-window: \"60s\"").size(), "stable-window: \"61s\"");
  auto c = parseConfig(yaml);
  ASSERT_TRUE(c.isOk()) << c.status().toString();
  EXPECT_FALSE(c->autoscaler == defaultConfig().autoscaler);
}

}  // namespace
}  // namespace knap
