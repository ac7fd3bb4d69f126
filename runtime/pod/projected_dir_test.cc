#include "runtime/pod/projected_dir.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace knap::runtime {
namespace {

namespace fs = std::filesystem;

std::string readAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::string link(const fs::path& p) {
  char buf[256];
  ssize_t n = ::readlink(p.c_str(), buf, sizeof buf);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

class ProjectedDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/knap-projected-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(ProjectedDirTest, KubeletLayoutAndAtomicSwap) {
  bool changed = false;
  ASSERT_TRUE(writeProjectedDir(dir_, {{"greeting", "hello", 0644}, {"conf/app.yaml", "a: 1\n", 0600}}, &changed).isOk());
  EXPECT_TRUE(changed);
  std::string v1 = link(dir_ / "..data");
  ASSERT_EQ(v1.rfind("..", 0), 0u) << v1;
  EXPECT_EQ(link(dir_ / "greeting"), "..data/greeting");
  EXPECT_EQ(link(dir_ / "conf"), "..data/conf");
  EXPECT_EQ(readAll(dir_ / "greeting"), "hello");
  EXPECT_EQ(readAll(dir_ / "conf/app.yaml"), "a: 1\n");
  struct stat st {};
  ASSERT_EQ(::stat((dir_ / "conf/app.yaml").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  // Same content: nothing happens.
  ASSERT_TRUE(writeProjectedDir(dir_, {{"greeting", "hello", 0644}, {"conf/app.yaml", "a: 1\n", 0600}}, &changed).isOk());
  EXPECT_FALSE(changed);
  EXPECT_EQ(link(dir_ / "..data"), v1);

  // An update swaps ..data, drops removed keys and the old version.
  ASSERT_TRUE(writeProjectedDir(dir_, {{"greeting", "bonjour", 0644}}, &changed).isOk());
  EXPECT_TRUE(changed);
  std::string v2 = link(dir_ / "..data");
  EXPECT_NE(v2, v1);
  EXPECT_EQ(readAll(dir_ / "greeting"), "bonjour");
  EXPECT_FALSE(fs::exists(dir_ / "conf"));
  EXPECT_FALSE(fs::exists(dir_ / v1));
  EXPECT_FALSE(fs::exists(dir_ / "..data_tmp"));
}

TEST_F(ProjectedDirTest, RefusesEscapingPaths) {
  for (const char* bad : {"../x", "/etc/x", "a/../../x", "..data", "a//b", "./a"}) {
    EXPECT_FALSE(writeProjectedDir(dir_, {{bad, "x", 0644}}).isOk()) << bad;
  }
  EXPECT_FALSE(fs::exists(dir_.parent_path() / "x"));
  EXPECT_TRUE(writeProjectedDir(dir_, {{"ab", "x", 0644}}).isOk());
}

}  // namespace
}  // namespace knap::runtime
