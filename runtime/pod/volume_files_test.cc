// writeVolumeAtomically: the kubelet's ..data layout, modes, nested paths,
// the swap to a new version (old files gone, stale names removed), bad paths.
#include "runtime/pod/volume_files.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

namespace knap::runtime {
namespace {

namespace fs = std::filesystem;

class VolumeFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/knap-volume-test-XXXXXX";
    root_ = mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string dir() const { return root_ + "/vol"; }
  std::string read(const std::string& rel) const {
    std::ifstream in(dir() + "/" + rel, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  int mode(const std::string& rel) const {
    struct stat st {};
    if (::stat((dir() + "/" + rel).c_str(), &st) != 0) return -1;
    return static_cast<int>(st.st_mode & 07777);
  }
  size_t versions() const {
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir())) {
      std::string name = e.path().filename().string();
      if (name.rfind("..", 0) == 0 && name != "..data") ++n;
    }
    return n;
  }
  std::string root_;
};

TEST_F(VolumeFilesTest, WritesTheKubeletLayout) {
  std::vector<VolumeFile> files = {{"password", "s3cr3t", 0400}, {"conf/app.yaml", "a: 1\n", 0644}};
  ASSERT_TRUE(writeVolumeAtomically(dir(), files).isOk());
  EXPECT_EQ(read("password"), "s3cr3t");
  EXPECT_EQ(read("conf/app.yaml"), "a: 1\n");
  EXPECT_EQ(mode("password"), 0400);
  EXPECT_TRUE(fs::is_symlink(dir() + "/..data"));
  EXPECT_EQ(fs::read_symlink(dir() + "/password").string(), "..data/password");
  EXPECT_EQ(fs::read_symlink(dir() + "/conf").string(), "..data/conf");
  EXPECT_TRUE(volumeMatches(dir(), files));
  EXPECT_FALSE(volumeMatches(dir(), {{"password", "other", 0400}, {"conf/app.yaml", "a: 1\n", 0644}}));
  EXPECT_FALSE(volumeMatches(dir(), {{"password", "s3cr3t", 0644}, {"conf/app.yaml", "a: 1\n", 0644}}));
  EXPECT_EQ(versions(), 1u);
}

TEST_F(VolumeFilesTest, UpdateSwapsToANewVersion) {
  ASSERT_TRUE(writeVolumeAtomically(dir(), {{"a", "1", 0644}, {"gone", "x", 0644}}).isOk());
  std::string first = fs::read_symlink(dir() + "/..data").string();
  ASSERT_TRUE(writeVolumeAtomically(dir(), {{"a", "2", 0644}, {"new", "y", 0600}}).isOk());
  EXPECT_NE(fs::read_symlink(dir() + "/..data").string(), first);
  EXPECT_EQ(read("a"), "2");
  EXPECT_EQ(read("new"), "y");
  EXPECT_FALSE(fs::exists(dir() + "/gone"));
  EXPECT_FALSE(fs::is_symlink(dir() + "/gone"));
  EXPECT_EQ(versions(), 1u);
  // An empty volume is a valid version too.
  ASSERT_TRUE(writeVolumeAtomically(dir(), {}).isOk());
  EXPECT_FALSE(fs::exists(dir() + "/a"));
  EXPECT_TRUE(volumeMatches(dir(), {}));
}

TEST_F(VolumeFilesTest, RefusesPathsThatLeaveTheVolume) {
  for (const char* bad : {"../etc/passwd", "/abs", "a/../b", "", "a//b", "..data", "./x"}) {
    Status s = writeVolumeAtomically(dir(), {{bad, "x", 0644}});
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << bad;
  }
  EXPECT_EQ(writeVolumeAtomically(dir(), {{"a", "1", 0644}, {"a", "2", 0644}}).code(),
            Code::kInvalidArgument);
  EXPECT_FALSE(fs::exists(root_ + "/etc"));
}

}  // namespace
}  // namespace knap::runtime
