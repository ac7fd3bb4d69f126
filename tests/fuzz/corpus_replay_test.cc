// Replays every file of the fuzz corpus (tests/fuzz/corpus/<target>/) through
// the same target functions the libFuzzer binaries run, in every build: the
// corpus is a regression suite, and each input must finish well under 1 s.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tests/fuzz/fuzz_targets.h"

namespace knap::fuzz {
namespace {

using Target = int (*)(const uint8_t*, size_t);

void replay(const std::string& name, Target target) {
  std::filesystem::path dir = std::filesystem::path(KNAP_FUZZ_CORPUS_DIR) / name;
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  size_t files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string data = ss.str();
    auto t0 = std::chrono::steady_clock::now();
    target(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // 5 s, not the fuzzer's 1 s (-timeout=1): CI machines are shared and
    // sanitizer-free builds still vary; this catches the minutes-long classes.
    EXPECT_LT(secs, 5.0) << entry.path();
    ++files;
  }
  EXPECT_GT(files, 0u) << dir;
}

TEST(FuzzCorpus, YamlDecode) {
  replay("yaml_decode", yamlDecode);
}
TEST(FuzzCorpus, JsonDecode) {
  replay("json_decode", jsonDecode);
}
TEST(FuzzCorpus, Admission) {
  replay("admission", admission);
}
TEST(FuzzCorpus, Patch) {
  replay("patch", patching);
}

}  // namespace
}  // namespace knap::fuzz
